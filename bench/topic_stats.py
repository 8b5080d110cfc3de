"""Prints `RECORDS AVG_KEY_BYTES AVG_VALUE_BYTES` of a topic as a read_committed consumer sees it, and with
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
eof = set()
while len(eof) < len(parts):
    m = c.poll(5)
    if m is None:
        break
    if m.error():
        eof.add(m.partition())
        continue
    n += 1
    key, value = m.key(), m.value()
    kb += len(key or b"")
    vb += len(value or b"")
    if dump:
        for part in (key, value):
            dump.write(struct.pack("<I", NONE if part is None else len(part)))
            dump.write(part or b"")
if dump:
    dump.close()
print(n, kb // max(n, 1), vb // max(n, 1))
