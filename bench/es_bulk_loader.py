#!/usr/bin/env python3
"""The baseline for `sluice sink elasticsearch`: a plain bulk loader of the same documents.

Usage: es_bulk_loader.py ES_URL SOURCE_INDEX TARGET_INDEX BATCH
Reads every document of SOURCE_INDEX (scroll; not timed) with its mapping, creates TARGET_INDEX with
the same mapping, then sends the documents (the same _id and _source, external versions as the sink
sends) to TARGET_INDEX in `_bulk` requests of BATCH actions, one after the other from one client, as
fast as the engine answers. Prints one line: documents, seconds, documents/s. Standard library only.
"""
import json
import sys
import time
import urllib.request


def call(url, method="GET", body=None, ctype="application/json"):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read() or b"null")


def main():
    es, source, target, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    mapping = call(f"{es}/{source}/_mapping")[source]["mappings"]
    call(f"{es}/{source}/_refresh", "POST")
    docs = []
    page = call(f"{es}/{source}/_search?scroll=5m", "POST", {"size": 5000, "version": True})
    while page["hits"]["hits"]:
        docs += [(h["_id"], h.get("_version", 1), h["_source"]) for h in page["hits"]["hits"]]
        page = call(f"{es}/_search/scroll", "POST", {"scroll": "5m", "scroll_id": page["_scroll_id"]})
    if not docs:
        sys.exit(f"no document in {source}")
    call(f"{es}/{target}", "PUT", {"mappings": mapping})
    bodies = []
    for i in range(0, len(docs), batch):
        lines = []
        for _id, version, src in docs[i:i + batch]:
            meta = {"index": {"_index": target, "_id": _id, "version": version, "version_type": "external"}}
            lines.append(json.dumps(meta, separators=(",", ":")))
            lines.append(json.dumps(src, separators=(",", ":"), ensure_ascii=False))
        bodies.append(("\n".join(lines) + "\n").encode())
    started = time.time()
    for body in bodies:
        r = call(f"{es}/_bulk", "POST", body, "application/x-ndjson")
        bad = [i for i in r["items"] if list(i.values())[0]["status"] >= 300]
        if bad:
            sys.exit(f"bulk errors: {bad[:3]}")
    seconds = time.time() - started
    print(f"{len(docs)} {seconds:.2f} {len(docs) / seconds:.0f}")


if __name__ == "__main__":
    main()
