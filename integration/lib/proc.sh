# Process helpers the integration libraries (mariadb.sh, broker.sh, registry.sh) share:
# a free loopback port, pid files, and stopping a server politely, then firmly.
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
