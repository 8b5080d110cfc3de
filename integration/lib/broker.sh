#!/usr/bin/env bash
# A Kafka-compatible broker with real transactions for tests: noida-db 0.2.3 (Kafka protocol only),
# built with two fixes (see NOIDA_DB_PATCH below).
#
# Sourceable:   . integration/lib/broker.sh
#               ensure_broker_installed
#               broker_start NAME          # fresh data dir, free loopback port; exports BROKER, prints BROKER=host:port
#               broker_restart NAME        # stop, wait for exit, start again on the same port with the same data
#               broker_up NAME             # start again (after broker_stop) on the same port with the same data
#               broker_create_topic NAME TOPIC [PARTITIONS] [key=value ...]
#               broker_stop NAME           # SIGTERM, wait for exit (SIGKILL after 10 s)
# Executable:   integration/lib/broker.sh install | start NAME | restart NAME | stop NAME | up NAME
#               integration/lib/broker.sh create-topic NAME TOPIC [PARTITIONS] [key=value ...] | addr NAME
#
# Work files live in ${SLUICE_WORK:-<repo>/.work}/broker-NAME (data/, pid, port, broker.log); the binary in
# ${SLUICE_WORK:-<repo>/.work}/tools/bin/noida-db. Only loopback (127.0.0.1) is used.
#
# noida-db's traps (../shared/docs/ENVIRONMENT.md): create topics explicitly (auto-created ones get 1
# partition); it opens one more control port chosen by the kernel; it writes its data as one JSON snapshot
# about 2 s after a change, so a SIGKILL right after an ack can lose the newest records (wait
# BROKER_SNAPSHOT_DELAY before a restart that must keep them); the old process must have exited before a
# restart on the same port.

_BROKER_SH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_BROKER_SH_REPO="$(cd "$_BROKER_SH_DIR/../.." && pwd)"
. "$_BROKER_SH_DIR/proc.sh"
NOIDA_DB_VERSION="0.2.3"
# Seconds after the last change before noida-db's snapshot is surely on disk.
BROKER_SNAPSHOT_DELAY="${BROKER_SNAPSHOT_DELAY:-3}"

_broker_log() { echo "broker.sh: $*" >&2; }

broker_workdir() {
    echo "${SLUICE_WORK:-$_BROKER_SH_REPO/.work}"
}

broker_dir() {
    local name="${1:?broker_dir NAME}"
    echo "$(broker_workdir)/broker-$name"
}

broker_bin() {
    local b
    b="$(broker_workdir)/tools/bin/noida-db"
    if [ -x "$b" ]; then echo "$b"; return 0; fi
    command -v noida-db 2>/dev/null || true
}

# noida-db 0.2.3, with three fixes that make it behave as Kafka does where Sluice depends on it
# (integration/lib/noida-db-kafka-fixes.patch):
# - a read_committed fetch listed every aborted transaction, also those whose abort marker lies
#   before the fetch offset (Kafka lists only those the fetch can meet); librdkafka, told of an
#   aborted transaction whose marker it never reads, drops every later batch of that producer,
#   so a consumer that resumed after a marker (a restarted Elasticsearch sink) silently skipped
#   the rest of the partition;
# - a fetch that found no records was answered at once, not after up to max_wait_ms: every idle
#   consumer fetched in a busy loop (a third of a core each, on the 2-core test machines);
# - a fetch returned every batch up to the end of the partition, whatever its max_bytes and
#   partition_max_bytes: a consumer reading a large topic from its start received all of it in one
#   response and held it decompressed (sluice verify peaked at 750 MB on a 1 M-row topic); now as
#   Kafka, whole batches up to the limits, at least one.
NOIDA_DB_PATCH="$_BROKER_SH_DIR/noida-db-kafka-fixes.patch"

# Installs noida-db (Kafka feature only) from its crates.io source with the patch above, when
# missing or built without it (about a minute). Idempotent.
ensure_broker_installed() {
    local b root want
    b="$(broker_bin)"
    root="$(broker_workdir)/tools"
    want="$NOIDA_DB_VERSION $(sha256sum "$NOIDA_DB_PATCH" | cut -c1-16)"
    if [ -n "$b" ] && "$b" --version 2>/dev/null | grep -q "$NOIDA_DB_VERSION" \
        && [ "$(cat "$root/noida-db.built" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    mkdir -p "$root"
    _broker_log "installing noida-db $NOIDA_DB_VERSION with $(basename "$NOIDA_DB_PATCH") into $root (about a minute)"
    local fetch="$root/noida-db-fetch" src="$root/noida-db-src" manifest
    rm -rf "$fetch" "$src"
    mkdir -p "$fetch/src"
    echo 'fn main() {}' >"$fetch/src/main.rs"
    printf '[workspace]\n\n[package]\nname = "noida-db-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\nnoida-db = { version = "=%s", default-features = false, features = ["kafka"] }\n' \
        "$NOIDA_DB_VERSION" >"$fetch/Cargo.toml"
    manifest="$(cd "$fetch" && cargo metadata --format-version 1 2>>"$root/noida-db-install.log" | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(next(p["manifest_path"] for p in m["packages"] if p["name"] == "noida-db"))')" \
        || { _broker_log "fetching the noida-db source failed (see $root/noida-db-install.log)"; return 1; }
    cp -r "$(dirname "$manifest")" "$src"
    # a package of its own even under a workspace (SLUICE_WORK inside the repository)
    grep -q '^\[workspace\]' "$src/Cargo.toml" || printf '\n[workspace]\n' >>"$src/Cargo.toml"
    (cd "$src" && git apply -p1 "$NOIDA_DB_PATCH") || { _broker_log "the noida-db patch does not apply"; return 1; }
    if ! cargo install --path "$src" --locked --no-default-features --features kafka --force \
        --root "$root" >"$root/noida-db-install.log" 2>&1; then
        _broker_log "cargo install noida-db failed; last lines of $root/noida-db-install.log:"
        tail -n 20 "$root/noida-db-install.log" >&2
        return 1
    fi
    [ -x "$root/bin/noida-db" ] || { _broker_log "noida-db missing after cargo install"; return 1; }
    echo "$want" >"$root/noida-db.built"
    rm -rf "$fetch" "$src"
}

# Stops broker NAME and waits until the process is gone (the port is free again afterwards).
broker_stop() {
    local name="${1:?broker_stop NAME}"
    local d
    d="$(broker_dir "$name")"
    proc_stop "$d/pid" 10 "broker.sh: broker $name"
    rm -f "$d/pid"
}

# Starts the broker process of NAME on PORT with its existing data dir, and waits until it answers
# ApiVersions and Metadata (10 s max).
_broker_launch() {
    local name="$1" port="$2" d bin bgpid
    d="$(broker_dir "$name")"
    bin="$(broker_bin)"
    mkdir -p "$d/data"
    # setsid: the broker must not get the terminal's SIGINT meant for the calling script.
    setsid "$bin" start --only kafka --kafka-port "$port" --data-dir "$d/data" >>"$d/broker.log" 2>&1 </dev/null &
    bgpid=$!
    echo "$bgpid" >"$d/pid"
    echo "$port" >"$d/port"
    if ! python3 "$_BROKER_SH_DIR/kafka_wire.py" ping "127.0.0.1:$port" 10 >>"$d/broker.log" 2>&1; then
        if kill -0 "$bgpid" 2>/dev/null; then
            _broker_log "broker $name did not answer the Kafka protocol on port $port within 10 s"
            broker_stop "$name"
        else
            _broker_log "broker $name exited during start-up"
        fi
        tail -n 20 "$d/broker.log" >&2
        return 1
    fi
    export BROKER="127.0.0.1:$port"
    echo "BROKER=$BROKER"
}

# Starts broker NAME from an empty data dir on a free loopback port. A broker still running under the
# same NAME (an earlier run that died) is stopped first.
broker_start() {
    local name="${1:?broker_start NAME}"
    ensure_broker_installed || return 1
    local d
    d="$(broker_dir "$name")"
    broker_stop "$name"
    rm -rf "$d"
    mkdir -p "$d/data"
    _broker_launch "$name" "$(proc_free_port)"
}

# Restarts broker NAME on the same port with the same data (waits for the old process to exit first).
# Records acked less than BROKER_SNAPSHOT_DELAY seconds ago may be lost if the broker was killed.
broker_restart() {
    local name="${1:?broker_restart NAME}"
    local d port
    d="$(broker_dir "$name")"
    port="$(cat "$d/port" 2>/dev/null)" || { _broker_log "broker $name was never started"; return 1; }
    broker_stop "$name"
    _broker_launch "$name" "$port"
}

# Starts broker NAME again on its old port with its old data, after broker_stop (a broker that was
# down for a while, as opposed to broker_restart's immediate start).
broker_up() {
    local name="${1:?broker_up NAME}"
    local d port
    d="$(broker_dir "$name")"
    port="$(cat "$d/port" 2>/dev/null)" || { _broker_log "broker $name was never started"; return 1; }
    _broker_launch "$name" "$port"
}

broker_addr() {
    local name="${1:?broker_addr NAME}"
    echo "127.0.0.1:$(cat "$(broker_dir "$name")/port")"
}

# broker_create_topic NAME TOPIC [PARTITIONS] [key=value ...]: CreateTopics (replication 1); an existing
# topic is fine.
broker_create_topic() {
    local name="${1:?broker_create_topic NAME TOPIC [PARTITIONS] [key=value ...]}"
    local topic="${2:?broker_create_topic NAME TOPIC [PARTITIONS] [key=value ...]}"
    local partitions="${3:-1}"
    shift 3 2>/dev/null || shift $#
    python3 "$_BROKER_SH_DIR/kafka_wire.py" create-topic "$(broker_addr "$name")" "$topic" "$partitions" 1 "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    cmd="${1:-}"
    shift || true
    case "$cmd" in
        install) ensure_broker_installed ;;
        start) broker_start "$@" ;;
        restart) broker_restart "$@" ;;
        up) broker_up "$@" ;;
        stop) broker_stop "$@" ;;
        create-topic) broker_create_topic "$@" ;;
        addr) broker_addr "$@" ;;
        *)
            echo "usage: $0 install | start NAME | restart NAME | stop NAME | create-topic NAME TOPIC [PARTITIONS] [k=v...] | addr NAME" >&2
            exit 2
            ;;
    esac
fi
