#!/usr/bin/env bash
# End-to-end publisher throughput (issue 4 acceptance): `sluice run` streams the benchmark workload
# (bench/gen_bench_binlog.sh, the "full" variant: 1.4 M row changes by default, one table with 14 column
# types, transactions of 1 to 10,000 rows) from MariaDB into Kafka as Avro with transactions, side by side
# in one run with the broker's own produce ceiling: the very records Sluice published (read back from its
# topic, so the same keys, values, partitions and compression work, and put back in the order Sluice
# sent them: bench/topic_stats.py), produced again by a plain rdkafka
# producer (crates/publisher/examples/plain_produce.rs), once without and once with transactions of the
# same batch size (the average number of records per commit of the Sluice run, counted from its
# checkpoints).
#
# Usage: bench/kafka_bench.sh [ROWS]       (ROWS as for gen_bench_binlog.sh, default 1000000)
# The server's data comes from gen_bench_binlog.sh with BENCH_KEEP_DATADIR=1 (shared with live_bench.sh).
# Env: SLUICE_WORK (default <repo>/.work), CARGO_TARGET_DIR, BENCH_BATCH (kafka.batch_max_records;
# default: Sluice's default), BENCH_PROPS ("k=v ...": librdkafka properties for Sluice and the plain
# producers alike, e.g. "linger.ms=5 compression.type=none"), SLUICE_BIN (a sluice binary to measure
# instead of this tree's release build, e.g. an older commit's, for a side-by-side comparison),
# BENCH_PIN=1 (the servers on the last CPU, the contenders on the others),
# BENCH_PLAIN_ROUNDS (rounds of the plain transactional producer, default 3: the ratios take their medians),
# BENCH_NO_BUILD=1 (use the release binaries already built under CARGO_TARGET_DIR), BENCH_KEEP_RECORDS=1 (keep
# the records read back, $SLUICE_WORK/kafka_bench/records.bin, for plain_produce by hand),
# BENCH_CALLGRIND=1 (Sluice and the plain transactional producer run under valgrind's callgrind, and the
# summary adds the instructions each executed per record by thread role: a count that does not move
# between runs, where CPU seconds move by a fifth on this VM; the timings of such a run are valgrind's,
# so one round of the plain producer by default; about 12 minutes for the default workload).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"

rows="${1:-1000000}"
[ "${BENCH_PLAIN_ROUNDS:-3}" -ge 1 ] 2>/dev/null || { echo "kafka_bench: BENCH_PLAIN_ROUNDS must be a whole number of at least 1" >&2; exit 2; }
batch_setting=""
if [ -n "${BENCH_CALLGRIND:-}" ] && ! command -v valgrind >/dev/null; then
    echo "kafka_bench: BENCH_CALLGRIND needs valgrind (apt-get install valgrind)" >&2; exit 2
fi
plain_rounds="${BENCH_PLAIN_ROUNDS:-3}"
[ -n "${BENCH_CALLGRIND:-}" ] && plain_rounds="${BENCH_PLAIN_ROUNDS:-1}"
[ -n "${BENCH_BATCH:-}" ] && batch_setting="batch_max_records = $BENCH_BATCH"
# BENCH_PROPS="k=v ...": librdkafka properties for every contender alike (default: Sluice's own)
props_setting=""
plain_set=()
for kv in ${BENCH_PROPS:-}; do
    [ -z "$props_setting" ] && props_setting="[kafka.properties]"
    props_setting+=$'\n"'"${kv%%=*}"'" = "'"${kv#*=}"'"'
    plain_set+=(--set "$kv")
done
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
files="$SLUICE_WORK/bench"
out="$SLUICE_WORK/kafka_bench"
mkdir -p "$out"
rm -f "$out"/cg.*
# BENCH_CALLGRIND=1: each contender's command under callgrind, one file per thread
cg=()
if [ -n "${BENCH_CALLGRIND:-}" ]; then
    # the binary's own choice of MIMALLOC_PURGE_DELAY, set here: it would run itself again for it,
    # out of valgrind's sight
    cg=(env MIMALLOC_PURGE_DELAY=0 valgrind --tool=callgrind --separate-threads=yes -q)
fi

if [ ! -s "$(mariadb_datadir bench)/port" ] || [ ! -d "$files/full" ]; then
    echo "kafka_bench: generating the workload (bench/gen_bench_binlog.sh, a few minutes)" >&2
    BENCH_KEEP_DATADIR=1 "$here/gen_bench_binlog.sh" "$files" "$rows" >&2
fi
first="$(ls "$files/full" | head -n 1)"
first_size="$(stat -c %s "$files/full/$first")"

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    echo "kafka_bench: building (release)" >&2
    # two builds: `--bin sluice` would also restrict the registry package to a binary it lacks
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice --example plain_produce \
        && cargo build --release -q -p sluice-test-registry)
fi
target="${CARGO_TARGET_DIR:-$repo/target}/release"
export SLUICE_REGISTRY_BIN="$target/sluice-test-registry"
python3 -c 'import confluent_kafka' 2>/dev/null || python3 -m pip install -q confluent-kafka >&2

mariadb_restart bench >/dev/null
broker_start kbench >/dev/null
registry_start kbench >/dev/null
# BENCH_PIN=1: the servers (MariaDB, the broker, the registry) and this script's helpers on the last
# CPU, each contender (Sluice, the plain producers) alone on the others, as on a deployment where the
# broker and the database have machines of their own: the contenders' CPU per record without the
# servers' preemptions and cache traffic on their cores (both pay the same conditions).
pin=()
if [ -n "${BENCH_PIN:-}" ]; then
    last=$(( $(nproc) - 1 ))
    [ "$last" -ge 1 ] || { echo "kafka_bench: BENCH_PIN needs two CPUs" >&2; exit 2; }
    for f in "$(mariadb_datadir bench)/pid" "$(mariadb_datadir bench)/mariadbd.pid" "$(broker_dir kbench)/pid" "$(registry_dir kbench)/pid"; do
        [ -s "$f" ] && taskset -a -p -c "$last" "$(cat "$f")" >/dev/null
    done
    taskset -p -c "$last" $$ >/dev/null
    pin=(taskset -c "0-$((last - 1))")
fi
sluice_pid=""
trap '[ -n "$sluice_pid" ] && kill -9 "$sluice_pid" 2>/dev/null; mariadb_stop bench; broker_stop kbench; registry_stop kbench' EXIT
port="$(mariadb_port bench)"

cat >"$out/sluice.toml" <<TOML
[source]
name = "kbench"
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
start = "$first:4"
[kafka]
brokers = "$BROKER"
partitions = 3
$batch_setting
$props_setting
[registry]
url = "$REGISTRY_URL"
[filter]
include = ["bench_full.*"]
[snapshot]
mode = "never"
TOML

echo "kafka_bench: sluice run from $first:4 (checkpoint must pass $first:$((first_size - 64)))" >&2
# CPU seconds (user + system) of a process so far
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }
# minor page faults of a process so far (its stat line's field 10; the command name has no space)
faults_of() { awk '{print $10}' "/proc/$1/stat"; }
broker_pid="$(cat "$(broker_dir kbench)/pid")"
b0="$(cpu_of "$broker_pid")"
t0="$(date +%s.%N)"
SLUICE_LOG=warn "${pin[@]}" ${cg[@]+"${cg[@]}" "--callgrind-out-file=$out/cg.sluice.%p"} "${SLUICE_BIN:-$target/sluice}" run --config "$out/sluice.toml" 2>"$out/sluice.log" &
sluice_pid=$!
# (written aside and renamed: a read never sees the file half-written)
( while kill -0 "$sluice_pid" 2>/dev/null; do
    grep VmHWM "/proc/$sluice_pid/status" 2>/dev/null | awk '{print $2}' >"$out/vmhwm.new" && [ -s "$out/vmhwm.new" ] \
        && mv "$out/vmhwm.new" "$out/vmhwm"
    sleep 0.5
done ) &
# the checkpoint passing the last transaction of the first file (which ends with a ROTATE) = done
t1="$(python3 "$here/wait_checkpoint.py" --window "$out/window.json" "$sluice_pid" "$BROKER" kbench "$first" "$((first_size - 64))")"
peak="$(cat "$out/vmhwm" 2>/dev/null || true)"; peak="${peak:-0}"
sluice_cpu="$(cpu_of "$sluice_pid")"
sluice_faults="$(faults_of "$sluice_pid")"
sluice_broker_cpu="$(echo "$(cpu_of "$broker_pid") - $b0" | bc -l)"
kill -TERM "$sluice_pid"; wait "$sluice_pid" || true
sluice_pid=""

read -r records key_bytes value_bytes first_ms last_ms < <(python3 "$here/topic_stats.py" "$BROKER" sluice.bench_full.orders --dump "$out/records.bin")
# one checkpoint record per Kafka transaction: the plain transactional producer commits as often
read -r commits _ < <(python3 "$here/topic_stats.py" "$BROKER" sluice.__positions)
batch=$(( (records + commits - 1) / commits ))
secs="$(echo "$t1 - $t0" | bc -l)"

python3 "$repo/integration/lib/kafka_wire.py" create-topic "$BROKER" plain.idem 3 1 >/dev/null
b0="$(cpu_of "$broker_pid")"
plain="$("${pin[@]}" "$target/examples/plain_produce" "$BROKER" plain.idem "$records" "$key_bytes" "$value_bytes" "${plain_set[@]}" \
    --records-from "$out/records.bin")"
plain_broker_cpu="$(echo "$(cpu_of "$broker_pid") - $b0" | bc -l)"
# The floor moves more between runs on this VM than Sluice's cost does (its CPU 1.4-2.6 s for the
# same records), so the transactional producer runs BENCH_PLAIN_ROUNDS times (default 3) and the
# ratios take its medians: one slow or fast round of the floor does not decide a run's ratio.
plain_txn="["
for r in $(seq 1 "$plain_rounds"); do
    python3 "$repo/integration/lib/kafka_wire.py" create-topic "$BROKER" "plain.txn$r" 3 1 >/dev/null
    b0="$(cpu_of "$broker_pid")"
    one="$("${pin[@]}" ${cg[@]+"${cg[@]}" "--callgrind-out-file=$out/cg.plain$r.%p"} "$target/examples/plain_produce" "$BROKER" "plain.txn$r" "$records" "$key_bytes" "$value_bytes" --transactional "$batch" "${plain_set[@]}" --records-from "$out/records.bin")"
    [ "$r" = 1 ] || plain_txn+=","
    plain_txn+="{\"run\": $one, \"broker_cpu_s\": $(echo "$(cpu_of "$broker_pid") - $b0" | bc -l | sed 's/^\./0./')}"
done
plain_txn+="]"
# BENCH_KEEP_RECORDS=1 keeps them for more plain_produce runs by hand
[ -n "${BENCH_KEEP_RECORDS:-}" ] || rm -f "$out/records.bin"

PYTHONPATH="$here" python3 - "$records" "$secs" "$peak" "$key_bytes" "$value_bytes" "$plain" "$plain_txn" "$rows" "$commits" "$batch" \
    "$sluice_cpu" "$sluice_broker_cpu" "$plain_broker_cpu" "$first_ms" "$out/window.json" "$last_ms" "$sluice_faults" <<'PY'
import bisect, json, statistics, sys
records, secs, peak, kb, vb = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
plain, txn_runs, rows = json.loads(sys.argv[6]), json.loads(sys.argv[7]), int(sys.argv[8])
commits, batch = int(sys.argv[9]), int(sys.argv[10])
cpu, bcpu, plain_bcpu = (float(a) for a in sys.argv[11:14])
# the transactional floor: the round of median CPU (its threads, slices, faults), the median wall
# time and broker CPU of all rounds
by_cpu = sorted(txn_runs, key=lambda r: r["run"]["cpu_s"])
plain_txn = dict(by_cpu[len(by_cpu) // 2]["run"])
plain_txn["secs"] = statistics.median(r["run"]["secs"] for r in txn_runs)
plain_txn["rows_per_s"] = records / plain_txn["secs"]
plain_txn_bcpu = statistics.median(r["broker_cpu_s"] for r in txn_runs)
changes = rows + rows * 3 // 10 + rows // 10
# Sluice's working window, measured as the plain producers measure theirs (from the first record
# sent to the last commit; not their start-up nor loading their records): from its first record's
# timestamp to that of the checkpoint record the last commit holds. The end-to-end time above also
# counts its start-up (connecting, checks, registering the schemas: about 0.4 s) and the polling
# of wait_checkpoint.py. Its CPU in the window: the samples taken at the window's ends.
first_ms = int(sys.argv[14])
window = json.load(open(sys.argv[15]))
w0, w1 = first_ms / 1000, window["checkpoint_ms"] / 1000
samples = window["cpu"]
def sample_at(t):
    i = bisect.bisect_left([s[0] for s in samples], t)
    return samples[min(i, len(samples) - 1)]
def cpu_at(t):
    return sample_at(t)[1]
wsecs, wcpu = w1 - w0, cpu_at(w1) - cpu_at(w0)
# CPU by thread in the window: Sluice's pipeline (the main thread), its replication read (tokio's
# workers) and librdkafka's broker threads, beside the plain producer's producing and broker threads
from bench_threads import by_role
t0, t1 = sample_at(w0)[2], sample_at(w1)[2]
sluice_roles = by_role({n: t1.get(n, 0.0) - t0.get(n, 0.0) for n in t1})
plain_roles = by_role(plain_txn.get("threads", {}))
# and the times each was put on a CPU (wakeups and preemptions), per 1,000 records
s0, s1 = sample_at(w0)[3], sample_at(w1)[3]
sluice_slices = by_role({n: (s1.get(n, 0) - s0.get(n, 0)) * 1000 / records for n in s1})
plain_slices = by_role({n: v * 1000 / records for n, v in plain_txn.get("slices", {}).items()})
# the last data record may wait up to batch_max_delay for its commit while filtered events follow
last_ms = int(sys.argv[16])
print(f"records: {records:,} (row changes {changes:,} + tombstones), avg key {kb} B, avg value {vb} B")
print(f"sluice committed {commits:,} Kafka transactions: {batch:,} records each on average (the plain transactional producer's batch)")
print("| contender | seconds | records | records/s | row changes/s | client CPU s | broker CPU s |")
print("|---|---:|---:|---:|---:|---:|---:|")
print(f"| sluice run (decode, Avro, registry, batches, checkpoints) | {secs:.2f} | {records:,} | {records/secs:,.0f} "
      f"| {changes/secs:,.0f} | {cpu:.1f} | {bcpu:.1f} |")
for name, p, b in (("plain producer, idempotent", plain, plain_bcpu),
                   ("plain producer, transactional (same batch)", plain_txn, plain_txn_bcpu)):
    print(f"| {name} | {p['secs']:.2f} | {p['records']:,} | {p['rows_per_s']:,.0f} | - | {p['cpu_s']:.1f} | {b:.1f} |")
print(f"| sluice run, its working window (first record to last commit) | {wsecs:.2f} | {records:,} | {records/wsecs:,.0f} "
      f"| {changes/wsecs:,.0f} | {wcpu:.1f} | - |")
round_secs = ", ".join(f"{r['run']['secs']:.2f}" for r in txn_runs)
round_cpu = ", ".join(f"{r['run']['cpu_s']:.2f}" for r in txn_runs)
print(f"plain transactional producer, {len(txn_runs)} rounds: seconds {round_secs}; CPU s {round_cpu} "
      "(the ratios below take the medians)")
print(f"working window against the plain transactional producer: {wsecs / plain_txn['secs']:.2f}x the wall time, "
      f"{wcpu / plain_txn['cpu_s']:.2f}x the CPU (end to end: {secs / plain_txn['secs']:.2f}x, {cpu / plain_txn['cpu_s']:.2f}x); "
      f"its records were sent within {(last_ms - first_ms) / 1000:.2f} s, the last committed {w1 - last_ms / 1000:.2f} s after it was sent")
def roles_text(roles):
    return ", ".join(f"{r} {s:.2f}" for r, s in sorted(roles.items(), key=lambda x: -x[1]))
print(f"CPU s by thread in the working window: sluice: {roles_text(sluice_roles)}; "
      f"plain transactional: {roles_text(plain_roles)}")
print(f"times put on a CPU per 1,000 records in the working window: sluice: {roles_text(sluice_slices)}; "
      f"plain transactional: {roles_text(plain_slices)}")
print(f"minor page faults per 1,000 records: sluice {int(sys.argv[17]) * 1000 / records:.1f} (from its start), "
      f"plain transactional {plain_txn.get('minor_faults', 0) * 1000 / records:.1f}")
print(f"sluice vs plain idempotent: {plain['rows_per_s'] / (records / secs):.2f}x slower; "
      f"vs plain transactional: {plain_txn['rows_per_s'] / (records / secs):.2f}x; sluice peak RSS {peak / 1024:.1f} MiB")
PY

if [ -n "${BENCH_CALLGRIND:-}" ]; then
    # instructions by thread role (bench_threads.py: pipeline read librdkafka other), start-up included
    # (the plain producer's loading of its records too)
    for who in sluice plain1; do
        ls "$out"/cg."$who".*-* >/dev/null 2>&1 \
            || { echo "kafka_bench: no callgrind files of $who in $out (did valgrind run?)" >&2; exit 1; }
    done
    echo "(BENCH_CALLGRIND: the timings, ratios and RSS above are of a run under valgrind)"
    read -r -a s_ir < <(python3 "$here/bench_threads.py" instructions "$out"/cg.sluice.*-*)
    read -r -a p_ir < <(python3 "$here/bench_threads.py" instructions "$out"/cg.plain1.*-*)
    python3 - "$records" "$rows" "${s_ir[@]}" "${p_ir[@]}" <<'PY'
import sys
records, rows = int(sys.argv[1]), int(sys.argv[2])
s, p = [int(x) for x in sys.argv[3:7]], [int(x) for x in sys.argv[7:11]]
changes = rows + rows * 3 // 10 + rows // 10
roles = ("pipeline (main)", "read (tokio workers)", "librdkafka broker", "other")
print("instructions per record (callgrind, start-up included):")
print("| thread role | sluice run | plain transactional producer |")
print("|---|---:|---:|")
for name, a, b in zip(roles, s, p):
    print(f"| {name} | {a / records:,.0f} | {b / records:,.0f} |")
print(f"| all | {sum(s) / records:,.0f} | {sum(p) / records:,.0f} |")
own = sum(s) - sum(p)
print(f"sluice/plain: {sum(s) / sum(p):.2f}x per record, {sum(s) / changes / (sum(p) / records):.2f}x per row change against "
      f"the producer's per record; Sluice's own work (the difference) {own / records:,.0f} per record; the CPU goal "
      f"(1.5x per row change) leaves it {(1.5 * sum(p) / records * changes - sum(p)) / records:,.0f} per record")
PY
fi
