#!/usr/bin/env bash
# Records integration/sql/workload.sql on a throwaway MariaDB and writes, into OUTDIR:
#   mysql-bin.NNNNNN            the closed binlog files the workload produced (CRC32, ROW, FULL metadata)
#   expected-final.json         each table's final rows as SELECT returns them
#   expected-transactions.json  the net row changes of every committed transaction, by GTID
#   manifest.json               file sizes, sha256, event-type census, GTID range
#   mysql-bin.NNNNNN.mariadb-binlog-vv.txt
#                               `mariadb-binlog -vv` of each binlog (TZ=UTC): the reference decoding that
#                               crates/binlog/tests/mariadb_binlog_vv.rs compares every value with
# Then checks with mariadb-binlog that the compressed event types (165-168) are there and that the
# rolled-back transaction is not.
#
# Usage: integration/record_workload.sh [OUTDIR]   (default: crates/binlog/tests/data/recorded)
# Env:   SLUICE_WORK (work files, default <repo>/.work), KEEP_SERVER=1 (leave the server running)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=lib/mariadb.sh
. "$here/lib/mariadb.sh"

out="${1:-$repo/crates/binlog/tests/data/recorded}"
name="workload"
sql="$here/sql/workload.sql"

ensure_mariadb_installed
if ! python3 -c 'import pymysql' 2>/dev/null; then
    echo "record_workload: installing pymysql with pip" >&2
    python3 -m pip install --quiet --disable-pip-version-check pymysql 2>/dev/null \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages pymysql
fi

mariadb_start "$name" >/dev/null
if [ "${KEEP_SERVER:-0}" != 1 ]; then
    trap 'mariadb_stop "$name"' EXIT
fi

mkdir -p "$out"
rm -f "$out"/mysql-bin.[0-9]* "$out"/expected-final.json "$out"/expected-transactions.json "$out"/manifest.json

python3 "$here/record_workload.py" --port "$MARIADB_PORT" --sql "$sql" --datadir "$MARIADB_DATADIR" --out "$out"

# ---- verification with the server's own tool
vv="$(mariadb_workdir)/mariadb-$name/binlog-vv.txt"
: >"$vv"
binlogs=("$out"/mysql-bin.[0-9][0-9][0-9][0-9][0-9][0-9])
for f in "${binlogs[@]}"; do
    # kept beside the binlog (TZ=UTC: the event-header times in it do not depend on the machine)
    TZ=UTC mariadb-binlog --no-defaults -vv --base64-output=decode-rows "$f" >"$f.mariadb-binlog-vv.txt"
    cat "$f.mariadb-binlog-vv.txt" >>"$vv"
done
fail=0
for ev in Query_compressed Write_compressed_rows Update_compressed_rows Delete_compressed_rows \
    Write_rows Update_rows Delete_rows Table_map Annotate_rows; do
    n="$(grep -cE "CRC32 0x[0-9a-f]+[[:space:]]+$ev" "$vv" || true)"
    printf '  %-24s %s\n' "$ev" "$n"
    if [ "$n" = 0 ]; then
        echo "record_workload: mariadb-binlog shows no $ev event" >&2
        fail=1
    fi
done
if grep -q ROLLED_BACK "$vv"; then
    echo "record_workload: the rolled-back transaction appears in the binlog" >&2
    fail=1
fi
python3 - "$out/manifest.json" <<'EOF' || fail=1
import json, sys
m = json.load(open(sys.argv[1]))
seen = set()
for f in m["files"]:
    seen |= {int(k) for k in f["event_types"]}
missing = {165, 166, 167, 168} - seen
if missing:
    sys.exit(f"record_workload: event types {sorted(missing)} missing from the recording")
if {30, 31, 32} & seen:
    sys.exit("record_workload: ROWS v2 events in a MariaDB recording?")
EOF
[ "$fail" = 0 ] || exit 1

du -b "$out"/* | sed 's/^/  /'
echo "record_workload: wrote $out (mariadb-binlog -vv output kept in $vv)"
