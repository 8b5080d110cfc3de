#!/usr/bin/env bash
# Checks a recording made by record_workload.sh for self-consistency with the server's own tools: replays its
# binlog files with `mariadb-binlog | mariadb` into a fresh throwaway server and compares every table with
# expected-final.json. A pass means the binlog files carry every change needed to rebuild the final state
# (the same check the decoder's round-trip test makes with `sluice dump`).
#
# Usage: integration/verify_recording.sh [DIR]   (default: crates/binlog/tests/data/recorded)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=lib/mariadb.sh
. "$here/lib/mariadb.sh"
dir="${1:-$repo/crates/binlog/tests/data/recorded}"
name="replay"

ensure_mariadb_installed
python3 -c 'import pymysql' 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check pymysql
mariadb_start "$name" >/dev/null
trap 'mariadb_stop "$name"' EXIT
mariadb-binlog --no-defaults "$dir"/mysql-bin.[0-9][0-9][0-9][0-9][0-9][0-9] | mariadb_sql "$name" -
python3 "$here/record_workload.py" --port "$MARIADB_PORT" --compare-final "$dir/expected-final.json"
