#!/usr/bin/env bash
# `make demo`: Sluice's main job on a laptop. Starts a throwaway local MariaDB, a Kafka-compatible
# broker (noida-db) and a Schema Registry (Sluice's test registry), writes sample rows, runs
# `sluice run` (a snapshot of the existing rows, then the stream; Avro records keyed by primary
# key, one registered schema per table, the binlog position committed in the same Kafka
# transaction), writes changes, and shows the records read back from Kafka by an independent consumer (integration/show_topics.py: confluent-kafka + fastavro).
# Then the offline side: the flashback SQL that would undo the changes, decoded from the files.
#
# Env: SLUICE_BIN (default target/release/sluice), SLUICE_WORK (work files), DEMO_KEEP=1 leaves
# the three services running (their addresses are printed) for you to explore.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"
sluice="${SLUICE_BIN:-$repo/target/release/sluice}"
work="${SLUICE_WORK:-$repo/.work}/demo"
mkdir -p "$work"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if ! python3 -c 'import confluent_kafka, fastavro' 2>/dev/null; then
    say "installing the demo's Kafka reader (pip: confluent-kafka fastavro)"
    python3 -m pip install --quiet --disable-pip-version-check confluent-kafka fastavro 2>/dev/null \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages confluent-kafka fastavro
fi

ensure_mariadb_installed
mariadb_start demo >/dev/null
broker_start demo >/dev/null
registry_start demo >/dev/null
sluice_pid=""
cleanup() {
    [ -n "$sluice_pid" ] && kill "$sluice_pid" 2>/dev/null && wait "$sluice_pid" 2>/dev/null
    if [ "${DEMO_KEEP:-0}" = 1 ]; then
        echo "left running: MariaDB 127.0.0.1:$(mariadb_port demo), broker $BROKER, registry $REGISTRY_URL"
        return
    fi
    mariadb_stop demo >/dev/null 2>&1 || true
    broker_stop demo >/dev/null 2>&1 || true
    registry_stop demo >/dev/null 2>&1 || true
}
trap cleanup EXIT
port="$(mariadb_port demo)"
say "MariaDB on 127.0.0.1:$port, broker on $BROKER, Schema Registry on $REGISTRY_URL"

say "rows that exist before Sluice starts (a customer and an order)"
mariadb_sql demo - <<'SQL'
SET time_zone = '+00:00';
CREATE DATABASE shop;
CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(100), email VARCHAR(200), created DATETIME(3));
CREATE TABLE shop.orders (id BIGINT UNSIGNED PRIMARY KEY, customer_id INT, total DECIMAL(12,2),
                          status ENUM('new','paid','cancelled'), placed TIMESTAMP(6) NULL, note JSON);
BEGIN;
INSERT INTO shop.customers VALUES (1, 'Zoë Ångström', 'zoe@example.com', '2024-05-01 10:00:00.250');
INSERT INTO shop.orders VALUES (18446744073709551615, 1, 1234.50, 'new', '2024-05-01 10:00:01.123456', '{"gift": true}');
COMMIT;
SQL

cat >"$work/sluice.toml" <<TOML
# what \`make demo\` ran: sluice run --config $work/sluice.toml
[source]
name = "demo"
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
heartbeat = "1s"
# no start: with snapshots on, the stream starts at the server's current position

[kafka]
brokers = "$BROKER"
topic_prefix = "demo"
partitions = 2
batch_max_delay = "100ms"

[registry]
url = "$REGISTRY_URL"

[filter]
include = ["shop.*"]

[snapshot]
# the default: the tables' existing rows first (op "r"), chunk by chunk, then the stream
mode = "initial"
TOML

say "sluice run --config $work/sluice.toml (log: $work/sluice.log)"
SLUICE_LOG=info "$sluice" run --config "$work/sluice.toml" 2>"$work/sluice.log" &
sluice_pid=$!
for _ in $(seq 120); do
    grep -q "Snapshot finished" "$work/sluice.log" && break
    kill -0 "$sluice_pid" 2>/dev/null || { cat "$work/sluice.log"; exit 1; }
    sleep 0.5
done

say "changes while it streams (a price change, a new column, a cancelled order)"
mariadb_sql demo - <<'SQL'
UPDATE shop.orders SET status = 'paid', total = total - 0.01 WHERE customer_id = 1;
ALTER TABLE shop.customers ADD COLUMN vip BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE shop.customers SET vip = TRUE WHERE id = 1;
DELETE FROM shop.orders WHERE status = 'paid';
SQL
# 2 snapshot reads, 3 row changes and the delete's tombstone: wait until all 6 are committed
python3 "$repo/integration/show_topics.py" "$BROKER" "$REGISTRY_URL" demo --min 6 --timeout 60 >/dev/null 2>&1 || true
kill -TERM "$sluice_pid"
wait "$sluice_pid" && status=0 || status=$?
sluice_pid=""
grep -E "Snapshot|Registered|Published|Stopped" "$work/sluice.log" | grep -v "Snapshot progress" | sed -E 's/^[^ ]+ +//' | cut -c1-200
echo "(sluice run exited with $status after SIGTERM)"

say "the snapshot reads (op r) and change events, read back from Kafka (read_committed, Avro decoded with the registered schemas)"
python3 "$repo/integration/show_topics.py" "$BROKER" "$REGISTRY_URL" demo --min 6 --timeout 10

say "the committed checkpoint on demo.__positions (with the snapshot's progress)"
python3 - "$BROKER" <<'PY'
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "demo-cp", "isolation.level": "read_committed",
              "enable.partition.eof": True, "enable.auto.commit": False})
c.assign([TopicPartition("demo.__positions", 0, 0)])
last = None
while True:
    m = c.poll(5)
    if m is None or (m.error() and m.error().code() == -191):
        break
    if not m.error():
        last = m
print(f"key={last.key().decode()} value={last.value().decode()}" if last else "none")
c.close()
PY

say "sluice check: the configuration, the services, the checkpoint and the snapshot"
"$sluice" check --config "$work/sluice.toml" || true

binlogs=()
while read -r f; do binlogs+=("$(mariadb_datadir demo)/data/$f"); done < <(mariadb_sql demo "SHOW BINARY LOGS" --batch --skip-column-names | awk '{print $1}')
say "offline: sluice dump --format flashback (SQL that undoes those changes, last first)"
"$sluice" dump --format flashback --database shop "${binlogs[@]}"
