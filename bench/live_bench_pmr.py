#!/usr/bin/env python3
"""python-mysql-replication over a live server, for bench/live_bench.sh.

Usage: live_bench_pmr.py HOST PORT USER FILE [POSITION]
Reads the rows of FILE, touches every value of every row (before and after images), prints one
JSON line with the counts and elapsed seconds. It stops at the ROTATE event the server wrote at
the end of FILE (RotateEvent is asked for with the rows events so that the loop sees it; the
artificial ROTATE events a dump sends have timestamp 0), as live_stream and
`sluice dump --stop-position` stop there: every contender covers the same events. Without that
bound the reader met a pymysql OperationalError after the last file against MariaDB 10.11,
"re-requested the connection" and streamed again without end. POSITION is passed on, but the
reader ignores it in MariaDB mode (see below).
"""
import json
import sys
import time

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import RotateEvent
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
    only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, RotateEvent],
)
rows = values = events = 0
# With is_mariadb=True the reader ignores log_file/log_pos and dumps from the server's first
# binlog (an empty file name in COM_BINLOG_DUMP), so the file being read is followed through the
# ROTATE events and rows are counted only inside FILE.
current = None
for ev in stream:
    if isinstance(ev, RotateEvent):
        if ev.timestamp != 0 and current == log_file:
            break  # the ROTATE written at the end of FILE
        current = ev.next_binlog
        continue
    if current != log_file:
        continue
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
