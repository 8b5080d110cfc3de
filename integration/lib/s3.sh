#!/usr/bin/env bash
# A throwaway S3-compatible object store for tests: PyPI's moto[server] (no MinIO or cloud store
# installs here; ../shared/docs/ENVIRONMENT.md). In memory, on loopback, path-style URLs, any access
# key and secret, region us-east-1. It checks no signature's credentials and keeps nothing across a
# restart: it proves the protocol (puts, multipart uploads, ranged gets, listings), not durability.
#
# Sourceable:   . integration/lib/s3.sh
#               s3_start NAME [BUCKET]   # fresh, with BUCKET (default sluice) made; exports S3_ENDPOINT,
#                                        # prints S3_ENDPOINT=http://127.0.0.1:PORT
#               s3_stop NAME
# Executable:   integration/lib/s3.sh install | start NAME [BUCKET] | stop NAME
#
# moto lives in a venv under ${SLUICE_WORK:-<repo>/.work}/tools/s3-venv; work files in
# ${SLUICE_WORK:-<repo>/.work}/s3-NAME (pid, port, log).

_S3_SH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_S3_SH_REPO="$(cd "$_S3_SH_DIR/../.." && pwd)"
. "$_S3_SH_DIR/proc.sh"
MOTO_VERSION="5.2.5"

_s3_log() { echo "s3.sh: $*" >&2; }

s3_venv() { echo "${SLUICE_WORK:-$_S3_SH_REPO/.work}/tools/s3-venv"; }
s3_dir() { echo "${SLUICE_WORK:-$_S3_SH_REPO/.work}/s3-${1:?s3_dir NAME}"; }

# Installs moto[server] into the venv when missing. Idempotent.
ensure_s3_installed() {
    local v
    v="$(s3_venv)"
    [ -x "$v/bin/moto_server" ] && return 0
    _s3_log "installing moto[server] $MOTO_VERSION into $v"
    mkdir -p "$(dirname "$v")"
    python3 -m venv "$v" || { _s3_log "python3 -m venv failed (Debian: apt-get install python3-venv)"; return 1; }
    "$v/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" \
        || { _s3_log "pip install failed"; return 1; }
    [ -x "$v/bin/moto_server" ] || { _s3_log "moto_server is missing after pip install"; return 1; }
}

s3_stop() {
    local d
    d="$(s3_dir "${1:?s3_stop NAME}")"
    proc_stop "$d/pid" 10 "s3.sh: store ${1}"
    rm -f "$d/pid"
}

s3_start() {
    local name="${1:?s3_start NAME [BUCKET]}" bucket="${2:-sluice}"
    local d port pid i
    ensure_s3_installed || return 1
    d="$(s3_dir "$name")"
    s3_stop "$name"
    rm -rf "$d"
    mkdir -p "$d"
    port="$(proc_free_port)"
    setsid "$(s3_venv)/bin/moto_server" -H 127.0.0.1 -p "$port" >>"$d/log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$d/pid"
    echo "$port" >"$d/port"
    for i in $(seq 1 150); do
        # a bucket made with a path-style PUT also proves the server answers
        if python3 - "$port" "$bucket" <<'PY' 2>/dev/null; then
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/{sys.argv[2]}", method="PUT")
urllib.request.urlopen(req, timeout=1).read()
PY
            export S3_ENDPOINT="http://127.0.0.1:$port"
            echo "S3_ENDPOINT=$S3_ENDPOINT"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            _s3_log "moto_server $name exited during start-up"
            tail -n 20 "$d/log" >&2
            return 1
        fi
        sleep 0.1
    done
    _s3_log "moto_server $name did not answer on port $port within 15 s"
    tail -n 20 "$d/log" >&2
    s3_stop "$name"
    return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    cmd="${1:-}"
    shift || true
    case "$cmd" in
        install) ensure_s3_installed ;;
        start) s3_start "$@" ;;
        stop) s3_stop "$@" ;;
        *) echo "usage: $0 install | start NAME [BUCKET] | stop NAME" >&2; exit 2 ;;
    esac
fi
