"""Prints `RECORDS AVG_KEY_BYTES AVG_VALUE_BYTES FIRST_MS LAST_MS` of a topic as a read_committed consumer sees it
(FIRST_MS, LAST_MS: the earliest and latest record timestamps, when the producer sent them; 0 for
an empty topic), and with
`--dump FILE` writes its records there (each a u32 LE key length, the key, a u32 LE value length, the
value; length 0xFFFFFFFF for none): what the plain producer of bench/kafka_bench.sh and
bench/snapshot_bench.sh sends again in the same run (`plain_produce --records-from FILE`), so both
contenders compress, partition and send the very same bytes.

The dump keeps the order in which the records were sent, as nearly as the topic tells it: a consumer
hands back each partition's records in runs of a fetch (thousands from one partition, then thousands
from the next), while the producer sent them row by row, each to its key's partition. Sent in the
consumer's order, each partition's queue fills three times as fast as the producer's did, so the
resend makes fewer, larger batches and is cheaper than the work it is compared with. So the records
are merged back by their timestamp (Sluice's is the event's, so one millisecond holds a few events),
and within one millisecond the partitions' records are interleaved evenly, as keys hashed over the
partitions are. `BENCH_DUMP_ORDER=fetch` keeps the consumer's order instead (for comparison).

Usage: python3 bench/topic_stats.py BROKER TOPIC [--dump FILE]
"""
import os
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
held = {}  # partition -> [(timestamp, key, value)] in the partition's order
arrival = []  # (index, its partition's records) in the consumer's order
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
        records = held.setdefault(m.partition(), [])
        arrival.append((len(records), records))
        records.append((ts, key, value))
if dump:
    if os.environ.get("BENCH_DUMP_ORDER") == "fetch":
        order = arrival
    else:
        # sort key: the timestamp, then the place within the partition's records of that millisecond
        # as a fraction, so that each millisecond's partitions take turns
        keyed = []
        for records in held.values():
            i = 0
            while i < len(records):
                j = i
                while j < len(records) and records[j][0] == records[i][0]:
                    j += 1
                keyed.extend((records[k][0], (k - i) / (j - i), k, records) for k in range(i, j))
                i = j
        keyed.sort(key=lambda o: (o[0], o[1]))
        order = [(k, records) for _, _, k, records in keyed]
    for k, records in order:
        for part in records[k][1:]:
            dump.write(struct.pack("<I", NONE if part is None else len(part)))
            dump.write(part or b"")
    dump.close()
print(n, kb // max(n, 1), vb // max(n, 1), first_ms or 0, last_ms or 0)
