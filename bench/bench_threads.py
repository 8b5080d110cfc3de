#!/usr/bin/env python3
"""A process's CPU seconds by thread and by role, for the benchmarks' reports.

Roles: Sluice's pipeline (its main thread; the plain producer's producing thread, `plain_produce`),
its reads (tokio's workers: the replication stream and a snapshot's chunk reads), librdkafka's broker
threads, and the rest.

Usage: bench_threads.py roles PID          CPU seconds by role of process PID so far
       bench_threads.py roles-json FILE    the same from plain_produce's JSON line (its `threads`)
       bench_threads.py instructions FILE...  instructions by role from callgrind's files of one
                                           process run with --separate-threads=yes (one per thread)
All print "pipeline read librdkafka other".
"""
import json
import os
import sys

ROLES = ("pipeline (main)", "read (tokio workers)", "librdkafka broker", "other")


def cpu_of(stat_path, hz):
    """(command name, CPU seconds) of a /proc stat file."""
    with open(stat_path) as f:
        text = f.read()
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    return comm, (int(fields[11]) + int(fields[12])) / hz


def slices_of(schedstat_path):
    """Times a thread was put on a CPU so far (the third field of its schedstat): each
    wakeup from a wait and each preemption counts one. 0 where the kernel keeps no
    schedstat (the CPU figures do not depend on it)."""
    try:
        with open(schedstat_path) as f:
            return int(f.read().split()[2])
    except (OSError, IndexError, ValueError):
        return 0


def by_thread(pid):
    """({thread name: CPU seconds}, {thread name: times put on a CPU}) of process PID so far; the
    main thread as `main`, whatever the binary's file is called. OSError when the process is gone."""
    hz = os.sysconf("SC_CLK_TCK")
    secs, slices = {}, {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            comm, s = cpu_of(f"/proc/{pid}/task/{task}/stat", hz)
            n = slices_of(f"/proc/{pid}/task/{task}/schedstat")
        except OSError:  # the thread ended
            continue
        if task == str(pid):
            comm = "main"
        secs[comm] = secs.get(comm, 0.0) + s
        slices[comm] = slices.get(comm, 0) + n
    return secs, slices


def by_role(threads):
    """{role: sum} of {thread name: figure}."""
    roles = {}
    for name, v in threads.items():
        role = ("librdkafka broker" if name.startswith("rdk:broker") else
                "read (tokio workers)" if name.startswith("tokio-rt") else
                "pipeline (main)" if name in ("main", "plain_produce") else "other")
        roles[role] = roles.get(role, 0.0) + v
    return roles


def instructions_by_role(files):
    """{role: instructions} of callgrind's per-thread files (`<out>-01`, `-02`, ...). Callgrind
    does not keep thread names, so a thread's role is read from what it ran: the first file is the
    main thread; a thread that ran librdkafka's broker loop is one of its broker threads; one that
    ran tokio's multi-thread worker loop is a worker (the reads)."""
    roles = {}
    for path in sorted(files):
        total, text = 0, ""
        with open(path, errors="replace") as f:
            text = f.read()
        for line in text.splitlines():
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
                break
        role = ("pipeline (main)" if path.endswith("-01") else
                "librdkafka broker" if "rd_kafka_broker_thread_main" in text else
                "read (tokio workers)" if "multi_thread::worker" in text else "other")
        roles[role] = roles.get(role, 0) + total
    return roles


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "instructions":
        roles = instructions_by_role(sys.argv[2:])
        print(" ".join(str(roles.get(r, 0)) for r in ROLES))
        sys.exit(0)
    if len(sys.argv) != 3 or sys.argv[1] not in ("roles", "roles-json"):
        sys.exit(__doc__)
    if sys.argv[1] == "roles":
        threads = by_thread(int(sys.argv[2]))[0]
    else:
        with open(sys.argv[2]) as f:
            threads = json.load(f).get("threads", {})
    roles = by_role(threads)
    print(" ".join(f"{roles.get(r, 0.0):.2f}" for r in ROLES))
