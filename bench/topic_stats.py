"""Prints `RECORDS AVG_KEY_BYTES AVG_VALUE_BYTES` of a topic as a read_committed consumer sees it: the
shape the plain producer of bench/kafka_bench.sh and bench/snapshot_bench.sh sends in the same run.

Usage: python3 bench/topic_stats.py BROKER TOPIC
"""
import sys

from confluent_kafka import Consumer, TopicPartition

broker, topic = sys.argv[1], sys.argv[2]
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
    kb += len(m.key() or b"")
    vb += len(m.value() or b"")
print(n, kb // max(n, 1), vb // max(n, 1))
