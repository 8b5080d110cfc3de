#!/usr/bin/env bash
# `sluice archive` throughput (issue 23): one MariaDB server holding the benchmark workload (as
# bench/live_bench.sh: bench/gen_bench_binlog.sh, 1.4 M row changes by default), in one run, over
# loopback, BENCH_RUNS rounds (default 3) interleaved:
#   (a) the raw drain of the replication stream: a non-blocking COM_BINLOG_DUMP of each of the
#       server's files to its ROTATE, one after another, events counted, nothing decoded
#       (crates/publisher/examples/live_stream.rs) - the ceiling;
#   (b) `sluice archive --until-end` into an empty directory: every file the server has, CRC32
#       checked, written and synced, the index kept; its peak RSS (/usr/bin/time).
# The same bytes, from the page cache (every file is read once first). Each round's copies are
# compared with the server's files (cmp).
#
# Usage: bench/archive_bench.sh [ROWS]   Env: SLUICE_WORK, CARGO_TARGET_DIR, BENCH_RUNS, and
# BENCH_ARCHIVE_DIR (where the archive goes; default under SLUICE_WORK: a tmpfs such as /dev/shm/x
# takes the disk out of the measure).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=../integration/lib/mariadb.sh
. "$repo/integration/lib/mariadb.sh"

rows="${1:-1000000}"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
# shellcheck source=lib_server.sh
. "$here/lib_server.sh"
bench_server archive_bench "$rows"

mariadb_restart "$name" >/dev/null
trap 'mariadb_stop "$name"' EXIT
port="$(mariadb_port "$name")"
echo "archive_bench: server on port $port" >&2
mariadb_sql "$name" "SHOW BINARY LOGS" --batch --skip-column-names >&2

work="$SLUICE_WORK/archive_bench"
rm -rf "$work" && mkdir -p "$work"
cat >"$work/sluice.toml" <<TOML
[source]
name = "bench"
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
[archive]
to = "${BENCH_ARCHIVE_DIR:-$work/archive}"
server_id = 51004
TOML
now() { date +%s.%N; }
runs="${BENCH_RUNS:-3}"
# warm the page cache so that the first contender does not pay for the disk
logs="$(mariadb_sql "$name" "SHOW BINARY LOGS" --batch --skip-column-names | awk '{print $1}')"
for f in $logs; do cat "$data/$f" >/dev/null; done
results="$work/runs"
: >"$results"
for i in $(seq 1 "$runs"); do
    echo "archive_bench: round $i of $runs" >&2
    for f in $logs; do "$target/examples/live_stream" drain 127.0.0.1 "$port" root "$f"; done >"$work/drain"
    python3 -c 'import json,sys; rs=[json.loads(l) for l in open(sys.argv[1])]; print(json.dumps({"mode":"drain","bytes":sum(r["bytes"] for r in rs),"secs":sum(r["secs"] for r in rs)}))' "$work/drain" >>"$results"
    archive="${BENCH_ARCHIVE_DIR:-$work/archive}"
    rm -rf "$archive"
    sync
    t0="$(now)"
    /usr/bin/time -f "%M" -o "$work/rss" "$target/sluice" archive --until-end --config "$work/sluice.toml" \
        2>"$work/archive.err"
    t1="$(now)"
    bytes="$(find "$archive" -name '*.[0-9]*' -type f -printf '%s\n' | awk '{s+=$1} END {print s}')"
    for f in $logs; do cmp "$archive/$f" "$data/$f" >&2; done
    echo "{\"mode\":\"archive\",\"bytes\":$bytes,\"secs\":$(printf '%.3f' "$(echo "$t1 - $t0" | bc -l)"),\"rss_kb\":$(cat "$work/rss")}" >>"$results"
done
rm -rf "${BENCH_ARCHIVE_DIR:-$work/archive}"

python3 - "$results" "$first" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
drain = [r for r in runs if r["mode"] == "drain"]
arch = [r for r in runs if r["mode"] == "archive"]
mbps = lambda r: r["bytes"] / 1e6 / r["secs"]
secs = lambda rs: ", ".join("%.2f" % r["secs"] for r in rs)
d, a = statistics.median(map(mbps, drain)), statistics.median(map(mbps, arch))
print(f"| contender | bytes | seconds (runs) | MB/s (median) | peak RSS |")
print(f"|---|---:|---|---:|---:|")
print(f"| raw drain of every file (events counted) | {drain[0]['bytes']:,} | "
      f"{secs(drain)} | {d:,.0f} | |")
print(f"| sluice archive --until-end (every file, checked, written, synced) | {arch[0]['bytes']:,} | "
      f"{secs(arch)} | {a:,.0f} | "
      f"{statistics.median(r['rss_kb'] for r in arch) / 1024:.0f} MiB |")
print(f"\nthe raw drain is {d / a:.2f}x the archive's rate (goal <= 1.2x)")
PY
