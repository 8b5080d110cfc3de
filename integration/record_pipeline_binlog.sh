#!/usr/bin/env bash
# Records integration/sql/pipeline.sql on a throwaway MariaDB and copies the binlog file it wrote
# (CRC32, ROW, FULL metadata) to crates/publisher/testdata/pipeline/: the input the pipeline's
# server-free tests replay (crates/publisher/src/pipeline/tests.rs). Run it again only when the
# workload changes; the tests assert what the workload says.
#
# Usage: integration/record_pipeline_binlog.sh   Env: SLUICE_WORK (work files, default <repo>/.work)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=lib/mariadb.sh
. "$here/lib/mariadb.sh"

name="pipeline-record"
out="$repo/crates/publisher/testdata/pipeline"
mariadb_start "$name" >/dev/null
trap 'mariadb_stop "$name"' EXIT
mariadb_sql "$name" - <"$here/sql/pipeline.sql"
mkdir -p "$out"
cp "$MARIADB_DATADIR/mysql-bin.000001" "$out/mysql-bin.000001"
TZ=UTC mariadb-binlog --no-defaults -vv --base64-output=decode-rows "$out/mysql-bin.000001" \
    >"$out/mysql-bin.000001.mariadb-binlog-vv.txt"
echo "record_pipeline_binlog: wrote $out/mysql-bin.000001 ($(wc -c <"$out/mysql-bin.000001") bytes)"
