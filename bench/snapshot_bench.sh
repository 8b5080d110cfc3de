#!/usr/bin/env bash
# Snapshot throughput and memory (issue 12), side by side in one run on one server and broker:
#   (a) drain:    the snapshot's statements for the table (chunked SELECTs, prepared, binary protocol)
#                 through Sluice's protocol crate, rows received and dropped undecoded
#                 (crates/protocol/examples/drain_select.rs): the read side's floor;
#   (a2) drain2:  the same with the key range cut in two halves drained at once on two connections
#                 (what parallel chunk readers within a table, as Flink CDC's, could gain here);
#   (b) snapshot: `sluice run` with [snapshot] mode = "initial" and default settings, from its start to
#                 the log's "Snapshot finished" (every row committed to Kafka as an op r Avro record);
#   (c) stream:   `sluice run` streaming the same rows from the binlog (the INSERT that loaded them),
#                 from its start to the checkpoint passing that transaction;
#   (d) plain:    a plain transactional rdkafka producer (crates/publisher/examples/plain_produce.rs)
#                 sending the snapshot's own records again (read back from its topic), in as many
#                 Kafka transactions as the snapshot committed: the publishing side's floor.
# Each round runs (a), (b), (c) in turn with fresh topics (SLUICE_BINS' contenders in an order that
# turns by one each round); peak RSS is VmHWM at the end of each run.
#
# Usage: bench/snapshot_bench.sh [ROWS] (default 1000000)
# Env: SLUICE_WORK (default <repo>/.work), BENCH_RUNS (rounds, default 3), BENCH_NO_BUILD=1,
# SLUICE_BINS ("label=path ...": sluice binaries measured side by side in each round, e.g. an older
# commit's build against this one; default "sluice=<target>/release/sluice"), BENCH_SNAPSHOT_TOML (lines
# added to every contender's [snapshot] section, e.g. 'chunk_max_bytes = "4MiB"').
# BENCH_CALLGRIND=1: each contender's snapshot runs under valgrind's callgrind, and the summary adds the
# instructions it executed per row, its main (pipeline) thread's and all of its threads' (start-up
# included): a count that does not move between runs, where the timings move by a fifth (the timings of
# such a run are valgrind's, not Sluice's; use ROWS of 100000 or so).
# The table has the shape of the decoder benchmark's (bench/gen_bench_binlog.sh: 15 columns of 13 types).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"

rows="${1:-1000000}"
# fewer rows take no time a clock here can tell apart (and the ratios would divide by zero)
if ! [[ "$rows" =~ ^[0-9]+$ ]] || [ "$rows" -lt 10000 ]; then
    echo "snapshot_bench: ROWS must be a number of rows of 10000 or more (got '$rows')" >&2; exit 2
fi
if [ -n "${BENCH_CALLGRIND:-}" ] && ! command -v valgrind >/dev/null; then
    echo "snapshot_bench: BENCH_CALLGRIND needs valgrind (apt-get install valgrind)" >&2; exit 2
fi
runs="${BENCH_RUNS:-3}"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
out="$SLUICE_WORK/snapshot_bench"
rm -rf "$out"
mkdir -p "$out"

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    echo "snapshot_bench: building (release)" >&2
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice \
        && cargo build --release -q -p sluice --example plain_produce \
        && cargo build --release -q -p sluice-protocol --example drain_select \
        && cargo build --release -q -p sluice-test-registry)
fi
target="${CARGO_TARGET_DIR:-$repo/target}/release"
export SLUICE_REGISTRY_BIN="$target/sluice-test-registry"
python3 -c 'import confluent_kafka' 2>/dev/null || python3 -m pip install -q confluent-kafka >&2

ensure_mariadb_installed
mariadb_start snapbench --innodb-buffer-pool-size=1G --innodb-flush-log-at-trx-commit=0 --sync-binlog=0 \
    --max-binlog-size=1G >/dev/null
broker_start snapbench >/dev/null
registry_start snapbench >/dev/null
sluice_pid=""
trap '[ -n "$sluice_pid" ] && kill -9 "$sluice_pid" 2>/dev/null; mariadb_stop snapbench; broker_stop snapbench; registry_stop snapbench' EXIT
port="$(mariadb_port snapbench)"

echo "snapshot_bench: loading $rows rows" >&2
mariadb_sql snapbench - <<SQL
DROP DATABASE IF EXISTS snapbench;
CREATE DATABASE snapbench;
CREATE TABLE snapbench.orders (
  id BIGINT NOT NULL PRIMARY KEY, account_id INT NOT NULL, kind TINYINT UNSIGNED NOT NULL,
  amount DECIMAL(12,2) NOT NULL, ratio DOUBLE NULL, customer VARCHAR(64) NOT NULL,
  city VARCHAR(64) CHARACTER SET utf8mb4 NULL, created_at DATETIME(6) NOT NULL, updated_at TIMESTAMP NULL DEFAULT NULL,
  due DATE NULL, status ENUM('new','paid','shipped','cancelled') NOT NULL, note TEXT NULL, attrs JSON NULL,
  flag BIT(1) NOT NULL, token VARBINARY(16) NULL
) ENGINE=InnoDB;
FLUSH BINARY LOGS;
SQL
read -r bfile bpos < <(mariadb_sql snapbench "SHOW MASTER STATUS" --batch --skip-column-names | awk '{print $1, $2}')
mariadb_sql snapbench - <<SQL
USE snapbench;
SET time_zone = '+00:00';
INSERT INTO snapbench.orders SELECT seq, seq % 5000, seq % 7, seq / 100, IF(seq % 10 = 0, NULL, seq / 7),
  CONCAT('customer-', seq), IF(seq % 3 = 0, 'Zürich', 'Łódź'), '2024-01-01' + INTERVAL seq SECOND,
  IF(seq % 2 = 0, '2024-06-01' + INTERVAL seq SECOND, NULL), '2024-01-01' + INTERVAL (seq % 365) DAY,
  ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'cancelled'), REPEAT('n', seq % 240),
  JSON_OBJECT('k', seq, 'tags', JSON_ARRAY('a', 'b')), seq % 2, UNHEX(MD5(seq))
FROM seq_1_to_$rows;
SQL
read -r efile epos < <(mariadb_sql snapbench "SHOW MASTER STATUS" --batch --skip-column-names | awk '{print $1, $2}')
echo "snapshot_bench: the insert spans $bfile:$bpos to $efile:$epos" >&2

# peak RSS (kB) of a process so far
hwm() { awk '/VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# CPU seconds (user + system) of a process so far
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }
# CPU seconds of a process's threads by role so far: "pipeline read librdkafka other"
roles_of() { python3 "$here/bench_threads.py" roles "$1"; }
# the servers' CPU seconds so far: "mariadb broker" (what each contender makes them spend, by difference)
mariadb_pid="$(cat "$(mariadb_datadir snapbench)/pid")"
broker_pid="$(cat "$(broker_dir snapbench)/pid")"
servers_cpu() { echo "$(cpu_of "$mariadb_pid") $(cpu_of "$broker_pid")"; }
config() { # NAME MODE START SERVER_ID (each run its own: the server lists a stopped replica a while)
    cat >"$out/$1.toml" <<TOML
[source]
name = "$1"
server_id = $4
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
$3
[kafka]
brokers = "$BROKER"
topic_prefix = "$1"
partitions = 3
[registry]
url = "$REGISTRY_URL"
[filter]
include = ["snapbench.orders"]
[snapshot]
mode = "$2"
${BENCH_SNAPSHOT_TOML:-}
TOML
}

results="$out/results"
: >"$results"
bins="${SLUICE_BINS:-sluice=$target/sluice}"
n=0
for round in $(seq "$runs"); do
    echo "snapshot_bench: round $round: drain" >&2
    read -r m0 b0 < <(servers_cpu)
    "$target/examples/drain_select" "$port" snapbench orders id 10000 >"$out/drain.json"
    read -r m1 b1 < <(servers_cpu)
    echo "servers-drain $round $(echo "$m1 - $m0" | bc -l) $(echo "$b1 - $b0" | bc -l)" >>"$out/servers"
    echo "drain $round $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["secs"], d["rows"], 0)' "$out/drain.json")" >>"$results"
    "$target/examples/drain_select" "$port" snapbench orders id 10000 2 >"$out/drain2.json"
    echo "drain2 $round $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["secs"], d["rows"], 0)' "$out/drain2.json")" >>"$results"

    # the contenders' order turns each round: the broker's CPU grows with what it holds, so a
    # contender always run after another met a fuller broker (two builds swapped in SLUICE_BINS
    # each looked faster when run first: 2.46 against 2.54 s, then 2.61 against 3.17 s)
    read -r -d '' -a order <<<"$bins" || true
    shift_by=$(( (round - 1) % ${#order[@]} ))
    order=("${order[@]:shift_by}" "${order[@]:0:shift_by}")
    for contender in "${order[@]}"; do
        label="${contender%%=*}"; bin="${contender#*=}"; n=$((n + 1))
        echo "snapshot_bench: round $round: snapshot ($label)" >&2
        config "snap$label$round" initial "" $((52000 + 2 * n))
        read -r m0 b0 < <(servers_cpu)
        cg=()
        if [ -n "${BENCH_CALLGRIND:-}" ]; then
            rm -f "$out/cg.$label.$round".*
            # the binary's own choice of MIMALLOC_PURGE_DELAY, set here: it would run itself again for it
            cg=(env MIMALLOC_PURGE_DELAY=0 valgrind --tool=callgrind --separate-threads=yes -q
                "--callgrind-out-file=$out/cg.$label.$round.%p")
        fi
        t0="$(date +%s.%N)"
        SLUICE_LOG=info "${cg[@]}" "$bin" run --config "$out/snap$label$round.toml" 2>"$out/snap$label$round.log" &
        sluice_pid=$!
        until grep -q "Snapshot finished" "$out/snap$label$round.log"; do
            kill -0 "$sluice_pid" 2>/dev/null || { tail "$out/snap$label$round.log" >&2; exit 1; }
            sleep 0.1
        done
        t1="$(date +%s.%N)"
        peak="$(hwm "$sluice_pid")"
        cpu="$(cpu_of "$sluice_pid")"
        faults="$(awk '{print $10}' "/proc/$sluice_pid/stat")"
        roles="$(roles_of "$sluice_pid")"
        read -r m1 b1 < <(servers_cpu)
        echo "servers-snapshot:$label $round $(echo "$m1 - $m0" | bc -l) $(echo "$b1 - $b0" | bc -l)" >>"$out/servers"
        echo "roles-snapshot:$label $round $roles" >>"$out/servers"
        kill -TERM "$sluice_pid"; wait "$sluice_pid" || true; sluice_pid=""
        if [ -n "${BENCH_CALLGRIND:-}" ]; then
            # thread 1 is the main thread, the pipeline's
            main_ir="$(awk '/^summary:/ {print $2}' "$out/cg.$label.$round".*-01)"
            all_ir="$(cat "$out/cg.$label.$round".*-* | awk '/^summary:/ {n += $2} END {print n}')"
            echo "instructions:$label $round $main_ir $all_ir" >>"$out/servers"
        fi
        echo "snapshot:$label $round $(echo "$t1 - $t0" | bc -l) $rows $peak" >>"$results"
        # its CPU seconds from its start (start-up included) to "Snapshot finished"
        echo "cpu-snapshot:$label $round $cpu $rows 0" >>"$results"
        # and its minor page faults (each a fresh page zeroed: 1.6 µs on the VM of 2026-12-07)
        echo "faults-snapshot:$label $round $faults $rows 0" >>"$results"
        # the read side alone: the snapshot's own time in its chunk reads (watermarks, queries, rows received)
        read_s="$(grep -oE 'read_seconds="?[0-9.]+'  "$out/snap$label$round.log" | tail -1 | cut -d= -f2 | tr -d '"')"
        echo "snapshot-read:$label $round $read_s $rows 0" >>"$results"
        # of which the stream waited for (the rest overlapped with publishing the chunk before)
        wait_s="$(grep -oE 'read_wait_seconds="?[0-9.]+' "$out/snap$label$round.log" | tail -1 | cut -d= -f2 | tr -d '"' || true)"
        [ -n "$wait_s" ] && echo "snapshot-wait:$label $round $wait_s $rows 0" >>"$results"
        # the same records from a plain transactional producer, committed as often (one checkpoint
        # record per Kafka transaction)
        read -r records key_bytes value_bytes first_ms _ < <(python3 "$here/topic_stats.py" "$BROKER" "snap$label$round.snapbench.orders" --dump "$out/records.bin")
        # its working window, measured as the plain producer measures its own: from the first record
        # sent (its timestamp in the topic) to "Snapshot finished" (its time in the log), so without
        # the start-up (connecting, checks, registering the schemas) that the time above counts
        window="$(python3 - "$out/snap$label$round.log" "$first_ms" <<'PY'
import datetime, re, sys
line = next(l for l in open(sys.argv[1]) if "Snapshot finished" in l)
at = datetime.datetime.strptime(re.match(r"(\S+?)\d{3}Z", line).group(1), "%Y-%m-%dT%H:%M:%S.%f")
print(f"{at.replace(tzinfo=datetime.timezone.utc).timestamp() - int(sys.argv[2]) / 1000:.3f}")
PY
)"
        echo "snapshot-window:$label $round $window $rows 0" >>"$results"
        read -r commits _ < <(python3 "$here/topic_stats.py" "$BROKER" "snap$label$round.__positions")
        python3 "$repo/integration/lib/kafka_wire.py" create-topic "$BROKER" "plain$label$round" 3 1 >/dev/null
        read -r m0 b0 < <(servers_cpu)
        "$target/examples/plain_produce" "$BROKER" "plain$label$round" "$records" "$key_bytes" "$value_bytes" \
            --transactional "$(( (records + commits - 1) / commits ))" --records-from "$out/records.bin" >"$out/plain.json"
        read -r m1 b1 < <(servers_cpu)
        echo "servers-plain:$label $round $(echo "$m1 - $m0" | bc -l) $(echo "$b1 - $b0" | bc -l)" >>"$out/servers"
        echo "roles-plain:$label $round $(python3 "$here/bench_threads.py" roles-json "$out/plain.json")" >>"$out/servers"
        rm -f "$out/records.bin"
        echo "plain:$label $round $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["secs"])' "$out/plain.json") $records 0" >>"$results"
        echo "cpu-plain:$label $round $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cpu_s"])' "$out/plain.json") $records 0" >>"$results"
        echo "faults-plain:$label $round $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("minor_faults", 0))' "$out/plain.json") $records 0" >>"$results"

        echo "snapshot_bench: round $round: stream ($label)" >&2
        config "stream$label$round" never "start = \"$bfile:$bpos\"" $((52001 + 2 * n))
        t0="$(date +%s.%N)"
        SLUICE_LOG=warn "$bin" run --config "$out/stream$label$round.toml" 2>"$out/stream$label$round.log" &
        sluice_pid=$!
        ( while kill -0 "$sluice_pid" 2>/dev/null; do hwm "$sluice_pid" >"$out/stream.hwm"; sleep 0.2; done ) &
        python3 "$here/wait_checkpoint.py" "$BROKER" "stream$label$round" "$efile" "$epos" "stream$label$round.__positions" >"$out/t1" &
        waiter=$!
        while kill -0 "$waiter" 2>/dev/null; do
            kill -0 "$sluice_pid" 2>/dev/null || { tail "$out/stream$label$round.log" >&2; kill "$waiter"; exit 1; }
            sleep 0.2
        done
        t1="$(cat "$out/t1")"
        peak="$(cat "$out/stream.hwm" 2>/dev/null)"; peak="${peak:-0}" # the sampler may be mid-write
        kill -TERM "$sluice_pid"; wait "$sluice_pid" || true; sluice_pid=""
        echo "stream:$label $round $(echo "$t1 - $t0" | bc -l) $rows $peak" >>"$results"
    done
done

python3 - "$results" "$rows" "$out/servers" "$(nproc)" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    what, rnd, secs, n, peak = line.split()
    rows.setdefault(what, []).append((float(secs), int(n), int(peak)))
print(f"{sys.argv[2]} rows, {len(rows['drain'])} rounds (medians; every round in {sys.argv[1]})")
print("| contender | seconds | rows/s | peak RSS MiB | rounds (s) |")
print("|---|---:|---:|---:|---|")
labels = [w.split(":", 1)[1] for w in rows if w.startswith("snapshot:")]
def x_rows(l):
    return rows[f"snapshot:{l}"][0][1]
med = {}
lines = [("drain", "raw drain of the snapshot's SELECTs (protocol crate, undecoded)"),
         ("drain2", "the same, two readers at once on the key range's halves")]
for l in labels:
    lines += [(f"snapshot-read:{l}", f"{l}: the snapshot's chunk reads alone (read_seconds in its log)"),
              (f"snapshot-wait:{l}", f"{l}: of which the stream waited for (read_wait_seconds; the rest overlapped publishing)"),
              (f"snapshot:{l}", f"{l}: sluice run, snapshot into Kafka (default settings)"),
              (f"snapshot-window:{l}", f"{l}: of which its working window (first record sent to the end)"),
              (f"plain:{l}", f"{l}: plain transactional producer, the snapshot's records, as many commits"),
              (f"stream:{l}", f"{l}: sluice run, the same rows streamed from the binlog")]
for what, label in lines:
    if what not in rows:
        continue  # a build from before read_wait_seconds
    r = rows[what]
    s = statistics.median(x[0] for x in r)
    med[what] = s
    peak = max(x[2] for x in r) / 1024
    print(f"| {label} | {s:.2f} | {r[0][1] / s:,.0f} | {f'{peak:.1f}' if peak else '-'} | {' '.join(f'{x[0]:.2f}' for x in r)} |")
print(f"two parallel readers / one: {med['drain2'] / med['drain']:.2f}x the time")
for l in labels:
    print(f"{l}: snapshot / drain: {med[f'snapshot:{l}'] / med['drain']:.2f}x the time; its reads / drain: "
          f"{med[f'snapshot-read:{l}'] / med['drain']:.2f}x; snapshot / stream: {med[f'snapshot:{l}'] / med[f'stream:{l}']:.2f}x; "
          f"snapshot / plain transactional producer: {med[f'snapshot:{l}'] / med[f'plain:{l}']:.2f}x")
    if f"cpu-snapshot:{l}" in rows:
        cs = statistics.median(x[0] for x in rows[f"cpu-snapshot:{l}"])
        cp = statistics.median(x[0] for x in rows[f"cpu-plain:{l}"])
        print(f"{l}: CPU seconds: sluice run to \"Snapshot finished\" {cs:.2f} (rounds "
              f"{' '.join(f'{x[0]:.2f}' for x in rows[f'cpu-snapshot:{l}'])}), start-up included; the plain "
              f"transactional producer {cp:.2f} ({' '.join(f'{x[0]:.2f}' for x in rows[f'cpu-plain:{l}'])}): {cs / cp:.2f}x")
    if f"faults-snapshot:{l}" in rows:
        fs = statistics.median(x[0] for x in rows[f"faults-snapshot:{l}"])
        fp = statistics.median(x[0] for x in rows[f"faults-plain:{l}"])
        print(f"{l}: minor page faults per 1,000 rows: sluice run to \"Snapshot finished\" {fs * 1000 / x_rows(l):.1f} "
              f"(start-up included), the plain transactional producer {fp * 1000 / x_rows(l):.1f}")
    if f"snapshot-window:{l}" in med:
        print(f"{l}: the snapshot's working window / plain transactional producer: "
              f"{med[f'snapshot-window:{l}'] / med[f'plain:{l}']:.2f}x")
# Where the CPU goes, contender and servers alike: what the snapshot makes MariaDB and the broker spend
# beside its own threads, against the plain producer's. A snapshot does at least the plain producer's work
# (its process's CPU and the broker's for it) and MariaDB's serving of the rows: on a machine of N cores no
# run takes less wall time than that CPU over N, even if Sluice's own work cost no more than the plain
# producer's: the floor of the snapshot's ratio on this machine.
srv = {}
for line in open(sys.argv[3]):
    what, _, *xs = line.split()
    srv.setdefault(what, []).append([float(x) for x in xs])
def medians(what):
    r = srv.get(what, [])
    return [statistics.median(col) for col in zip(*r)] if r else None
ncpu = int(sys.argv[4])
for l in labels:
    ir = medians(f"instructions:{l}")
    if ir:
        print(f"{l}: instructions per row under callgrind (start-up included): the main (pipeline) thread "
              f"{ir[0] / x_rows(l):,.0f}, all threads {ir[1] / x_rows(l):,.0f} (rounds: "
              f"{' '.join(f'{x[0] / x_rows(l):,.0f}' for x in srv[f'instructions:{l}'])})")
d = medians("servers-drain")
if d:
    print(f"the raw drain made MariaDB spend {d[0]:.2f} CPU s")
for l in labels:
    s, p = medians(f"servers-snapshot:{l}"), medians(f"servers-plain:{l}")
    rs, rp = medians(f"roles-snapshot:{l}"), medians(f"roles-plain:{l}")
    if not (s and p and rs and rp):
        continue
    print(f"{l}: CPU s by part (medians): | MariaDB | broker | pipeline thread | tokio workers (reads) | librdkafka broker threads | other |")
    print(f"{l}: sluice run, snapshot (start-up included) | {s[0]:.2f} | {s[1]:.2f} | {rs[0]:.2f} | {rs[1]:.2f} | {rs[2]:.2f} | {rs[3]:.2f} |")
    print(f"{l}: plain transactional producer | {p[0]:.2f} | {p[1]:.2f} | {rp[0]:.2f} | - | {rp[2]:.2f} | {rp[3]:.2f} |")
    plain_cpu = statistics.median(x[0] for x in rows[f"cpu-plain:{l}"])
    fixed = s[0] + plain_cpu + p[1]
    print(f"{l}: the plain producer's work ({plain_cpu:.2f} CPU s, the broker's {p[1]:.2f} for it) and MariaDB's "
          f"serving ({s[0]:.2f}): {fixed:.2f} CPU s, so on {ncpu} cores no snapshot takes less than {fixed / ncpu:.2f} s, "
          f"{fixed / ncpu / med[f'plain:{l}']:.2f}x the plain producer's wall, even if Sluice's own work cost no more than its")
PY
