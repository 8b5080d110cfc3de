#!/usr/bin/env bash
# Throwaway Prometheus servers for tests: Debian's prometheus 2.42 (with promtool), scraping one
# target every second on loopback.
#
# Sourceable:   . integration/lib/prometheus.sh
#               ensure_prometheus_installed
#               prometheus_start NAME TARGET   # TARGET host:port serving /metrics; fresh data dir, free port;
#                                              # exports PROMETHEUS_URL, prints PROMETHEUS_URL=http://...
#               prometheus_stop NAME
# Executable:   integration/lib/prometheus.sh install | start NAME TARGET | stop NAME
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
    local d port pid i
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
    for i in $(seq 1 100); do
        if curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then
            echo "$port" >"$d/port"
            export PROMETHEUS_URL="http://127.0.0.1:$port"
            echo "PROMETHEUS_URL=$PROMETHEUS_URL"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            _prometheus_log "prometheus $name exited during start-up; last lines of $d/prometheus.log:"
            tail -n 20 "$d/prometheus.log" >&2
            return 1
        fi
        sleep 0.1
    done
    _prometheus_log "prometheus $name was not ready within 10 s; see $d/prometheus.log"
    prometheus_stop "$name"
    return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    cmd="${1:-}"
    shift || true
    case "$cmd" in
        install) ensure_prometheus_installed ;;
        start) prometheus_start "$@" ;;
        stop) prometheus_stop "$@" ;;
        *)
            echo "usage: $0 install | start NAME TARGET | stop NAME" >&2
            exit 2
            ;;
    esac
fi
