#!/usr/bin/env python3
"""An Elasticsearch stand-in that stores nothing: it answers the requests `sluice sink elasticsearch`
makes (GET /, index mappings, `_bulk`) at once, every bulk item a success. It measures the sink's
own cost per document (Kafka, decoding, building the bulk body), which no engine installable here lets
show: noida-db and osmem-server index a few thousand documents a second at best. Not a test double for
correctness: nothing is checked or kept but the mappings.

Usage: es_null_engine.py PORT      (prints PORT=<n> once listening; 0 picks one)
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAPPINGS = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_GET(self):
        self.body()
        if self.path == "/":
            return self.reply(200, {"version": {"number": "0-null"}, "tagline": "null engine"})
        if self.path.endswith("/_mapping"):
            index = self.path.strip("/").split("/")[0]
            if index not in MAPPINGS:
                return self.reply(404, {"error": {"type": "index_not_found_exception"}, "status": 404})
            return self.reply(200, {index: {"mappings": MAPPINGS[index]}})
        return self.reply(404, {})

    def do_PUT(self):
        body = json.loads(self.body() or b"{}")
        parts = self.path.strip("/").split("/")
        if len(parts) == 1:
            MAPPINGS[parts[0]] = body.get("mappings", {})
        elif parts[1] == "_mapping":
            MAPPINGS.setdefault(parts[0], {}).setdefault("properties", {}).update(body.get("properties", {}))
        return self.reply(200, {"acknowledged": True})

    def do_POST(self):
        body = self.body()
        if not self.path.startswith("/_bulk"):
            return self.reply(200, {})
        items = []
        for line in body.split(b"\n"):
            if line.startswith(b'{"index"'):
                items.append(b'{"index":{"status":201,"result":"created"}}')
            elif line.startswith(b'{"delete"'):
                items.append(b'{"delete":{"status":200,"result":"deleted"}}')
        self.reply(200, b'{"took":0,"errors":false,"items":[' + b",".join(items) + b"]}")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print(f"PORT={server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
