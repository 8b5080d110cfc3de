#!/usr/bin/env bash
# Throwaway Prometheus servers for tests: Debian's prometheus 2.42 (with promtool), scraping one
# target every second on loopback.
#
# Sourceable:   . integration/lib/prometheus.sh
#               ensure_prometheus_installed
#               prometheus_start NAME TARGET   # TARGET host:port serving /metrics; fresh data dir, free port;
#                                              # exports PROMETHEUS_URL, prints PROMETHEUS_URL=http://...
#               prometheus_stop NAME
#               pushgateway_start NAME         # a Prometheus Pushgateway (Debian's 1.5), free port;
#                                              # exports PUSHGATEWAY_URL, prints PUSHGATEWAY_URL=http://...
#               pushgateway_stop NAME
# Executable:   integration/lib/prometheus.sh install | start NAME TARGET | stop NAME
#                                             | pushgateway-start NAME | pushgateway-stop NAME
#
# Work files live in ${SLUICE_WORK:-<repo>/.work}/prometheus-NAME (prometheus.yml, data/, port, pid,
# prometheus.log). Only 127.0.0.1 is used. The first scrape comes about a second after start.

_PROMETHEUS_SH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_PROMETHEUS_SH_REPO="$(cd "$_PROMETHEUS_SH_DIR/../.." && pwd)"
. "$_PROMETHEUS_SH_DIR/proc.sh"

_prometheus_log() { echo "prometheus.sh: $*" >&2; }

prometheus_dir() {
    local name="${1:?prometheus_dir NAME}"
    echo "${SLUICE_WORK:-$_PROMETHEUS_SH_REPO/.work}/prometheus-$name"
}

# Installs prometheus (and promtool) from apt when missing. Idempotent.
ensure_prometheus_installed() {
    if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
        return 0
    fi
    # without the recommended node exporter: only the server and promtool are wanted
    proc_apt_install prometheus.sh --no-install-recommends prometheus || return 1
    command -v promtool >/dev/null 2>&1 || { _prometheus_log "promtool still missing after install"; return 1; }
}

prometheus_stop() {
    local name="${1:?prometheus_stop NAME}"
    local d
    d="$(prometheus_dir "$name")"
    proc_stop "$d/pid" 10 "prometheus.sh: prometheus $name"
    rm -f "$d/pid" "$d/port"
}

prometheus_start() {
    local name="${1:?prometheus_start NAME TARGET}" target="${2:?prometheus_start NAME TARGET}"
    local d port pid
    ensure_prometheus_installed || return 1
    d="$(prometheus_dir "$name")"
    prometheus_stop "$name"
    rm -rf "$d"
    mkdir -p "$d/data"
    cat >"$d/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: ["$target"]
YML
    port="$(proc_free_port)"
    # setsid: the server must not get the terminal's SIGINT meant for the calling script.
    setsid prometheus --config.file="$d/prometheus.yml" --storage.tsdb.path="$d/data" \
        --web.listen-address="127.0.0.1:$port" >"$d/prometheus.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$d/pid"
    _prometheus_ready "prometheus $name" "$pid" "$port" "$d" prometheus.log PROMETHEUS_URL || { prometheus_stop "$name"; return 1; }
}

# Waits up to 10 s for /-/ready of a server just started (WHAT PID PORT DIR LOG VAR); then writes
# DIR/port, exports VAR=http://127.0.0.1:PORT and prints it.
_prometheus_ready() {
    local what="$1" pid="$2" port="$3" d="$4" log="$5" var="$6" i
    for i in $(seq 1 100); do
        if curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then
            echo "$port" >"$d/port"
            export "$var=http://127.0.0.1:$port"
            echo "$var=http://127.0.0.1:$port"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            _prometheus_log "$what exited during start-up; last lines of $d/$log:"
            tail -n 20 "$d/$log" >&2
            return 1
        fi
        sleep 0.1
    done
    _prometheus_log "$what was not ready within 10 s; see $d/$log"
    return 1
}

# The Pushgateway (what `sluice verify --pushgateway` pushes to), from apt when missing.
pushgateway_stop() {
    local name="${1:?pushgateway_stop NAME}"
    local d
    d="$(prometheus_dir "$name")-pushgateway"
    proc_stop "$d/pid" 10 "prometheus.sh: pushgateway $name"
    rm -f "$d/pid" "$d/port"
}

pushgateway_start() {
    local name="${1:?pushgateway_start NAME}"
    local d port pid bin
    bin="$(command -v prometheus-pushgateway || true)"
    if [ -z "$bin" ]; then
        proc_apt_install prometheus.sh --no-install-recommends prometheus-pushgateway || return 1
        bin="$(command -v prometheus-pushgateway)" || { _prometheus_log "prometheus-pushgateway missing after install"; return 1; }
    fi
    d="$(prometheus_dir "$name")-pushgateway"
    pushgateway_stop "$name"
    rm -rf "$d"
    mkdir -p "$d"
    port="$(proc_free_port)"
    setsid "$bin" --web.listen-address="127.0.0.1:$port" >"$d/pushgateway.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$d/pid"
    _prometheus_ready "pushgateway $name" "$pid" "$port" "$d" pushgateway.log PUSHGATEWAY_URL || { pushgateway_stop "$name"; return 1; }
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    cmd="${1:-}"
    shift || true
    case "$cmd" in
        install) ensure_prometheus_installed ;;
        start) prometheus_start "$@" ;;
        stop) prometheus_stop "$@" ;;
        pushgateway-start) pushgateway_start "$@" ;;
        pushgateway-stop) pushgateway_stop "$@" ;;
        *)
            echo "usage: $0 install | start NAME TARGET | stop NAME | pushgateway-start NAME | pushgateway-stop NAME" >&2
            exit 2
            ;;
    esac
fi
