#!/usr/bin/env bash
# Peak memory for one huge row (issue 13: "one row with a 64 MiB BLOB and one with a 1 GiB LONGBLOB
# limit declared flow through, with memory bounded by configuration").
#
# A fresh MariaDB with max_allowed_packet = 1G writes, each into its own binlog file:
#   - one row with a 64 MiB LONGBLOB (InnoDB), published with message.max.bytes = 100000000;
#   - one row with a LONGBLOB of 1,000,000,100 bytes, just above Kafka's largest message.max.bytes
#     (1000000000), in a MyISAM table (InnoDB refuses a BLOB over a tenth of its redo log), which
#     `sluice run` must refuse with a message naming table, key and size, without building its record;
#   - the same 1 GB row against source.max_event_size = 256MiB: refused as an event too large.
# For each, `sluice run` (release) starts at the file, and the script reports the outcome, the time and
# the peak RSS (VmHWM), sampled every 0.1 s.
#
# Usage: bench/large_row.sh            (about 2 minutes; MariaDB takes ~5 GB of memory for the 1 GB row)
# Env: SLUICE_WORK (default <repo>/.work), CARGO_TARGET_DIR, BENCH_NO_BUILD=1, LARGE_ROW_SKIP_GIB=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"

export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
out="$SLUICE_WORK/large_row"
rm -rf "$out" && mkdir -p "$out"

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    echo "large_row: building (release)" >&2
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice && cargo build --release -q -p sluice-test-registry)
fi
target="${CARGO_TARGET_DIR:-$repo/target}/release"
export SLUICE_REGISTRY_BIN="$target/sluice-test-registry"
bin="$target/sluice"

mariadb_start largerow --max-allowed-packet=1G --innodb-log-file-size=1G --max-binlog-size=1G \
    --binlog-stmt-cache-size=64M --innodb-flush-log-at-trx-commit=0 --sync-binlog=0 >/dev/null
broker_start largerow >/dev/null
registry_start largerow >/dev/null
sluice_pid=""
trap '[ -n "$sluice_pid" ] && kill -9 "$sluice_pid" 2>/dev/null; mariadb_stop largerow; broker_stop largerow; registry_stop largerow' EXIT
port="$(mariadb_port largerow)"
status() { mariadb_sql largerow "SHOW MASTER STATUS" -N | awk '{print $1":"$2}'; }
mariadb_sql largerow "CREATE DATABASE big; CREATE TABLE big.innodb (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB;
    CREATE TABLE big.myisam (id INT PRIMARY KEY, b LONGBLOB) ENGINE=MyISAM"

# phase NAME START MAX_MESSAGE_BYTES MAX_EVENT_SIZE: runs sluice from START until its checkpoint passes
# the binlog end (exit 0) or it stops by itself; prints "outcome seconds peak_kib"
phase() {
    local name="$1" start="$2" mmb="$3" mes="$4" end
    end="$(status)"
    cat >"$out/$name.toml" <<TOML
[source]
name = "$name"
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
server_id = $(( 61000 + RANDOM % 1000 ))
start = "$start"
max_event_size = "$mes"
[kafka]
brokers = "$BROKER"
topic_prefix = "$name"
partitions = 1
[kafka.properties]
"message.max.bytes" = "$mmb"
[registry]
url = "$REGISTRY_URL"
[filter]
include = ["big.*"]
[snapshot]
mode = "never"
TOML
    local t0 outcome=timeout peak=0 waiter p
    t0="$(date +%s.%N)"
    SLUICE_LOG=warn "$bin" run --config "$out/$name.toml" 2>"$out/$name.log" &
    sluice_pid=$!
    python3 "$here/wait_checkpoint.py" "$BROKER" "$name" "${end%:*}" "${end##*:}" "$name.__positions" >/dev/null &
    waiter=$!
    for _ in $(seq 1 3000); do
        p="$(awk '/VmHWM/{print $2}' "/proc/$sluice_pid/status" 2>/dev/null || true)"
        [ -n "$p" ] && [ "$p" -gt "$peak" ] && peak="$p"
        if ! kill -0 "$sluice_pid" 2>/dev/null; then
            if wait "$sluice_pid"; then outcome="exit-0"; else outcome="exit-$?"; fi
            sluice_pid=""
            break
        fi
        if ! kill -0 "$waiter" 2>/dev/null; then
            outcome="published"
            break
        fi
        sleep 0.1
    done
    kill "$waiter" 2>/dev/null || true
    [ -n "$sluice_pid" ] && { kill -TERM "$sluice_pid"; wait "$sluice_pid" || true; sluice_pid=""; }
    echo "$outcome $(echo "$(date +%s.%N) - $t0" | bc -l | xargs printf '%.1f') $peak"
}

mariadb_sql largerow "FLUSH BINARY LOGS"
start="$(status)"
echo "large_row: one 64 MiB row" >&2
mariadb_sql largerow "INSERT INTO big.innodb VALUES (1, REPEAT(UNHEX('00FF7F80'), 16 * 1024 * 1024))"
r64="$(phase mib64 "$start" 100000000 1GiB)"

if [ -z "${LARGE_ROW_SKIP_GIB:-}" ]; then
    mariadb_sql largerow "FLUSH BINARY LOGS"
    start="$(status)"
    echo "large_row: one 1,000,000,100-byte row" >&2
    mariadb_sql largerow "INSERT INTO big.myisam VALUES (2, REPEAT('x', 1000000100))"
    rgib="$(phase gib "$start" 1000000000 1GiB)"
    rcap="$(phase gibcap "$start" 1000000000 256MiB)"
fi

echo
fmt() { # LABEL SETTINGS "outcome seconds peak_kib"
    set -- "$1" "$2" $3
    printf '| %s | %s | %s | %s | %.0f |\n' "$1" "$2" "$3" "$4" "$(echo "$5 / 1024" | bc -l)"
}
echo "| row | settings | outcome | seconds | peak RSS MiB |"
echo "|---|---|---|---:|---:|"
fmt "64 MiB LONGBLOB" "message.max.bytes = 100000000" "$r64"
if [ -n "${rgib:-}" ]; then
    fmt "1,000,000,100-byte LONGBLOB" "message.max.bytes = 1000000000" "$rgib"
    fmt "1,000,000,100-byte LONGBLOB" "also source.max_event_size = 256MiB" "$rcap"
    echo
    echo "The stop messages:"
    grep -h "ERROR" "$out/gib.log" "$out/gibcap.log" | cut -c1-500 | sed 's/^/    /' || true
fi
