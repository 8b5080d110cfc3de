#!/usr/bin/env python3
"""Checks that a broker gives the publisher what it relies on, with librdkafka (confluent-kafka).

    check_broker.py BROKER produce   # plain + transactional writes (committed, aborted, open), fencing
    check_broker.py BROKER verify    # read back: counts under read_committed / read_uncommitted

Topics `it.plain` (3 partitions) and `it.tx` (1 partition) must exist (broker.sh create-topic).
`verify` runs again after a broker restart to show the data survived. Exit 0 when every check holds.
Needs `pip install confluent-kafka` (wheels bundle librdkafka).
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

PLAIN, TX = "it.plain", "it.tx"


def fail(msg):
    print(f"check_broker.py: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def read_all(broker, topic, isolation, partitions, idle_s=3.0):
    c = Consumer({
        "bootstrap.servers": broker,
        "group.id": f"check-{isolation}-{time.time()}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, last = [], time.monotonic()
    while time.monotonic() - last < idle_s:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            fail(f"consume {topic}: {m.error()}")
        out.append((m.key(), m.value()))
        last = time.monotonic()
    c.close()
    return out


def produce(broker):
    p = Producer({"bootstrap.servers": broker, "enable.idempotence": True})
    for i in range(10):
        p.produce(PLAIN, key=f"k{i}".encode(), value=f"plain-{i}".encode())
    if p.flush(10) != 0:
        fail("plain produce did not complete")

    tx = Producer({"bootstrap.servers": broker, "transactional.id": "check-tx"})
    tx.init_transactions(10)
    tx.begin_transaction()
    for i in range(5):
        tx.produce(TX, key=b"c", value=f"committed-{i}".encode())
    tx.commit_transaction(10)
    tx.begin_transaction()
    for i in range(3):
        tx.produce(TX, key=b"a", value=f"aborted-{i}".encode())
    tx.flush(10)
    tx.abort_transaction(10)
    tx.begin_transaction()
    for i in range(2):
        tx.produce(TX, key=b"o", value=f"open-{i}".encode())
    tx.flush(10)

    # the open transaction must stay invisible to read_committed
    seen = [v for _, v in read_all(broker, TX, "read_committed", 1)]
    if seen != [f"committed-{i}".encode() for i in range(5)]:
        fail(f"read_committed during an open transaction saw {seen}")

    # a second producer with the same transactional.id fences the first and aborts its open transaction
    tx2 = Producer({"bootstrap.servers": broker, "transactional.id": "check-tx"})
    tx2.init_transactions(10)
    try:
        tx.commit_transaction(10)
        fail("the fenced producer could still commit")
    except KafkaException as e:
        print(f"fenced producer refused as expected: {e.args[0].name()}")
    tx2.begin_transaction()
    tx2.produce(TX, key=b"c", value=b"committed-by-second")
    tx2.commit_transaction(10)
    print("produce: ok")


def verify(broker):
    plain = read_all(broker, PLAIN, "read_committed", 3)
    if sorted(v for _, v in plain) != sorted(f"plain-{i}".encode() for i in range(10)):
        fail(f"{PLAIN}: {plain}")
    committed = [v.decode() for _, v in read_all(broker, TX, "read_committed", 1)]
    want = [f"committed-{i}" for i in range(5)] + ["committed-by-second"]
    if committed != want:
        fail(f"{TX} read_committed: {committed}, want {want}")
    uncommitted = [v.decode() for _, v in read_all(broker, TX, "read_uncommitted", 1)]
    print(f"verify: ok ({len(plain)} plain, {len(committed)} committed; read_uncommitted sees {len(uncommitted)})")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in ("produce", "verify"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    {"produce": produce, "verify": verify}[sys.argv[2]](sys.argv[1])
