#!/usr/bin/env bash
# Throwaway Schema Registries for tests: the repo's own Confluent-compatible test registry
# (crates/test-registry, binary sluice-test-registry), since no Confluent/Karapace server is installable here.
#
# Sourceable:   . integration/lib/registry.sh
#               registry_start NAME     # fresh state; exports REGISTRY_URL, prints REGISTRY_URL=...
#               registry_restart NAME   # same data file (ids and versions survive), new port
#               registry_up NAME        # after registry_stop: the same data file on the same port
#               registry_stop NAME
# Executable:   integration/lib/registry.sh start NAME | restart NAME | up NAME | stop NAME | url NAME
#
# Work files live in ${SLUICE_WORK:-<repo>/.work}/registry-NAME (port, pid, data.json, registry.log).
# The binary is ${SLUICE_REGISTRY_BIN:-${CARGO_TARGET_DIR:-<repo>/target}/release/sluice-test-registry}, built with
# `cargo build --release -p sluice-test-registry` when missing. Only 127.0.0.1 is used.

_REGISTRY_SH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_REGISTRY_SH_REPO="$(cd "$_REGISTRY_SH_DIR/../.." && pwd)"
. "$_REGISTRY_SH_DIR/proc.sh"

_registry_log() { echo "registry.sh: $*" >&2; }

registry_dir() {
    local name="${1:?registry_dir NAME}"
    echo "${SLUICE_WORK:-$_REGISTRY_SH_REPO/.work}/registry-$name"
}

registry_bin() {
    echo "${SLUICE_REGISTRY_BIN:-${CARGO_TARGET_DIR:-$_REGISTRY_SH_REPO/target}/release/sluice-test-registry}"
}

ensure_registry_built() {
    local bin
    bin="$(registry_bin)"
    [ -x "$bin" ] && return 0
    if [ -n "${SLUICE_REGISTRY_BIN:-}" ]; then
        _registry_log "SLUICE_REGISTRY_BIN=$bin is not an executable"
        return 1
    fi
    _registry_log "building sluice-test-registry (release)"
    (cd "$_REGISTRY_SH_REPO" && cargo build --release -q -p sluice-test-registry) \
        || { _registry_log "cargo build -p sluice-test-registry failed"; return 1; }
    [ -x "$bin" ] || { _registry_log "built, but $bin is missing"; return 1; }
}

registry_stop() {
    local name="${1:?registry_stop NAME}"
    local d
    d="$(registry_dir "$name")"
    proc_stop "$d/pid" 10 "registry.sh: registry $name"
    rm -f "$d/pid" "$d/port"
}

# _registry_run NAME [PORT]: starts the binary on PORT (default: a free one) with $d/data.json and waits
# for LISTENING.
_registry_run() {
    local name="$1" listen_port="${2:-0}" d bin pid port line i
    d="$(registry_dir "$name")"
    bin="$(registry_bin)"
    mkdir -p "$d"
    : >"$d/stdout"
    # setsid: the server must not get the terminal's SIGINT meant for the calling script.
    setsid "$bin" --listen "127.0.0.1:$listen_port" --data "$d/data.json" >"$d/stdout" 2>>"$d/registry.log" </dev/null &
    pid=$!
    echo "$pid" >"$d/pid"
    port=""
    for i in $(seq 1 100); do
        line="$(grep -m1 '^LISTENING ' "$d/stdout" 2>/dev/null || true)"
        if [ -n "$line" ]; then
            port="${line##*:}"
            break
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            _registry_log "registry $name exited during start-up; last lines of $d/registry.log:"
            tail -n 20 "$d/registry.log" >&2
            return 1
        fi
        sleep 0.1
    done
    if [ -z "$port" ]; then
        _registry_log "registry $name did not print LISTENING within 10 s; see $d/registry.log"
        registry_stop "$name"
        return 1
    fi
    echo "$port" >"$d/port"
    echo "$port" >"$d/last_port"
    export REGISTRY_URL="http://127.0.0.1:$port"
    echo "REGISTRY_URL=$REGISTRY_URL"
}

# registry_start NAME: a registry with no subjects (a leftover one with the same NAME is stopped first).
registry_start() {
    local name="${1:?registry_start NAME}"
    ensure_registry_built || return 1
    registry_stop "$name"
    rm -rf "$(registry_dir "$name")"
    _registry_run "$name"
}

# registry_restart NAME: stops it and starts it again on the same data file (ids and versions kept).
registry_restart() {
    local name="${1:?registry_restart NAME}"
    ensure_registry_built || return 1
    registry_stop "$name"
    _registry_run "$name"
}

# registry_up NAME: after registry_stop, the same data file on the port it had (clients keep their URL).
registry_up() {
    local name="${1:?registry_up NAME}" d
    ensure_registry_built || return 1
    d="$(registry_dir "$name")"
    [ -f "$d/last_port" ] || { _registry_log "registry $name never ran: no port to reuse"; return 1; }
    _registry_run "$name" "$(cat "$d/last_port")"
}

registry_url() {
    local name="${1:?registry_url NAME}"
    echo "http://127.0.0.1:$(cat "$(registry_dir "$name")/port")"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    cmd="${1:-}"
    shift || true
    case "$cmd" in
        start) registry_start "$@" ;;
        restart) registry_restart "$@" ;;
        up) registry_up "$@" ;;
        stop) registry_stop "$@" ;;
        url) registry_url "$@" ;;
        *)
            echo "usage: $0 start NAME | restart NAME | up NAME | stop NAME | url NAME" >&2
            exit 2
            ;;
    esac
fi
