#!/usr/bin/env bash
# Generates large MariaDB binlogs for the decoder benchmark.
#
# Usage: bench/gen_bench_binlog.sh OUTDIR [ROWS]
#   ROWS (default 1000000) inserts, then ROWS*3/10 updates and ROWS/10 deletes: 1.4 M row changes by default,
#   in transactions of 1 to 10000 row changes (single statements and multi-statement transactions).
#   Two variants of the same workload, each in its own binlog file(s):
#     OUTDIR/full/mysql-bin.NNNNNN    binlog_row_image=FULL for everything
#     OUTDIR/mixed/mysql-bin.NNNNNN   inserts FULL; updates half FULL, half MINIMAL; deletes half MINIMAL,
#                                     half NOBLOB
#   Columns: BIGINT PK, INT, TINYINT UNSIGNED, DECIMAL(12,2), DOUBLE, VARCHAR (ASCII and utf8mb4), DATETIME(6),
#   TIMESTAMP, DATE, ENUM, TEXT (0-240 bytes), JSON, BIT(1), VARBINARY(16).
# Env: SLUICE_WORK (work files, default <repo>/.work), BENCH_KEEP_DATADIR=1 (keep the server's datadir).
#
# Timed here (2 cores, MariaDB 10.11.19, 2026-11-29), ROWS=1000000: 103 s wall in total (`time`), of which
# the SQL took 33 s (full) and 38 s (mixed) and the row count with mariadb-binlog about 15 s per variant;
# full: one file of 335,749,917 bytes, mixed: one file of 278,307,691 bytes, 1,400,000 row changes each.
# ROWS=20000 takes 8 s.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=../integration/lib/mariadb.sh
. "$repo/integration/lib/mariadb.sh"

out="${1:?usage: bench/gen_bench_binlog.sh OUTDIR [ROWS]}"
rows="${2:-1000000}"
name="bench"
start_s=$(date +%s)

ensure_mariadb_installed
# Durability off: this is throwaway data and the binlog content does not depend on it.
mariadb_start "$name" --innodb-buffer-pool-size=1G --innodb-log-file-size=512M \
    --innodb-flush-log-at-trx-commit=0 --sync-binlog=0 --innodb-doublewrite=0 \
    --max-binlog-size=1G --max-allowed-packet=64M >/dev/null
# The server's datadir holds a second copy of every binlog: remove it once done (BENCH_KEEP_DATADIR=1 keeps it).
trap 'mariadb_stop "$name"; [ "${BENCH_KEEP_DATADIR:-0}" = 1 ] || rm -rf "$(mariadb_datadir "$name")"' EXIT

work="$(mariadb_workdir)/bench-sql"
mkdir -p "$work"

# The SQL of one variant, on stdout. Deterministic: values derive from the row id; fixed SET TIMESTAMP.
gen_sql() {
    python3 - "$1" "$rows" <<'EOF'
import sys
variant, n = sys.argv[1], int(sys.argv[2])
n_upd, n_del = n * 3 // 10, n // 10
db = f"bench_{variant}"
p = print
p("SET SESSION time_zone = '+00:00'; SET TIMESTAMP = 1700000000;")
p("SET SESSION binlog_row_image = 'FULL';")
p(f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; USE {db};")
p("""CREATE TABLE orders (
  id BIGINT NOT NULL PRIMARY KEY,
  account_id INT NOT NULL,
  kind TINYINT UNSIGNED NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  ratio DOUBLE NULL,
  customer VARCHAR(64) NOT NULL,
  city VARCHAR(64) CHARACTER SET utf8mb4 NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at TIMESTAMP NULL DEFAULT NULL,
  due DATE NULL,
  status ENUM('new','paid','shipped','cancelled') NOT NULL,
  note TEXT NULL,
  attrs JSON NULL,
  flag BIT(1) NOT NULL,
  token VARBINARY(16) NULL
) ENGINE=InnoDB;""")

# Transaction sizes cycle through this pattern; every 5th slot is a multi-statement transaction of 3 pieces.
PATTERN = [1, 10, 100, 1000, 10000, 5000, 50, 2, 500, 3]

def batches(total):
    out, i, done = [], 0, 0
    while done < total:
        size = min(PATTERN[i % len(PATTERN)], total - done)
        out.append((done + 1, done + size))
        done += size
        i += 1
    return out

def emit(stmts_for_range, lo_base, total):
    slot = 0
    pending = []
    for a, b in batches(total):
        a, b = a + lo_base, b + lo_base
        if slot % 5 == 4:
            pending.append(stmts_for_range(a, b))
            if len(pending) == 3:
                p("START TRANSACTION;")
                for s in pending:
                    p(s)
                p("COMMIT;")
                pending = []
                slot += 1
            continue
        p(stmts_for_range(a, b))
        slot += 1
    if pending:
        p("START TRANSACTION;")
        for s in pending:
            p(s)
        p("COMMIT;")

def insert(a, b):
    return f"""INSERT INTO orders SELECT seq, seq % 9973, seq % 7, (seq % 100000) / 100 - 250,
  IF(seq % 11 = 0, NULL, seq / 7), CONCAT('customer-', seq), ELT(1 + seq % 5, 'Paris', 'Zürich', '東京', 'São Paulo', NULL),
  TIMESTAMPADD(MICROSECOND, seq * 1234567, '2024-01-01 00:00:00'), IF(seq % 3 = 0, NULL, FROM_UNIXTIME(1700000000 + seq)),
  IF(seq % 13 = 0, NULL, DATE('2024-01-01') + INTERVAL (seq % 400) DAY), 1 + seq % 4,
  IF(seq % 4 = 0, NULL, LEFT(REPEAT(CONCAT('note ', seq, ' lorem ipsum '), 12), seq % 241)),
  IF(seq % 2 = 0, NULL, JSON_OBJECT('n', seq, 'tags', JSON_ARRAY('a', seq % 10), 'ok', seq % 3 = 0)),
  seq % 2, IF(seq % 5 = 0, NULL, UNHEX(MD5(seq)))
FROM seq_{a}_to_{b};"""

def update(a, b):
    return f"UPDATE orders SET amount = amount + 1.25, status = 'paid', updated_at = FROM_UNIXTIME(1710000000 + id), note = CONCAT(IFNULL(note, ''), ' +') WHERE id BETWEEN {a} AND {b};"

def delete(a, b):
    return f"DELETE FROM orders WHERE id BETWEEN {a} AND {b};"

emit(insert, 0, n)
# Updates touch ids 1..n_upd, deletes the last n_del ids (never updated, so each statement changes every row).
if variant == "full":
    emit(update, 0, n_upd)
    emit(delete, n - n_del, n_del)
else:
    half = n_upd // 2
    emit(update, 0, half)
    p("SET SESSION binlog_row_image = 'MINIMAL';")
    emit(update, half, n_upd - half)
    dhalf = n_del // 2
    emit(delete, n - n_del, dhalf)
    p("SET SESSION binlog_row_image = 'NOBLOB';")
    emit(delete, n - n_del + dhalf, n_del - dhalf)
    p("SET SESSION binlog_row_image = 'FULL';")
EOF
}

mkdir -p "$out"
for variant in full mixed; do
    t0=$(date +%s)
    gen_sql "$variant" >"$work/$variant.sql"
    first="$(mariadb_sql "$name" "FLUSH BINARY LOGS; SHOW MASTER STATUS" --batch --skip-column-names | cut -f1)"
    mariadb_sql "$name" - <"$work/$variant.sql"
    mariadb_sql "$name" "FLUSH BINARY LOGS"
    rm -rf "${out:?}/$variant"
    mkdir -p "$out/$variant"
    # Every file from the first one of this variant up to (not including) the new active file.
    mapfile -t files < <(mariadb_sql "$name" "SHOW BINARY LOGS" --batch --skip-column-names | cut -f1)
    for f in "${files[@]}"; do
        if [[ "$f" > "$first" || "$f" == "$first" ]] && [ "$f" != "${files[-1]}" ]; then
            cp "$MARIADB_DATADIR/$f" "$out/$variant/$f"
        fi
    done
    t1=$(date +%s)
    # Count the row changes with the server's own decoder (also proves the file reads back).
    counts="$(mariadb-binlog --no-defaults -v --base64-output=decode-rows "$out/$variant"/mysql-bin.* \
        | grep -oE '^### (INSERT INTO|UPDATE|DELETE FROM)' | sort | uniq -c | awk '{printf "%s %s=%d ", "", $3, $1}')"
    bytes="$(cat "$out/$variant"/mysql-bin.* | wc -c)"
    total="$(echo "$counts" | grep -oE "[0-9]+" | awk "{s += \$1} END {print s}")"
    echo "bench[$variant]: $(ls "$out/$variant" | tr '\n' ' ')bytes=$bytes row changes=$total:$counts(SQL ran in $((t1 - t0)) s)"
done
echo "gen_bench_binlog: done in $(( $(date +%s) - start_s )) s; files under $out"
