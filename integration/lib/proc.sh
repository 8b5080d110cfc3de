# Process helpers the integration libraries (mariadb.sh, broker.sh, registry.sh, prometheus.sh)
# share: a free loopback port, pid files, stopping a server politely, then firmly, and installing
# Debian packages.
# Sourced, never run.

# Prints a TCP port on 127.0.0.1 that is free right now.
proc_free_port() {
    python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# True when the pid in FILE names a live process.
proc_pid_alive() {
    local pidfile="$1" pid
    [ -s "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# proc_stop PIDFILE SECONDS LABEL: SIGTERM the process in PIDFILE, wait up to SECONDS for it
# to exit, then SIGKILL it and wait until it is gone (so its port is free afterwards).
proc_stop() {
    local pidfile="$1" secs="$2" label="$3" pid i
    proc_pid_alive "$pidfile" || return 0
    pid="$(cat "$pidfile")"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 $((secs * 10))); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "$label (pid $pid) ignored SIGTERM for $secs s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
}

# proc_apt_install LABEL [--no-install-recommends] PACKAGE...: apt-get update and install (sudo
# when not root), quietly; LABEL prefixes the messages.
proc_apt_install() {
    local label="$1" sudo=""
    shift
    echo "$label: installing $* with apt-get" >&2
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq >/dev/null \
        || { echo "$label: apt-get update failed" >&2; return 1; }
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null \
        || { echo "$label: apt-get install $* failed" >&2; return 1; }
}
