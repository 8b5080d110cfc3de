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
#
# Usage: bench/verify_bench.sh [ROWS] (default 1000000)
# Env: SLUICE_WORK (default <repo>/.work), BENCH_RUNS (rounds, default 3), BENCH_NO_BUILD=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"

rows="${1:-1000000}"
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
sluice_pid=""
trap '[ -n "$sluice_pid" ] && kill -9 "$sluice_pid" 2>/dev/null; mariadb_stop vbench; broker_stop vbench; registry_stop vbench' EXIT
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
include = ["snapbench.orders"]
[snapshot]
mode = "initial"
TOML
}
config
echo "verify_bench: snapshotting the table into Kafka" >&2
SLUICE_LOG=info "$target/sluice" run --config "$out/sluice.toml" 2>"$out/run.log" &
sluice_pid=$!
until grep -q "Snapshot finished" "$out/run.log"; do
    kill -0 "$sluice_pid" 2>/dev/null || { tail "$out/run.log" >&2; exit 1; }
    sleep 0.5
done

results="$out/results"
: >"$results"
timed() { # LABEL ROUND CMD...: seconds and peak RSS (kB) of CMD
    local label="$1" round="$2"; shift 2
    /usr/bin/time -f "%e %M" -o "$out/time" "$@" >"$out/$label.out" 2>"$out/$label.err" || {
        [ "$label" = verify ] || [ "$label" = verify-32MiB ] || { cat "$out/$label.err" >&2; exit 1; }
        grep -q '"not_equal":0' "$out/$label.out" || { cat "$out/$label.out" "$out/$label.err" >&2; exit 1; }; }
    read -r secs kb <"$out/time"
    echo "$label $round $secs $rows $kb" >>"$results"
}
for round in $(seq "$runs"); do
    echo "verify_bench: round $round" >&2
    timed drain "$round" "$target/examples/drain_select" "$port" snapbench orders id 10000
    timed topic "$round" "$target/examples/drain_topic" "$BROKER" vb.snapbench.orders
    timed verify "$round" "$target/sluice" verify --config "$out/sluice.toml" --table snapbench.orders --format json
    timed verify-32MiB "$round" "$target/sluice" verify --config "$out/sluice.toml" --table snapbench.orders \
        --format json --memory-limit 32MiB
    grep -o '"passes":[0-9]*' "$out/verify-32MiB.out" >"$out/passes"
done
python3 - "$results" "$rows" "$(cat "$out/passes")" <<'PY'
import statistics, sys
r = {}
for line in open(sys.argv[1]):
    what, rnd, secs, n, kb = line.split()
    r.setdefault(what, []).append((float(secs), int(n), int(kb)))
print(f"{sys.argv[2]} rows, {len(r['drain'])} rounds (medians; every round in {sys.argv[1]}); 32MiB: {sys.argv[3]}")
print("| contender | seconds | rows/s | peak RSS MiB | rounds (s) |")
print("|---|---:|---:|---:|---|")
med = {}
for what, label in [("drain", "raw drain of the table's chunked SELECTs (undecoded)"),
                    ("topic", "plain read_committed read of the topic (undecoded)"),
                    ("verify", "sluice verify, defaults (one pass)"),
                    ("verify-32MiB", "sluice verify --memory-limit 32MiB")]:
    x = r[what]
    s = statistics.median(v[0] for v in x)
    med[what] = s
    print(f"| {label} | {s:.2f} | {x[0][1] / s:,.0f} | {max(v[2] for v in x) / 1024:.1f} | {' '.join(f'{v[0]:.2f}' for v in x)} |")
slower = max(med["drain"], med["topic"])
print(f"verify / slower drain: {med['verify'] / slower:.2f}x (goal: at most 2x)")
PY
