"""Prints `RECORDS AVG_KEY_BYTES AVG_VALUE_BYTES FIRST_MS LAST_MS` of a topic as a read_committed consumer sees it
(FIRST_MS, LAST_MS: the earliest and latest record timestamps, when the producer sent them; 0 for
an empty topic), and with
`--dump FILE` writes its records there (each a u32 LE key length, the key, a u32 LE value length, the
value; length 0xFFFFFFFF for none): what the plain producer of bench/kafka_bench.sh and
bench/snapshot_bench.sh sends again in the same run (`plain_produce --records-from FILE`), so both
contenders compress, partition and send the very same bytes.

Usage: python3 bench/topic_stats.py BROKER TOPIC [--dump FILE]
"""
import struct
import sys

from confluent_kafka import Consumer, TopicPartition

broker, topic = sys.argv[1], sys.argv[2]
dump = open(sys.argv[4], "wb", buffering=1 << 20) if len(sys.argv) > 4 and sys.argv[3] == "--dump" else None
NONE = 0xFFFFFFFF
c = Consumer({"bootstrap.servers": broker, "group.id": "bench-stats", "isolation.level": "read_committed",
              "receive.message.max.bytes": 1000000000, "max.partition.fetch.bytes": 1048576,
              "enable.auto.commit": False, "enable.partition.eof": True})
md = c.list_topics(topic, timeout=10)
parts = sorted(md.topics[topic].partitions)
c.assign([TopicPartition(topic, p, 0) for p in parts])
n = kb = vb = 0
first_ms = last_ms = None
eof = set()
while len(eof) < len(parts):
    m = c.poll(5)
    if m is None:
        break
    if m.error():
        eof.add(m.partition())
        continue
    n += 1
    ts = m.timestamp()[1]
    first_ms = ts if first_ms is None else min(first_ms, ts)
    last_ms = ts if last_ms is None else max(last_ms, ts)
    key, value = m.key(), m.value()
    kb += len(key or b"")
    vb += len(value or b"")
    if dump:
        for part in (key, value):
            dump.write(struct.pack("<I", NONE if part is None else len(part)))
            dump.write(part or b"")
if dump:
    dump.close()
print(n, kb // max(n, 1), vb // max(n, 1), first_ms or 0, last_ms or 0)
