#!/usr/bin/env python3
"""python-mysql-replication over a live server, for bench/live_bench.sh.

Usage: live_bench_pmr.py HOST PORT USER FILE [POSITION]
Streams FILE from POSITION to its end (it stops at the rotation to the next file), touches every
value of every row (before and after images), prints one JSON line with the counts and elapsed
seconds. One file only: with blocking=False against MariaDB 10.11 the reader met a pymysql
OperationalError after the first file, "re-requested the connection" and streamed again without
end, so the benchmark bounds it to the file where the rate is measured.
"""
import json
import sys
import time

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

host, port, user, log_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
log_pos = int(sys.argv[5]) if len(sys.argv) > 5 else 4
t0 = time.monotonic()
stream = BinLogStreamReader(
    connection_settings={"host": host, "port": port, "user": user, "passwd": ""},
    server_id=51998,
    log_file=log_file,
    log_pos=log_pos,
    resume_stream=True,
    blocking=False,
    is_mariadb=True,
    only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
)
rows = values = events = 0
for ev in stream:
    if stream.log_file != log_file:
        break
    events += 1
    for row in ev.rows:
        rows += 1
        for key in ("values", "before_values", "after_values"):
            img = row.get(key)
            if img:
                for v in img.values():
                    values += v is not None
stream.close()
secs = time.monotonic() - t0
print(json.dumps({"mode": "python-mysql-replication", "events": events, "rows": rows, "values": values,
                  "secs": round(secs, 3), "rows_per_s": round(rows / secs)}))
