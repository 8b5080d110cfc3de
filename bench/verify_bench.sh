#!/usr/bin/env bash
# `sluice verify` throughput and memory (issue 22), side by side in one run on one server and broker,
# on a table of ROWS rows snapshotted into Kafka by `sluice run` (which keeps running, the source quiet):
#   (a) drain:  the table's chunked SELECTs through Sluice's protocol crate, rows received and dropped
#               undecoded (crates/protocol/examples/drain_select.rs);
#   (b) topic:  the table's topic read by a plain read_committed consumer, nothing decoded
#               (crates/publisher/examples/drain_topic.rs);
#   (c) verify: `sluice verify --table snapbench.orders` with the defaults (256 MiB of keys: one pass),
#               and (d) with --memory-limit 32MiB (several passes); peak RSS by /usr/bin/time.
# Goal (the issue): verify within 2x of the slower of (a) and (b).
# The index target, on a second table of ES_ROWS rows (default 100,000: the test engines index a few
# thousand documents a second, so a 1 M-row index would take most of an hour to build), applied by
# `sluice sink elasticsearch` into osmem-server (in memory, OpenSearch API) before the rounds:
#   (e) the small table's drain as (a); (f) a plain scroll of its index (bench/es_scroll_drain.py,
#   Python, pages of 1,000 as verify reads); (g) `sluice verify --target elasticsearch`, and (h)
#   `--target kafka` on the same table.
#
# Usage: bench/verify_bench.sh [ROWS] (default 1000000)
# Env: SLUICE_WORK (default <repo>/.work), BENCH_RUNS (rounds, default 3), BENCH_NO_BUILD=1, BENCH_HOLD=1,
# ES_ROWS (0: no index target)
# (set everything up, then wait: to profile by hand).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"
. "$repo/integration/lib/elastic.sh"

rows="${1:-1000000}"
es_rows="${ES_ROWS:-100000}"
runs="${BENCH_RUNS:-3}"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
out="$SLUICE_WORK/verify_bench"
rm -rf "$out"
mkdir -p "$out"

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    echo "verify_bench: building (release)" >&2
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice --example drain_topic \
        && cargo build --release -q -p sluice-protocol --example drain_select \
        && cargo build --release -q -p sluice-test-registry)
fi
target="${CARGO_TARGET_DIR:-$repo/target}/release"
export SLUICE_REGISTRY_BIN="$target/sluice-test-registry"
python3 -c 'import confluent_kafka' 2>/dev/null || python3 -m pip install -q confluent-kafka >&2

ensure_mariadb_installed
mariadb_start vbench --innodb-buffer-pool-size=1G --innodb-flush-log-at-trx-commit=0 --sync-binlog=0 \
    --max-binlog-size=1G >/dev/null
broker_start vbench >/dev/null
registry_start vbench >/dev/null
[ "$es_rows" -gt 0 ] && elastic_start vbench osmem >/dev/null
sluice_pid=""
sink_pid=""
trap '[ -n "$sluice_pid" ] && kill -9 "$sluice_pid" 2>/dev/null; [ -n "$sink_pid" ] && kill -9 "$sink_pid" 2>/dev/null; mariadb_stop vbench; broker_stop vbench; registry_stop vbench; elastic_stop vbench' EXIT
port="$(mariadb_port vbench)"

echo "verify_bench: loading $rows rows" >&2
mariadb_sql vbench - <<SQL
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
read -r bfile bpos < <(mariadb_sql vbench "SHOW MASTER STATUS" --batch --skip-column-names | awk '{print $1, $2}')
mariadb_sql vbench - <<SQL
USE snapbench;
SET time_zone = '+00:00';
INSERT INTO snapbench.orders SELECT seq, seq % 5000, seq % 7, seq / 100, IF(seq % 10 = 0, NULL, seq / 7),
  CONCAT('customer-', seq), IF(seq % 3 = 0, 'Zürich', 'Łódź'), '2024-01-01' + INTERVAL seq SECOND,
  IF(seq % 2 = 0, '2024-06-01' + INTERVAL seq SECOND, NULL), '2024-01-01' + INTERVAL (seq % 365) DAY,
  ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'cancelled'), REPEAT('n', seq % 240),
  JSON_OBJECT('k', seq, 'tags', JSON_ARRAY('a', 'b')), seq % 2, UNHEX(MD5(seq))
FROM seq_1_to_$rows;
CREATE TABLE snapbench.small LIKE snapbench.orders;
INSERT INTO snapbench.small SELECT * FROM snapbench.orders WHERE id <= $es_rows;
SQL
read -r efile epos < <(mariadb_sql vbench "SHOW MASTER STATUS" --batch --skip-column-names | awk '{print $1, $2}')
echo "verify_bench: the insert spans $bfile:$bpos to $efile:$epos" >&2

config() {
    cat >"$out/sluice.toml" <<TOML
[source]
name = "vb"
server_id = 53001
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
[kafka]
brokers = "$BROKER"
topic_prefix = "vb"
partitions = 3
[registry]
url = "$REGISTRY_URL"
[filter]
include = ["snapbench.orders", "snapbench.small"]
[snapshot]
mode = "initial"
TOML
}
config
echo "verify_bench: snapshotting the table into Kafka" >&2
SLUICE_LOG=info "$target/sluice" run --config "$out/sluice.toml" 2>"$out/run.log" &
sluice_pid=$!
until grep -q "Snapshot finished" "$out/run.log" 2>/dev/null; do
    kill -0 "$sluice_pid" 2>/dev/null || { tail "$out/run.log" >&2; exit 1; }
    sleep 0.5
done

if [ "$es_rows" -gt 0 ]; then
    # the index of the small table, applied by the sink (which then stops: verify waits for its
    # group's committed offsets, which stay at the topic's end)
    cp "$out/sluice.toml" "$out/sluice-es.toml"
    cat >>"$out/sluice-es.toml" <<TOML
[elasticsearch]
url = "$ES_URL"
include = ["snapbench.small"]
TOML
    echo "verify_bench: the sink applies $es_rows documents into osmem" >&2
    mport="$(proc_free_port)"
    SLUICE_METRICS__LISTEN="127.0.0.1:$mport" SLUICE_LOG=warn "$target/sluice" sink elasticsearch \
        --config "$out/sluice-es.toml" 2>"$out/sink.log" &
    sink_pid=$!
    until [ "$(curl -s "127.0.0.1:$mport/metrics" | awk '/^sluice_es_documents_total/{s+=$2} END{print s+0}')" -ge "$es_rows" ]; do
        kill -0 "$sink_pid" 2>/dev/null || { tail "$out/sink.log" >&2; exit 1; }
        sleep 1
    done
    sleep 2
    kill -TERM "$sink_pid"; wait "$sink_pid" || true; sink_pid=""
fi

if [ -n "${BENCH_HOLD:-}" ]; then
    echo "verify_bench: holding (BENCH_HOLD): config $out/sluice.toml, broker $BROKER; Ctrl-C ends" >&2
    sleep infinity
fi
results="$out/results"
: >"$results"
timed() { # LABEL ROUND CMD...: seconds and peak RSS (kB) of CMD
    local label="$1" round="$2"; shift 2
    /usr/bin/time -f "%e %M" -o "$out/time" "$@" >"$out/$label.out" 2>"$out/$label.err" || {
        case "$label" in verify*) ;; *) cat "$out/$label.err" >&2; exit 1 ;; esac
        grep -q '"not_equal":0' "$out/$label.out" || { cat "$out/$label.out" "$out/$label.err" >&2; exit 1; }; }
    read -r secs kb <"$out/time"
    local n="$rows"
    case "$label" in es-*|verify-es*) n="$es_rows" ;; esac
    echo "$label $round $secs $n $kb" >>"$results"
}
for round in $(seq "$runs"); do
    echo "verify_bench: round $round" >&2
    timed drain "$round" "$target/examples/drain_select" "$port" snapbench orders id 10000
    timed topic "$round" "$target/examples/drain_topic" "$BROKER" vb.snapbench.orders
    timed verify "$round" "$target/sluice" verify --config "$out/sluice.toml" --table snapbench.orders --format json
    timed verify-32MiB "$round" "$target/sluice" verify --config "$out/sluice.toml" --table snapbench.orders \
        --format json --memory-limit 32MiB
    grep -o '"passes":[0-9]*' "$out/verify-32MiB.out" >"$out/passes"
    if [ "$es_rows" -gt 0 ]; then
        timed es-drain "$round" "$target/examples/drain_select" "$port" snapbench small id 10000
        timed es-scroll "$round" python3 "$here/es_scroll_drain.py" "$ES_URL" vb.snapbench.small 1000
        timed verify-es "$round" "$target/sluice" verify --config "$out/sluice-es.toml" --table snapbench.small \
            --target elasticsearch --format json
        timed verify-es-kafka "$round" "$target/sluice" verify --config "$out/sluice-es.toml" \
            --table snapbench.small --target kafka --format json
    fi
done
python3 - "$results" "$rows" "$(cat "$out/passes")" <<'PY'
import statistics, sys
r = {}
for line in open(sys.argv[1]):
    what, rnd, secs, n, kb = line.split()
    r.setdefault(what, []).append((float(secs), int(n), int(kb)))
print(f"{sys.argv[2]} rows, {len(r['drain'])} rounds (medians; every round in {sys.argv[1]}); 32MiB: {sys.argv[3]}")
med = {}
def table(contenders):
    """One markdown table of the contenders' medians; returns nothing, fills med."""
    print("| contender | seconds | rows/s | peak RSS MiB | rounds (s) |")
    print("|---|---:|---:|---:|---|")
    for what, label in contenders:
        x = r[what]
        s = statistics.median(v[0] for v in x)
        med[what] = s
        print(f"| {label} | {s:.2f} | {x[0][1] / s:,.0f} | {max(v[2] for v in x) / 1024:.1f} | {' '.join(f'{v[0]:.2f}' for v in x)} |")
table([("drain", "raw drain of the table's chunked SELECTs (undecoded)"),
       ("topic", "plain read_committed read of the topic (undecoded)"),
       ("verify", "sluice verify, defaults (one pass)"),
       ("verify-32MiB", "sluice verify --memory-limit 32MiB")])
slower = max(med["drain"], med["topic"])
print(f"verify / slower drain: {med['verify'] / slower:.2f}x (goal: at most 2x)")
if "verify-es" in r:
    print()
    print(f"the index target: {r['verify-es'][0][1]} rows (snapbench.small), osmem-server")
    table([("es-drain", "raw drain of the table's chunked SELECTs (undecoded)"),
           ("es-scroll", "plain scroll of the index (Python, JSON parsed)"),
           ("verify-es", "sluice verify --target elasticsearch"),
           ("verify-es-kafka", "sluice verify --target kafka (same table)")])
    slower = max(med["es-drain"], med["es-scroll"])
    print(f"verify --target elasticsearch / slower drain: {med['verify-es'] / slower:.2f}x (goal: at most 2x)")
PY
