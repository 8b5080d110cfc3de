#!/usr/bin/env bash
# Peak memory and cost per row against transaction size (issue 4: "peak memory independent of
# transaction size"; issue 24: cost per row).
#
# The same N rows (default 1,000,000; about 300 bytes each) are written twice into a fresh MariaDB:
# once in transactions of 1,000 rows (table bigtxn.small), once as ONE transaction of N rows
# (table bigtxn.big, a single INSERT ... SELECT); then N/10 rows of the same shape one row per
# transaction (table bigtxn.one, autocommit INSERTs from a stored procedure: the shape of an OLTP
# workload, where what Sluice does per event and per transaction counts as much as per row).
# Each phase is in its own binlog file. `sluice run`
# streams each phase into the broker on its own (a fresh source name, started at the phase's file),
# and the script reports its peak RSS (VmHWM) and the time to the checkpoint that passes the phase.
#
# A MySQL transaction is never split across Kafka transactions and never held whole: its records go
# to librdkafka's bounded queue (and, while the previous batch commits, to at most
# kafka.batch_max_bytes held in memory), so both peaks should be about the same.
#
# Usage: bench/big_txn.sh [ROWS]
# Env: SLUICE_WORK (default <repo>/.work), CARGO_TARGET_DIR, BENCH_RUNS (rounds, default 1),
# SLUICE_BINS ("label=path ...": sluice binaries measured side by side in each round, e.g. an older
# commit's build against this one; default "sluice=<target>/release/sluice"), BENCH_NO_BUILD=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"

rows="${1:-1000000}"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
out="$SLUICE_WORK/big_txn"
mkdir -p "$out"

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    echo "big_txn: building (release)" >&2
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice && cargo build --release -q -p sluice-test-registry)
fi
target="${CARGO_TARGET_DIR:-$repo/target}/release"
export SLUICE_REGISTRY_BIN="$target/sluice-test-registry"
python3 -c 'import confluent_kafka' 2>/dev/null || python3 -m pip install -q confluent-kafka >&2

# throwaway data: durability off; a big binlog cache so the one transaction is not the slow part
mariadb_start bigtxn --innodb-buffer-pool-size=512M --innodb-flush-log-at-trx-commit=0 --sync-binlog=0 \
    --max-binlog-size=1G --binlog-cache-size=64M >/dev/null
broker_start bigtxn >/dev/null
registry_start bigtxn >/dev/null
sluice_pid=""
trap '[ -n "$sluice_pid" ] && kill -9 "$sluice_pid" 2>/dev/null; mariadb_stop bigtxn; broker_stop bigtxn; registry_stop bigtxn' EXIT
port="$(mariadb_port bigtxn)"

status() { mariadb_sql bigtxn "SHOW MASTER STATUS" -N | awk '{print $1":"$2}'; }
table_sql='(id BIGINT PRIMARY KEY, name VARCHAR(64) NOT NULL, amount DECIMAL(12,2), created DATETIME(6), note VARCHAR(255))'
select_sql="SELECT seq, CONCAT('customer-', seq), seq / 100, TIMESTAMP'2026-01-01 00:00:00' + INTERVAL seq SECOND, REPEAT(CHAR(65 + seq % 26), 200)"
mariadb_sql bigtxn "CREATE DATABASE bigtxn; CREATE TABLE bigtxn.small $table_sql; CREATE TABLE bigtxn.big $table_sql;
    CREATE TABLE bigtxn.one $table_sql"

echo "big_txn: writing $rows rows in transactions of 1,000 rows" >&2
mariadb_sql bigtxn "FLUSH BINARY LOGS"
small_start="$(status)"
batches=$(( (rows + 999) / 1000 ))
# the seq_<from>_to_<to> tables of MariaDB's SEQUENCE engine need a current database
for ((b = -1; b < batches; b++)); do
    if [ "$b" -lt 0 ]; then echo "USE bigtxn;"; continue; fi
    lo=$(( b * 1000 + 1 )); hi=$(( (b + 1) * 1000 < rows ? (b + 1) * 1000 : rows ))
    echo "INSERT INTO bigtxn.small $select_sql FROM seq_${lo}_to_${hi};"
done | mariadb_sql bigtxn -
small_end="$(status)"

echo "big_txn: writing $rows rows in one transaction" >&2
mariadb_sql bigtxn "FLUSH BINARY LOGS"
big_start="$(status)"
mariadb_sql bigtxn "USE bigtxn; INSERT INTO bigtxn.big $select_sql FROM seq_1_to_$rows"
big_end="$(status)"

one_rows=$(( rows / 10 > 0 ? rows / 10 : 1 ))
echo "big_txn: writing $one_rows rows one per transaction" >&2
mariadb_sql bigtxn "FLUSH BINARY LOGS"
one_start="$(status)"
# each statement of a procedure run with autocommit on is a transaction of its own
mariadb_sql bigtxn - <<SQL
USE bigtxn;
DELIMITER ;;
CREATE PROCEDURE one_by_one(n INT)
BEGIN
    DECLARE seq INT DEFAULT 1;
    WHILE seq <= n DO
        INSERT INTO bigtxn.one $select_sql;
        SET seq = seq + 1;
    END WHILE;
END;;
DELIMITER ;
CALL one_by_one($one_rows);
SQL
one_end="$(status)"

# run_phase BIN NAME START END TABLE: prints "seconds peak_kb cpu_seconds" (CPU: user and system
# time of the process until its checkpoint passed the phase, start-up included)
run_phase() {
    local bin="$1" name="$2" start="$3" end="$4" table="$5"
    cat >"$out/$name.toml" <<TOML
[source]
name = "$name"
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
server_id = $(( 60000 + RANDOM % 1000 ))
start = "$start"
[kafka]
brokers = "$BROKER"
partitions = 3
[registry]
url = "$REGISTRY_URL"
[filter]
include = ["bigtxn.$table"]
TOML
    local t0 t1 peak cpu
    t0="$(date +%s.%N)"
    SLUICE_LOG=warn "$bin" run --config "$out/$name.toml" 2>"$out/$name.log" &
    sluice_pid=$!
    ( while kill -0 "$sluice_pid" 2>/dev/null; do
          # written aside and renamed: a reader never finds the file empty
          grep VmHWM "/proc/$sluice_pid/status" 2>/dev/null | awk '{print $2}' >"$out/$name.vmhwm.new" \
              && [ -s "$out/$name.vmhwm.new" ] && mv "$out/$name.vmhwm.new" "$out/$name.vmhwm"
          sleep 0.2
      done ) &
    t1="$(python3 "$here/wait_checkpoint.py" "$BROKER" "$name" "${end%:*}" "${end##*:}")"
    peak="$(cat "$out/$name.vmhwm")"
    local ticks
    ticks="$(getconf CLK_TCK)"
    cpu="$(awk -v t="$ticks" '{print ($14 + $15) / t}' "/proc/$sluice_pid/stat")"
    kill -TERM "$sluice_pid"; wait "$sluice_pid" || true
    sluice_pid=""
    echo "$(echo "$t1 - $t0" | bc -l) $peak $cpu"
}

results="$out/results"
: >"$results"
for round in $(seq "${BENCH_RUNS:-1}"); do
    for contender in ${SLUICE_BINS:-sluice=$target/sluice}; do
        label="${contender%%=*}"; bin="${contender#*=}"
        echo "big_txn: round $round: $label" >&2
        echo "$label small $(run_phase "$bin" "small$label$round" "$small_start" "$small_end" small)" >>"$results"
        echo "$label big $(run_phase "$bin" "big$label$round" "$big_start" "$big_end" big)" >>"$results"
        echo "$label one $(run_phase "$bin" "one$label$round" "$one_start" "$one_end" one)" >>"$results"
    done
done

python3 - "$rows" "$results" <<'PY'
import statistics, sys
rows = int(sys.argv[1])
runs = {}
for line in open(sys.argv[2]):
    label, phase, secs, peak, cpu = line.split()
    runs.setdefault((label, phase), []).append((float(secs), int(peak), float(cpu)))
print(f"rows per phase: {rows:,}; medians of {len(next(iter(runs.values())))} rounds (every round in {sys.argv[2]})")
print("| contender | transactions | seconds | rows/s | CPU s | CPU µs per row | peak RSS MiB (max) | rounds (s) | rounds (CPU s) |")
print("|---|---|---:|---:|---:|---:|---:|---|---|")
for (label, phase), r in runs.items():
    s = statistics.median(x[0] for x in r)
    n = max(rows // 10, 1) if phase == "one" else rows
    what = {"small": f"{rows // 1000:,} of 1,000 rows", "big": f"1 of {rows:,} rows", "one": f"{n:,} of 1 row"}[phase]
    c = statistics.median(x[2] for x in r)
    print(f"| {label} | {what} | {s:.2f} | {n / s:,.0f} | {c:.2f} | {c / n * 1e6:.1f} | {max(x[1] for x in r) / 1024:.1f} | "
          f"{' '.join(f'{x[0]:.2f}' for x in r)} | {' '.join(f'{x[2]:.2f}' for x in r)} |")
PY
