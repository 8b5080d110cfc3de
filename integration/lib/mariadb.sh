#!/usr/bin/env bash
# Throwaway MariaDB servers for tests, started without systemd.
#
# Sourceable:   . integration/lib/mariadb.sh
#               ensure_mariadb_installed
#               mariadb_start NAME [extra mariadbd args...]   # exports MARIADB_PORT/_DATADIR/_SOCKET
#               mariadb_sql NAME "SQL" [extra client args...] # SQL "-" reads stdin
#               mariadb_stop NAME
# Executable:   integration/lib/mariadb.sh install
#               integration/lib/mariadb.sh start NAME [extra mariadbd args...]   # prints KEY=VALUE lines
#               integration/lib/mariadb.sh stop NAME
#               integration/lib/mariadb.sh sql NAME "SQL"
#
# Work files live in ${SLUICE_WORK:-<repo>/.work}/mariadb-NAME (datadir, sock, pid, port, error.log).
# Only loopback (127.0.0.1) is used.

_MARIADB_SH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_MARIADB_SH_REPO="$(cd "$_MARIADB_SH_DIR/../.." && pwd)"
. "$_MARIADB_SH_DIR/proc.sh"

_mariadb_log() { echo "mariadb.sh: $*" >&2; }

mariadb_workdir() {
    echo "${SLUICE_WORK:-$_MARIADB_SH_REPO/.work}"
}

mariadb_datadir() {
    local name="${1:?mariadb_datadir NAME}"
    echo "$(mariadb_workdir)/mariadb-$name"
}

# Installs mariadb-server and mariadb-client from apt when the binaries are missing. Idempotent.
ensure_mariadb_installed() {
    if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then
        if command -v mariadb >/dev/null 2>&1 && command -v mariadb-binlog >/dev/null 2>&1 \
            && command -v mariadb-install-db >/dev/null 2>&1 && command -v mariadb-admin >/dev/null 2>&1; then
            return 0
        fi
    fi
    proc_apt_install mariadb.sh mariadb-server mariadb-client || return 1
    command -v mariadb >/dev/null 2>&1 || { _mariadb_log "mariadb client still missing after install"; return 1; }
}

_mariadbd_bin() {
    if command -v mariadbd >/dev/null 2>&1; then command -v mariadbd; else echo /usr/sbin/mariadbd; fi
}

mariadb_stop() {
    local name="${1:?mariadb_stop NAME}"
    local d
    d="$(mariadb_datadir "$name")"
    for pidfile in "$d/pid" "$d/mariadbd.pid"; do
        proc_stop "$pidfile" 30 "mariadb.sh: server $name"
    done
    rm -f "$d/pid" "$d/mariadbd.pid"
}

mariadb_start() {
    local name="${1:?mariadb_start NAME [mariadbd args...]}"
    shift
    ensure_mariadb_installed || return 1
    local d port mariadbd i
    d="$(mariadb_datadir "$name")"
    # A leftover server from an earlier run with the same NAME: stop it, then start from an empty datadir.
    mariadb_stop "$name"
    rm -rf "$d"
    mkdir -p "$d/data" "$d/tmp"
    # One install at a time, retried: concurrent bootstrap servers have been seen to crash
    # (signal 11) on 2 cores, and to trip over each other's temporary tables in a shared /tmp
    # ("Could not remove temporary table ... error: 2"), hence a temporary directory of its own.
    local installed="" attempt
    for attempt in 1 2 3; do
        rm -rf "$d/data" && mkdir -p "$d/data"
        if (flock 9; mariadb-install-db --no-defaults --datadir="$d/data" --tmpdir="$d/tmp" --user=root \
            --auth-root-authentication-method=normal --skip-test-db) >"$d/install.log" 2>&1 \
            9>"$(mariadb_workdir)/.mariadb-install.lock"; then
            installed=1
            break
        fi
        _mariadb_log "mariadb-install-db failed (attempt $attempt); see $d/install.log"
    done
    if [ -z "$installed" ]; then
        tail -n 20 "$d/install.log" >&2
        return 1
    fi
    port="$(proc_free_port)"
    : >"$d/args"
    if [ $# -gt 0 ]; then printf '%s\n' "$@" >"$d/args"; fi
    _mariadb_launch "$name" "$port" "$@"
}

# Restarts server NAME on its datadir and port with the arguments it was started with
# (a server restart as replicas see it). `mariadb_restart NAME --kill` kills it with SIGKILL
# first (a crash) instead of a clean shutdown.
mariadb_restart() {
    local name="${1:?mariadb_restart NAME [--kill]}"
    local d port pid
    d="$(mariadb_datadir "$name")"
    port="$(cat "$d/port")"
    if [ "${2:-}" = "--kill" ]; then
        for pidfile in "$d/pid" "$d/mariadbd.pid"; do
            if proc_pid_alive "$pidfile"; then
                pid="$(cat "$pidfile")"
                kill -KILL "$pid" 2>/dev/null || true
                while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
            fi
        done
        rm -f "$d/pid" "$d/mariadbd.pid"
    else
        mariadb_stop "$name"
    fi
    local args=()
    if [ -s "$d/args" ]; then mapfile -t args <"$d/args"; fi
    _mariadb_launch "$name" "$port" "${args[@]}"
}

_mariadb_launch() {
    local name="$1" port="$2"
    shift 2
    local d mariadbd i
    d="$(mariadb_datadir "$name")"
    mariadbd="$(_mariadbd_bin)"
    # setsid: the server must not get the terminal's SIGINT meant for the calling script.
    mkdir -p "$d/tmp"
    setsid "$mariadbd" --no-defaults --user=root --datadir="$d/data" --tmpdir="$d/tmp" --socket="$d/sock" --pid-file="$d/pid" \
        --port="$port" --bind-address=127.0.0.1 --server-id=1 --log-bin=mysql-bin \
        --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL --binlog-checksum=CRC32 \
        --gtid-strict-mode=ON --plugin-load-add=auth_ed25519 "$@" \
        >>"$d/error.log" 2>&1 </dev/null &
    local bgpid=$!
    echo "$bgpid" >"$d/mariadbd.pid"
    for i in $(seq 1 300); do
        if mariadb-admin --no-defaults -uroot -h127.0.0.1 -P"$port" --connect-timeout=1 ping >/dev/null 2>&1; then
            break
        fi
        if ! kill -0 "$bgpid" 2>/dev/null; then
            _mariadb_log "mariadbd for $name exited during start-up; last lines of $d/error.log:"
            tail -n 20 "$d/error.log" >&2
            return 1
        fi
        sleep 0.1
    done
    if ! mariadb-admin --no-defaults -uroot -h127.0.0.1 -P"$port" --connect-timeout=1 ping >/dev/null 2>&1; then
        _mariadb_log "mariadbd for $name did not answer ping within 30 s; see $d/error.log"
        tail -n 20 "$d/error.log" >&2
        mariadb_stop "$name"
        return 1
    fi
    echo "$port" >"$d/port"
    export MARIADB_PORT="$port"
    export MARIADB_DATADIR="$d/data"
    export MARIADB_SOCKET="$d/sock"
    echo "MARIADB_PORT=$MARIADB_PORT"
    echo "MARIADB_DATADIR=$MARIADB_DATADIR"
    echo "MARIADB_SOCKET=$MARIADB_SOCKET"
}

mariadb_port() {
    local name="${1:?mariadb_port NAME}"
    cat "$(mariadb_datadir "$name")/port"
}

# mariadb_sql NAME "SQL" [extra client args]; SQL "-" reads statements from stdin.
mariadb_sql() {
    local name="${1:?mariadb_sql NAME SQL}" sql="${2:?mariadb_sql NAME SQL}"
    shift 2
    local port
    port="$(mariadb_port "$name")" || return 1
    if [ "$sql" = "-" ]; then
        mariadb --no-defaults -uroot -h127.0.0.1 -P"$port" --default-character-set=utf8mb4 "$@"
    else
        mariadb --no-defaults -uroot -h127.0.0.1 -P"$port" --default-character-set=utf8mb4 "$@" -e "$sql"
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    cmd="${1:-}"
    shift || true
    case "$cmd" in
        install) ensure_mariadb_installed ;;
        start) mariadb_start "$@" ;;
        stop) mariadb_stop "$@" ;;
        restart) mariadb_restart "$@" ;;
        sql) mariadb_sql "$@" ;;
        port) mariadb_port "$@" ;;
        *)
            echo "usage: $0 install | start NAME [mariadbd args...] | stop NAME | restart NAME [--kill] | sql NAME SQL | port NAME" >&2
            exit 2
            ;;
    esac
fi
