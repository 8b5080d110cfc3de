#!/usr/bin/env python3
"""The index side's floor for `bench/verify_bench.sh`: every document of an index read by a plain
scroll (pages of PAGE, `_source` and versions included, as `sluice verify` asks), each page's JSON
parsed and dropped.

Usage: es_scroll_drain.py ES_URL INDEX PAGE
Prints one JSON line: {"docs": N, "secs": S}. Standard library only.
"""
import json
import sys
import time
import urllib.request


def call(url, method="GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read() or b"null")


def main():
    es, index, page = sys.argv[1], sys.argv[2], int(sys.argv[3])
    started = time.monotonic()
    call(f"{es}/{index}/_refresh", "POST")
    resp = call(f"{es}/{index}/_search?scroll=1m", "POST",
                {"size": page, "sort": ["_doc"], "version": True, "_source": True})
    docs = 0
    while resp["hits"]["hits"]:
        docs += len(resp["hits"]["hits"])
        resp = call(f"{es}/_search/scroll", "POST", {"scroll": "1m", "scroll_id": resp["_scroll_id"]})
    print(json.dumps({"docs": docs, "secs": round(time.monotonic() - started, 3)}))


if __name__ == "__main__":
    main()
