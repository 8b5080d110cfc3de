#!/usr/bin/env bash
# Elasticsearch-API engines for tests: no Elasticsearch or OpenSearch installs here
# (../shared/docs/ENVIRONMENT.md). Two that answer the REST API with its semantics, from PyPI:
#   noida   noida-db 0.2.3 (--only elasticsearch): ES 8 answers, keeps its data across restarts, has
#           `flattened`; no delete tombstones (an older version indexed after a delete re-creates the
#           document), and `_source` numbers go through f64 (send big integers as strings).
#   osmem   osmem-server 0.1.6: OpenSearch 3.8 answers, in memory, ES's tombstones and external-version
#           rules (a version older than a delete is refused within index.gc_deletes); no `flattened`.
# Neither has TLS or authentication (headers are accepted and ignored). bench/README.md and the
# README's "Elasticsearch sink" say which features they do not emulate.
#
# Sourceable:   . integration/lib/elastic.sh
#               elastic_start NAME [noida|osmem]   # fresh; exports ES_URL, prints ES_URL=http://127.0.0.1:PORT
#               elastic_stop NAME
# Executable:   integration/lib/elastic.sh install | start NAME [ENGINE] | stop NAME | url NAME
#
# Both live in a venv under ${SLUICE_WORK:-<repo>/.work}/tools/es-venv; work files in
# ${SLUICE_WORK:-<repo>/.work}/elastic-NAME (pid, port, engine, data/, log). Only 127.0.0.1 is used.

_ELASTIC_SH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_ELASTIC_SH_REPO="$(cd "$_ELASTIC_SH_DIR/../.." && pwd)"
. "$_ELASTIC_SH_DIR/proc.sh"
NOIDA_DB_PY_VERSION="0.2.3"
OSMEM_VERSION="0.1.6"

_elastic_log() { echo "elastic.sh: $*" >&2; }

elastic_venv() {
    echo "${SLUICE_WORK:-$_ELASTIC_SH_REPO/.work}/tools/es-venv"
}

elastic_dir() {
    echo "${SLUICE_WORK:-$_ELASTIC_SH_REPO/.work}/elastic-${1:?elastic_dir NAME}"
}

# The engines' server binaries, straight from the wheels (the wheels' wrappers would stand between
# the server and its signals).
_elastic_bin() {
    local v site
    v="$(elastic_venv)"
    site="$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)" || return 1
    case "$1" in
        noida) echo "$site/noida_db/noida-db" ;;
        osmem) echo "$site/osmem_server/bin/osmem-server" ;;
        *) _elastic_log "unknown engine $1 (noida or osmem)"; return 1 ;;
    esac
}

# Installs both engines into the venv when missing (about 25 MB from PyPI). Idempotent.
ensure_elastic_installed() {
    local v
    v="$(elastic_venv)"
    if [ -x "$(_elastic_bin noida 2>/dev/null)" ] && [ -x "$(_elastic_bin osmem 2>/dev/null)" ]; then
        return 0
    fi
    _elastic_log "installing noida-db $NOIDA_DB_PY_VERSION and osmem-server $OSMEM_VERSION into $v"
    mkdir -p "$(dirname "$v")"
    python3 -m venv "$v" || { _elastic_log "python3 -m venv failed (Debian: apt-get install python3-venv)"; return 1; }
    "$v/bin/pip" install --quiet --disable-pip-version-check "noida-db==$NOIDA_DB_PY_VERSION" \
        "osmem-server==$OSMEM_VERSION" || { _elastic_log "pip install failed"; return 1; }
    [ -x "$(_elastic_bin noida)" ] && [ -x "$(_elastic_bin osmem)" ] \
        || { _elastic_log "the engines' binaries are missing after pip install"; return 1; }
}

elastic_stop() {
    local name="${1:?elastic_stop NAME}"
    local d
    d="$(elastic_dir "$name")"
    proc_stop "$d/pid" 10 "elastic.sh: engine $name"
    rm -f "$d/pid"
}

# elastic_start NAME [ENGINE]: a fresh engine (empty data) on a free loopback port; waits until GET /
# answers 200 (10 s max).
elastic_start() {
    local name="${1:?elastic_start NAME [noida|osmem]}" engine="${2:-noida}"
    local d bin port pid i
    ensure_elastic_installed || return 1
    bin="$(_elastic_bin "$engine")" || return 1
    d="$(elastic_dir "$name")"
    elastic_stop "$name"
    rm -rf "$d"
    mkdir -p "$d/data"
    port="$(proc_free_port)"
    case "$engine" in
        noida) setsid "$bin" start --only elasticsearch --elasticsearch-port "$port" --data-dir "$d/data" \
                   >>"$d/log" 2>&1 </dev/null & ;;
        # -no-ja: without Japanese analysis (180 MB at the first text field); -no-stdin-watch: keep
        # running when stdin closes
        osmem) setsid "$bin" -addr "127.0.0.1:$port" -no-stdin-watch -no-ja >>"$d/log" 2>&1 </dev/null & ;;
    esac
    pid=$!
    echo "$pid" >"$d/pid"
    echo "$port" >"$d/port"
    echo "$engine" >"$d/engine"
    for i in $(seq 1 100); do
        if python3 - "$port" <<'PY' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1).read()
PY
            export ES_URL="http://127.0.0.1:$port"
            echo "ES_URL=$ES_URL"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            _elastic_log "engine $name ($engine) exited during start-up"
            tail -n 20 "$d/log" >&2
            return 1
        fi
        sleep 0.1
    done
    _elastic_log "engine $name ($engine) did not answer on port $port within 10 s"
    tail -n 20 "$d/log" >&2
    elastic_stop "$name"
    return 1
}

elastic_url() {
    echo "http://127.0.0.1:$(cat "$(elastic_dir "${1:?elastic_url NAME}")/port")"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    cmd="${1:-}"
    shift || true
    case "$cmd" in
        install) ensure_elastic_installed ;;
        start) elastic_start "$@" ;;
        stop) elastic_stop "$@" ;;
        url) elastic_url "$@" ;;
        *) echo "usage: $0 install | start NAME [noida|osmem] | stop NAME | url NAME" >&2; exit 2 ;;
    esac
fi
