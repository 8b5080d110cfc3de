#!/usr/bin/env python3
"""Waits until `sluice run` has committed a checkpoint at or past a binlog position.

Usage: wait_checkpoint.py [--window FILE PID] BROKER SOURCE_NAME FILE POSITION [TOPIC]
Reads TOPIC (default sluice.__positions) with read_committed, and prints the time (seconds since the
epoch) at which it saw a checkpoint keyed by SOURCE_NAME at or past (FILE, POSITION); binlog file
names of one server compare in order. Exits 1 after 30 minutes without one.

That time comes late by this script's polling (a few hundred ms). `--window FILE PID` also writes,
as JSON to FILE, what a like-for-like comparison needs: `checkpoint_ms`, the timestamp librdkafka
gave the first such checkpoint record when Sluice produced it (the last record of the Kafka
transaction that covers the position, sent just before its commit), and `cpu`, the CPU seconds of
process PID sampled every 20 ms as `[time, seconds, {thread name: seconds}]` (the main thread as `main`), so that the CPU
Sluice spent between two instants, in all and per thread, can be read off.
"""
import json
import os
import sys
import threading
import time

from confluent_kafka import Consumer, TopicPartition

from bench_threads import by_thread, cpu_of

args = sys.argv[1:]
window = None
if args and args[0] == "--window":
    window, pid, args = args[1], int(args[2]), args[3:]
broker, name, file, pos = args[0], args[1], args[2], int(args[3])
topic = args[4] if len(args) > 4 else "sluice.__positions"

samples = []
done = threading.Event()


def sample_cpu():
    hz = os.sysconf("SC_CLK_TCK")
    while not done.is_set():
        try:
            now, (_, total) = time.time(), cpu_of(f"/proc/{pid}/stat", hz)
            by_thread_now, slices = by_thread(pid)
            samples.append((now, total, by_thread_now, slices))
        except OSError:  # the process is gone
            return
        time.sleep(0.02)


if window:
    threading.Thread(target=sample_cpu, daemon=True).start()

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
        c.assign([TopicPartition(topic, 0, max(lo, hi - 200))])
        first = None
        while True:
            m = c.poll(2)
            if m is None or m.error():
                break
            if m.key() == name.encode() and first is None:
                cp = json.loads(m.value())
                if (cp["file"], cp["position"]) >= (file, pos):
                    first = m.timestamp()[1]
        if first is not None:
            seen = time.time()
            if window:
                done.set()
                with open(window, "w") as f:
                    json.dump({"checkpoint_ms": first, "cpu": samples}, f)
            print(seen)
            sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
