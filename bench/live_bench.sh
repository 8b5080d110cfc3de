#!/usr/bin/env bash
# Live replication throughput (issue 3 acceptance): one MariaDB server holding the benchmark workload,
# streamed over loopback, in one run, by
#   (a) the raw drain: a non-blocking COM_BINLOG_DUMP read to the end, events counted, nothing decoded
#       (crates/publisher/examples/live_stream.rs drain) - the ceiling;
#   (b) `sluice dump --source ... > /dev/null` (JSON lines rendered and written), and the decoder alone
#       (live_stream.rs decode: every event and every value decoded, nothing rendered);
#   (c) python-mysql-replication's BinLogStreamReader reading every value of every row
#       (bench/live_bench_pmr.py; `pip install mysql-replication pymysql` when missing), over the first
#       file only (the "full" variant, 1.4 M row changes by default): see the note in live_bench_pmr.py.
#
# Usage: bench/live_bench.sh [ROWS]      (ROWS as for gen_bench_binlog.sh, default 1000000)
# The server's data comes from bench/gen_bench_binlog.sh run with BENCH_KEEP_DATADIR=1 (its "full" and
# "mixed" variants: 2 x 1.4 M row changes by default, streamed from the first file of "full" to the end);
# the datadir is kept under $SLUICE_WORK/mariadb-bench for the next run (delete it to regenerate).
# Env: SLUICE_WORK (default <repo>/.work), CARGO_TARGET_DIR, BENCH_SKIP_PYTHON=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=../integration/lib/mariadb.sh
. "$repo/integration/lib/mariadb.sh"

rows="${1:-1000000}"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
name="bench"
data="$(mariadb_datadir "$name")/data"
files="$SLUICE_WORK/bench"

if [ ! -s "$(mariadb_datadir "$name")/port" ] || [ ! -d "$files/full" ]; then
    echo "live_bench: generating the workload (bench/gen_bench_binlog.sh, a few minutes)" >&2
    BENCH_KEEP_DATADIR=1 "$here/gen_bench_binlog.sh" "$files" "$rows" >&2
fi
first="$(ls "$files/full" | head -n 1)"
[ -f "$data/$first" ] || { echo "live_bench: $data/$first is missing; delete $(mariadb_datadir "$name") and rerun" >&2; exit 1; }

echo "live_bench: building (release)" >&2
(cd "$repo" && cargo build --release -q -p sluice --bin sluice --example live_stream)
target="${CARGO_TARGET_DIR:-$repo/target}/release"

if [ "${BENCH_SKIP_PYTHON:-0}" != 1 ] && ! python3 -c 'import pymysqlreplication, pymysql' 2>/dev/null; then
    pip install -q mysql-replication pymysql >&2
fi

mariadb_restart "$name" >/dev/null
trap 'mariadb_stop "$name"' EXIT
port="$(mariadb_port "$name")"
echo "live_bench: server on port $port, streaming from $first to the end" >&2
mariadb_sql "$name" "SHOW BINARY LOGS" --batch --skip-column-names >&2

now() { date +%s.%N; }
# warm the page cache so that the first contender does not pay for the disk
"$target/examples/live_stream" drain 127.0.0.1 "$port" root "$first" >/dev/null

drain="$("$target/examples/live_stream" drain 127.0.0.1 "$port" root "$first")"
decode="$("$target/examples/live_stream" decode 127.0.0.1 "$port" root "$first")"
t0="$(now)"
"$target/sluice" dump --source "mysql://root@127.0.0.1:$port" --tls disabled --start-file "$first" \
    >/dev/null 2>"$SLUICE_WORK/live_bench.sluice.err"
t1="$(now)"
sluice_rows="$(grep -oE '[0-9]+ rows' "$SLUICE_WORK/live_bench.sluice.err" | head -n 1 | cut -d' ' -f1)"
sluice_secs="$(echo "$t1 - $t0" | bc -l)"
if [ "${BENCH_SKIP_PYTHON:-0}" != 1 ]; then
    pmr="$(python3 "$here/live_bench_pmr.py" 127.0.0.1 "$port" root "$first")"
else
    pmr='{"rows": 0, "secs": 0, "rows_per_s": 0}'
fi

python3 - "$drain" "$decode" "$sluice_rows" "$sluice_secs" "$pmr" <<'EOF'
import json, sys
drain, decode = json.loads(sys.argv[1]), json.loads(sys.argv[2])
s_rows, s_secs = int(sys.argv[3]), float(sys.argv[4])
pmr = json.loads(sys.argv[5])
rows = decode["rows"]
mb = drain["bytes"] / 1e6
def line(name, secs, n):
    rps = n / secs if secs else 0
    print(f"| {name} | {secs:.2f} | {n:,} | {rps:,.0f} | {mb / secs if secs else 0:,.0f} |")
    return rps
print(f"stream: {drain['events']:,} events, {drain['bytes']:,} bytes, {rows:,} row changes")
print("| contender | seconds | row changes | rows/s | MB/s of stream |")
print("|---|---|---|---|---|")
raw = line("raw drain (events counted, nothing decoded)", drain["secs"], rows)
dec = line("decode only (every value decoded, nothing rendered)", decode["secs"], decode["rows"])
slc = line("sluice dump --source > /dev/null (JSON lines)", s_secs, s_rows)
py = line("python-mysql-replication (every value read; first file only)", pmr["secs"], pmr["rows"]) if pmr["rows"] else 0
print()
print(f"raw drain: {drain['events_per_s']:,.0f} events/s, {drain['mb_per_s']:,.0f} MB/s")
for name, r in (("sluice dump", slc), ("decode only", dec)):
    vs_py = f"{r / py:.1f}x python-mysql-replication (goal >= 10x)" if py else "python skipped"
    print(f"{name}: {vs_py}; raw drain is {raw / r:.2f}x faster (goal <= 2x)")
if {s_rows, decode["rows"]} != {rows}:
    print(f"ROW COUNTS DIFFER: sluice {s_rows}, decode {decode['rows']}, python {pmr['rows']}")
    sys.exit(1)
EOF
