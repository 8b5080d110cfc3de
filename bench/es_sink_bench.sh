#!/usr/bin/env bash
# `sluice sink elasticsearch` throughput (issue 14): documents/s from the tables' topics into the
# engine, side by side in one run with a plain bulk loader of the same documents into the same engine,
# and the sink's peak RSS.
#
# A fresh MariaDB gets a table of ROWS rows (default 100,000; the shape of the other benchmarks: BIGINT
# key, VARCHAR, DECIMAL, DATETIME(6), a 200-byte VARCHAR), `sluice run` (release) snapshots it into the
# broker, then, for each round:
#   - the sink applies the topic into noida-db (index bench-N), timed from its start until every
#     document is applied (its /metrics), peak RSS sampled every 0.1 s;
#   - bench/es_bulk_loader.py reads those documents back and loads them into another index of the same
#     engine in bulk requests of the same size (1,000), one client: the engine's own pace;
#   - the sink applies the same topic into bench/es_null_engine.py, which stores nothing and answers at
#     once: the sink's own ceiling (decoding, documents, bulk bodies), at NULL_ROWS documents.
# No Elasticsearch installs here; noida-db indexes a few thousand documents a second and slows as its
# index grows (it rewrites its data file on every change), so 1 M documents take it most of an hour:
# the engine side runs at ROWS, the sink's own ceiling at NULL_ROWS (default 1,000,000).
#
# Usage: bench/es_sink_bench.sh [ROWS [NULL_ROWS]]
# Env: SLUICE_WORK, CARGO_TARGET_DIR, BENCH_RUNS (default 1), BENCH_NO_BUILD=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"
. "$repo/integration/lib/elastic.sh"

rows="${1:-100000}"
null_rows="${2:-1000000}"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
out="$SLUICE_WORK/es_sink_bench"
rm -rf "$out" && mkdir -p "$out"

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    echo "es_sink_bench: building (release)" >&2
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice && cargo build --release -q -p sluice-test-registry)
fi
target="${CARGO_TARGET_DIR:-$repo/target}/release"
export SLUICE_REGISTRY_BIN="$target/sluice-test-registry"
bin="$target/sluice"

mariadb_start esbench --innodb-buffer-pool-size=512M --innodb-flush-log-at-trx-commit=0 --sync-binlog=0 >/dev/null
broker_start esbench >/dev/null
registry_start esbench >/dev/null
elastic_start esbench noida >/dev/null
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; mariadb_stop esbench; broker_stop esbench; registry_stop esbench; elastic_stop esbench' EXIT
port="$(mariadb_port esbench)"

# two tables: the engine's (ROWS) and the null engine's (NULL_ROWS), each its own topic
select_sql="SELECT seq, CONCAT('customer-', seq), seq / 100, TIMESTAMP'2026-01-01 00:00:00' + INTERVAL seq SECOND, REPEAT(CHAR(65 + seq % 26), 200)"
table_sql='(id BIGINT PRIMARY KEY, name VARCHAR(64) NOT NULL, amount DECIMAL(12,2), created DATETIME(6), note VARCHAR(255))'
mariadb_sql esbench "CREATE DATABASE bench; USE bench; CREATE TABLE bench.engine $table_sql; CREATE TABLE bench.null $table_sql;
    INSERT INTO bench.engine $select_sql FROM seq_1_to_$rows; INSERT INTO bench.null $select_sql FROM seq_1_to_$null_rows"

cat >"$out/sluice.toml" <<TOML
[source]
name = "esbench"
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
[kafka]
brokers = "$BROKER"
partitions = 3
[registry]
url = "$REGISTRY_URL"
[filter]
include = ["bench.*"]
[snapshot]
mode = "initial"
[elasticsearch]
url = "$ES_URL"
bulk_max_actions = 1000
TOML
echo "es_sink_bench: snapshotting $rows + $null_rows rows into the broker" >&2
SLUICE_LOG=info "$bin" run --config "$out/sluice.toml" 2>"$out/run.log" &
pids+=($!)
for _ in $(seq 1 3600); do
    grep -q "Snapshot finished" "$out/run.log" 2>/dev/null && break
    sleep 1
done
grep -q "Snapshot finished" "$out/run.log" || { echo "es_sink_bench: the snapshot did not finish" >&2; exit 1; }
sleep 2
kill -TERM "${pids[0]}"; wait "${pids[0]}" || true; pids=()

# sink NAME INDEX_URL TABLE DOCS: prints "seconds peak_kib" once DOCS documents are applied
sink() {
    local name="$1" url="$2" table="$3" docs="$4" mport t0 p peak=0 sinkpid n
    mport="$(proc_free_port)"
    SLUICE_ELASTICSEARCH__URL="$url" SLUICE_ELASTICSEARCH__GROUP_ID="$name" SLUICE_ELASTICSEARCH__INCLUDE="[\"$table\"]" \
        SLUICE_ELASTICSEARCH__INDEX="{table}-$name" SLUICE_METRICS__LISTEN="127.0.0.1:$mport" SLUICE_LOG=warn \
        "$bin" sink elasticsearch --config "$out/sluice.toml" 2>"$out/$name.log" &
    sinkpid=$!
    pids+=($sinkpid)
    t0="$(date +%s.%N)"
    while true; do
        p="$(awk '/VmHWM/{print $2}' "/proc/$sinkpid/status" 2>/dev/null || echo 0)"
        [ -n "$p" ] && [ "$p" -gt "$peak" ] && peak="$p"
        n="$(curl -s "127.0.0.1:$mport/metrics" 2>/dev/null | awk '/^sluice_es_documents_total/{s+=$2} END{print s+0}')"
        [ "${n%.*}" -ge "$docs" ] && break
        kill -0 "$sinkpid" 2>/dev/null || { echo "the sink exited: $(tail -3 "$out/$name.log")" >&2; exit 1; }
        sleep 0.1
    done
    local cpu
    cpu="$(awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$sinkpid/stat")"
    echo "$(echo "$(date +%s.%N) - $t0" | bc -l) $peak $cpu"
    kill -TERM "$sinkpid"; wait "$sinkpid" || true
}

null_port="$(python3 "$here/es_null_engine.py" 0 > "$out/null.port" & echo $! > "$out/null.pid"; sleep 1; cut -d= -f2 "$out/null.port")"
pids+=("$(cat "$out/null.pid")")
results="$out/results"
: >"$results"
for round in $(seq "${BENCH_RUNS:-1}"); do
    echo "es_sink_bench: round $round: the sink into noida-db ($rows documents)" >&2
    echo "sink-engine $(sink "bench-$round" "$ES_URL" bench.engine "$rows")" >>"$results"
    echo "es_sink_bench: round $round: the plain bulk loader, the same documents" >&2
    echo "loader $(python3 "$here/es_bulk_loader.py" "$ES_URL" "engine-bench-$round" "loader-$round" 1000 | awk '{print $2, 0, "-"}')" >>"$results"
    echo "es_sink_bench: round $round: the sink into the null engine ($null_rows documents)" >&2
    echo "sink-null $(sink "null-$round" "http://127.0.0.1:$null_port" bench.null "$null_rows")" >>"$results"
done

python3 - "$rows" "$null_rows" "$results" <<'PY'
import statistics, sys
rows, null_rows = int(sys.argv[1]), int(sys.argv[2])
runs = {}
for line in open(sys.argv[3]):
    label, secs, peak, cpu = line.split()
    runs.setdefault(label, []).append((float(secs), int(peak), cpu))
docs = {"sink-engine": rows, "loader": rows, "sink-null": null_rows}
what = {"sink-engine": "sluice sink elasticsearch -> noida-db", "loader": "plain bulk loader (Python, 1 client) -> noida-db",
        "sink-null": "sluice sink elasticsearch -> null engine (stores nothing)"}
print("| contender | documents | seconds (median) | documents/s | peak RSS MiB | sink CPU s | rounds (s) |")
print("|---|---:|---:|---:|---:|---:|---|")
for label, r in runs.items():
    s = statistics.median(x[0] for x in r)
    peak = max(x[1] for x in r) / 1024
    peak = f"{peak:.1f}" if peak else "-"
    cpu = r[len(r) // 2][2]
    print(f"| {what[label]} | {docs[label]:,} | {s:.2f} | {docs[label] / s:,.0f} | {peak} | {cpu} | {' '.join(f'{x[0]:.2f}' for x in r)} |")
PY
