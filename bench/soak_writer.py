#!/usr/bin/env python3
"""One writer of `bench/soak.sh`: prints SQL for a `mariadb` client for SECONDS, as fast as the
client takes it (the pipe's back-pressure sets the pace), then writes the number of row changes it
made to WORK/expected.N.

Usage: soak_writer.py WORK N SECONDS

Every statement is its own transaction and changes exactly one row: inserts of fresh ids (writer N
owns ids N * 10^12 + i), updates and deletes of ids it knows are live. So the count is exact.
"""
import random
import sys
import time

work, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rng = random.Random(n)
base = n * 10**12
live = []
next_id = 0
changes = 0
deadline = time.time() + seconds
out = sys.stdout
buf = []
while time.time() < deadline:
    for _ in range(200):
        r = rng.random()
        if r < 0.6 or len(live) < 100:
            next_id += 1
            i = base + next_id
            live.append(i)
            buf.append(
                f"INSERT INTO soak.t VALUES ({i}, {rng.randrange(1000)}, 'v{next_id}', {rng.randrange(10**8) / 100}, "
                f"NOW(6), REPEAT('n', {rng.randrange(150)}));"
            )
        elif r < 0.9:
            i = live[rng.randrange(len(live))]
            buf.append(f"UPDATE soak.t SET k = k + 1, amount = amount + 0.01 WHERE id = {i};")
        else:
            i = live.pop(rng.randrange(len(live)))
            buf.append(f"DELETE FROM soak.t WHERE id = {i};")
        changes += 1
    out.write("\n".join(buf) + "\n")
    buf.clear()
out.flush()
with open(f"{work}/expected.{n}", "w") as f:
    f.write(f"{changes}\n")
