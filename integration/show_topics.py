#!/usr/bin/env python3
"""Prints Sluice's change events as a Kafka consumer sees them, decoded.

    show_topics.py BROKER REGISTRY_URL TOPIC_PREFIX [--min N] [--timeout S]

Reads every topic named PREFIX.<db>.<table> from the beginning with a read_committed consumer
(confluent-kafka, i.e. librdkafka), decodes each Confluent-framed Avro key and value with the
writer schema fetched from the Schema Registry by id (fastavro), and prints one line per record:
the topic, partition and offset, the key, and the value (op, before, after, source position,
transaction) or "tombstone". It waits until at least N records are committed (default 1) or S
seconds have passed (default 60). Used by `make demo`; independent of Sluice's own code.
"""

import io
import json
import struct
import sys
import time
import urllib.request

from confluent_kafka import Consumer, KafkaError, TopicPartition
from fastavro import parse_schema, schemaless_reader

_schemas = {}


def schema(registry, schema_id):
    if schema_id not in _schemas:
        with urllib.request.urlopen(f"{registry}/schemas/ids/{schema_id}") as r:
            _schemas[schema_id] = parse_schema(json.loads(json.load(r)["schema"]))
    return _schemas[schema_id]


def decode(registry, data):
    if data is None:
        return None
    magic, schema_id = struct.unpack(">bI", data[:5])
    if magic != 0:
        raise ValueError(f"not Confluent-framed Avro (magic byte {magic})")
    return schemaless_reader(io.BytesIO(data[5:]), schema(registry, schema_id))


def plain(v):
    """JSON-friendly: bytes as hex, decimals and dates as text."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return "0x" + v.hex()
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def read_all(broker, registry, prefix):
    c = Consumer({
        "bootstrap.servers": broker,
        "group.id": "sluice-demo-viewer",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    })
    md = c.list_topics(timeout=10)
    topics = sorted(t for t in md.topics if t.startswith(prefix + ".") and ".__" not in t)
    parts = [TopicPartition(t, p, 0) for t in topics for p in sorted(md.topics[t].partitions)]
    out = []
    if not parts:
        c.close()
        return out
    c.assign(parts)
    at_end = set()
    deadline = time.time() + 30
    while len(at_end) < len(parts) and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add((m.topic(), m.partition()))
                continue
            raise RuntimeError(m.error())
        at_end.discard((m.topic(), m.partition()))
        out.append((m.topic(), m.partition(), m.offset(), decode(registry, m.key()), decode(registry, m.value())))
    c.close()
    return out


def main():
    args = sys.argv[1:]
    opts = {"--min": 1, "--timeout": 60}
    for flag in list(opts):
        if flag in args:
            i = args.index(flag)
            opts[flag] = int(args[i + 1])
            del args[i:i + 2]
    broker, registry, prefix = args
    deadline = time.time() + opts["--timeout"]
    records = read_all(broker, registry, prefix)
    while len(records) < opts["--min"] and time.time() < deadline:
        time.sleep(1)
        records = read_all(broker, registry, prefix)
    # transaction order: source position, then the order within the transaction; a tombstone
    # right after the record before it in its partition
    def order(r):
        v = r[4] or {}
        src = v.get("source") or {}
        tx = v.get("transaction") or {}
        return (src.get("file", ""), src.get("pos", 0), tx.get("total_order", 0))
    ranked, last = [], {}
    for r in sorted(records, key=lambda r: (r[0], r[1], r[2])):
        base = order(r) if r[4] is not None else last.get((r[0], r[1]), ("", 0, 0))
        last[(r[0], r[1])] = base
        ranked.append(((base, r[4] is None, r[0], r[2]), r))
    for _, (topic, partition, offset, key, value) in sorted(ranked, key=lambda x: x[0]):
        head = f"{topic} [{partition}@{offset}] key={json.dumps(plain(key), ensure_ascii=False)}"
        if value is None:
            print(f"{head} tombstone")
            continue
        src = value.get("source", {})
        shown = {
            "op": value.get("op"),
            "before": plain(value.get("before")),
            "after": plain(value.get("after")),
            "source": f"{src.get('file')}:{src.get('pos')}" + (f" gtid {src['gtid']}" if src.get("gtid") else ""),
        }
        print(f"{head}\n    {json.dumps(shown, ensure_ascii=False)}")
    print(f"({len(records)} records)", file=sys.stderr)
    return 0 if len(records) >= opts["--min"] else 1


if __name__ == "__main__":
    sys.exit(main())
