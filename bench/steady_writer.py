#!/usr/bin/env python3
"""A steady write load for bench/latency_bench.sh: RATE row changes per second for SECONDS, as
multi-row INSERTs (one transaction every 10 ms, autocommit) piped to one `mariadb` client.

Usage: steady_writer.py PORT RATE SECONDS
Prints the rows written and the seconds it took on stdout.
"""
import subprocess
import sys
import time

port, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
tick = 0.01
per_tick = max(1, round(rate * tick))
client = subprocess.Popen(
    ["mariadb", "-h", "127.0.0.1", "-P", str(port), "-u", "root", "lat"],
    stdin=subprocess.PIPE,
    text=True,
)
start = time.monotonic()
n = 0
ticks = 0
while time.monotonic() - start < seconds:
    values = ",".join(f"({n + i}, 'row {n + i}', {i})" for i in range(per_tick))
    client.stdin.write(f"INSERT INTO t (id, note, k) VALUES {values};\n")
    client.stdin.flush()
    n += per_tick
    ticks += 1
    # the next tick on the schedule: no drift from the time the writes take
    delay = start + ticks * tick - time.monotonic()
    if delay > 0:
        time.sleep(delay)
client.stdin.close()
client.wait()
print(n, round(time.monotonic() - start, 2))
