#!/usr/bin/env bash
# `make demo`: starts a throwaway local MariaDB, writes some changes (a new customer, an order,
# a price change, a cancelled order), and shows them as Sluice streams them from the server as
# a replica (JSON lines), then the flashback SQL that would undo them, decoded from the files.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
sluice="${SLUICE_BIN:-$repo/target/release/sluice}"

ensure_mariadb_installed
mariadb_start demo >/dev/null
trap 'mariadb_stop demo >/dev/null 2>&1 || true' EXIT

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
UPDATE shop.orders SET status = 'paid', total = total - 0.01 WHERE customer_id = 1;
DELETE FROM shop.orders WHERE status = 'paid';
FLUSH BINARY LOGS;
SQL

binlogs=()
while read -r f; do binlogs+=("$(mariadb_datadir demo)/data/$f"); done < <(mariadb_sql demo "SHOW BINARY LOGS" --batch --skip-column-names | awk '{print $1}')

echo
echo "== sluice dump --source mysql://root@127.0.0.1:$(mariadb_port demo) (live, as a replica; JSON lines, one per row change)"
"$sluice" dump --source "mysql://root@127.0.0.1:$(mariadb_port demo)" --password '' --database shop
echo
echo "== sluice dump --format flashback (SQL that undoes those changes, last first)"
"$sluice" dump --format flashback --database shop "${binlogs[@]}"
