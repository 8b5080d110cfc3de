#!/usr/bin/env python3
"""Waits until `sluice run` has committed a checkpoint at or past a binlog position.

Usage: wait_checkpoint.py BROKER SOURCE_NAME FILE POSITION [TOPIC]
Reads TOPIC (default sluice.__positions) with read_committed, keeps the last checkpoint keyed by
SOURCE_NAME, and prints the time (seconds since the epoch) at which one reached (FILE, POSITION);
binlog file names of one server compare in order. Exits 1 after 30 minutes without one.
"""
import json
import sys
import time

from confluent_kafka import Consumer, TopicPartition

broker, name, file, pos = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
topic = sys.argv[5] if len(sys.argv) > 5 else "sluice.__positions"
c = Consumer({"bootstrap.servers": broker, "group.id": f"wait-{name}", "isolation.level": "read_committed",
              "enable.auto.commit": False, "enable.partition.eof": True})
deadline = time.time() + 1800
while time.time() < deadline:
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    except Exception:  # the topic does not exist yet
        time.sleep(0.2)
        continue
    if hi > lo:
        c.assign([TopicPartition(topic, 0, max(lo, hi - 20))])
        last = None
        while True:
            m = c.poll(2)
            if m is None or m.error():
                break
            if m.key() == name.encode():
                last = json.loads(m.value())
        if last and (last["file"], last["position"]) >= (file, pos):
            print(time.time())
            sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
