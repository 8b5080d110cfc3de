#!/usr/bin/env bash
# Runs the sluice binary the way the Helm chart (helm/sluice) runs the image, and says whether it
# works there: as uid/gid 10001 with no capabilities and no-new-privileges, on a read-only root
# filesystem with no writable /tmp, with the Dockerfile's ENV, USER and ENTRYPOINT. Nobody had
# ever run the image: no Docker daemon exists on the machines this repository is built on, and no
# base image can be pulled, so the image is built FROM scratch out of the binary, the shared
# libraries ldd names, the dynamic loader, /etc/passwd and /etc/group, and the host's CA bundle,
# with buildah, and run with podman on runc (../shared/docs/ENVIRONMENT.md, "Container images").
#
#   integration/container_check.sh [SLUICE_BIN]
#
# SLUICE_BIN: $1, else $SLUICE_BIN, else target/release/sluice when built, else target/debug/sluice.
# SLUICE_REGISTRY_BIN: the test Schema Registry (default: the release build when present, else debug).
# Work files (podman's configuration and storage, the image's root filesystem, logs) live in
# ${SLUICE_WORK:-<repo>/.work}/container; nothing outside it is configured or stored, and the
# image, the containers and the three services are removed or stopped on exit.
#
# Prints one "ok"/"FAIL" line per check on stdout (progress and timings on stderr) and exits 1
# when any check failed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
work="$SLUICE_WORK/container"
image="localhost/sluice-check:latest"
svc="container-check"   # the name of this script's MariaDB, broker and registry
ctr="sluice-check-run"  # the detached `sluice run` container

. "$here/lib/proc.sh"
. "$here/lib/mariadb.sh"
. "$here/lib/broker.sh"
. "$here/lib/registry.sh"

t_start=$SECONDS
say() { echo "container_check: $*" >&2; }
failures=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# Everything after this one cannot be checked: report it, and let the EXIT trap clean up.
fatal() { fail "$*"; echo "container_check: stopped early; work files in $work" >&2; exit 1; }

# --- the binaries --------------------------------------------------------------------------------
bin="${1:-${SLUICE_BIN:-}}"
if [ -z "$bin" ]; then
    bin="$repo/target/release/sluice"
    [ -x "$bin" ] || bin="$repo/target/debug/sluice"
fi
[ -x "$bin" ] || { echo "container_check: no sluice binary at $bin (build it, or pass its path)" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
# registry.sh would otherwise run a release cargo build when only the debug registry exists
if [ -z "${SLUICE_REGISTRY_BIN:-}" ]; then
    SLUICE_REGISTRY_BIN="${CARGO_TARGET_DIR:-$repo/target}/release/sluice-test-registry"
    [ -x "$SLUICE_REGISTRY_BIN" ] || SLUICE_REGISTRY_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/sluice-test-registry"
    export SLUICE_REGISTRY_BIN
fi

# --- tools (timed apart: a fresh CI machine pays this, a developer's machine once) -----------------
t0=$SECONDS
missing=()
for tool in buildah podman runc strace; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    # strace watches the file system calls of `sluice run` from the first instruction on
    proc_apt_install container_check "${missing[@]}"
fi
t_apt=$((SECONDS - t0))

# --- a private podman/buildah: its own configuration and storage, so no global state changes ----
rm -rf "$work/rootfs" "$work/config" "$work/secrets" "$work/out"
mkdir -p "$work"/{rootfs,config,secrets,out,tmp,net}
cat >"$work/containers.conf" <<CONF
[containers]
# podman's default ulimits cannot be set on this kind of host
default_ulimits = []
log_driver = "k8s-file"

[engine]
# crun refuses the hybrid cgroup v1/v2 layout of these hosts; runc with cgroupfs (no systemd) works
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$work/events.log"
tmp_dir = "$work/tmp"

[network]
network_config_dir = "$work/net"
CONF
cat >"$work/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$work/storage"
runroot = "$work/run"
CONF
# a local image only: no registry is ever asked, and no signature policy applies
cat >"$work/registries.conf" <<'CONF'
unqualified-search-registries = []
CONF
cat >"$work/policy.json" <<'JSON'
{"default": [{"type": "insecureAcceptAnything"}]}
JSON
export CONTAINERS_CONF="$work/containers.conf"
export CONTAINERS_STORAGE_CONF="$work/storage.conf"
export CONTAINERS_REGISTRIES_CONF="$work/registries.conf"
pm() { podman --runtime runc --root "$work/storage" --runroot "$work/run" "$@"; }

strace_pid=""
services_up=""
cleanup() {
    local rc=$?
    set +e
    if [ -n "$strace_pid" ]; then kill "$strace_pid" 2>/dev/null; wait "$strace_pid" 2>/dev/null; fi
    pm rm -f -t 5 "$ctr" >/dev/null 2>&1
    pm rmi -f "$image" >/dev/null 2>&1
    buildah --root "$work/storage" --runroot "$work/run" rm -a >/dev/null 2>&1
    if [ -n "$services_up" ]; then
        mariadb_stop "$svc" >/dev/null 2>&1
        broker_stop "$svc" >/dev/null 2>&1
        registry_stop "$svc" >/dev/null 2>&1
    fi
    # the root file system and the storage each hold a copy of the binary (hundreds of MB for a
    # debug build); the storage is removed only when nothing is still mounted from it
    rm -rf "$work/rootfs"
    if ! findmnt -rn -o TARGET | grep -q "^$work/"; then
        rm -rf "$work/storage" "$work/run" "$work/tmp"
    fi
    say "total $((SECONDS - t_start)) s (tools install ${t_apt:-0} s, image build ${t_build:-?} s, services start ${t_services:-?} s)"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the image ----------------------------------------------------------------------------------
t0=$SECONDS
say "building $image from scratch with $bin"
root="$work/rootfs"
install -D -m 0755 "$bin" "$root/usr/local/bin/sluice"
# what the loader needs: ldd's resolved paths, copied to the same paths (the loader searches
# /lib/x86_64-linux-gnu without an ld.so.cache), and the interpreter itself
ldd_out="$(ldd "$bin" 2>&1)" || true
echo "$ldd_out" >"$work/out/ldd.txt"
if grep -q "not found" <<<"$ldd_out"; then
    fatal "image: ldd finds every library of $bin ($(grep 'not found' <<<"$ldd_out" | tr -s ' \t' ' '))"
fi
libs=()
while read -r lib; do libs+=("$lib"); done < <(grep -oE '(=> )?/[^ ]+ \(0x' <<<"$ldd_out" | sed -E 's/^=> //; s/ \(0x$//')
for lib in "${libs[@]}"; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
mkdir -p "$root/etc/ssl/certs" "$root/tmp"
# the Debian runtime image's world-writable /tmp, which the read-only root makes useless anyway
chmod 1777 "$root/tmp"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf '%s\n' 'root:x:0:0:root:/root:/usr/sbin/nologin' 'sluice:x:10001:10001:sluice:/nonexistent:/usr/sbin/nologin' \
    >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'sluice:x:10001:' >"$root/etc/group"
# ENV, USER and ENTRYPOINT come from the repository's Dockerfile itself, so this image cannot
# drift from the one the chart pulls
runtime_lines="$(awk '/^FROM /{buf=""; next} /^(ENV|USER|ENTRYPOINT) /{buf = buf $0 "\n"} END{printf "%s", buf}' \
    "$repo/Dockerfile")"
[ "$(grep -c . <<<"$runtime_lines")" -ge 3 ] || fatal "image: the Dockerfile's final stage has ENV, USER and ENTRYPOINT"
{
    echo "FROM scratch"
    echo "COPY rootfs/ /"
    echo "$runtime_lines"
} >"$work/Containerfile"
pm rmi -f "$image" >/dev/null 2>&1 || true
if ! buildah --root "$work/storage" --runroot "$work/run" build --quiet --signature-policy "$work/policy.json" \
    --layers=false -f "$work/Containerfile" -t "$image" "$work" >"$work/out/build.log" 2>&1; then
    cat "$work/out/build.log" >&2
    fatal "image: buildah build"
fi
t_build=$((SECONDS - t0))
ok "image: built $image from scratch ($(du -sm "$root" | cut -f1) MB: sluice, ${#libs[@]} files from ldd, passwd/group, CA bundle) in ${t_build} s"

# The image's configuration is the Dockerfile's (what the Deployment runs relies on it).
want_env="$(sed -nE 's/^ENV ([A-Za-z_0-9]+)=(.*)$/\1=\2/p' <<<"$runtime_lines")"
want_user="$(sed -nE 's/^USER (.*)$/\1/p' <<<"$runtime_lines")"
want_ep="$(sed -nE 's/^ENTRYPOINT (.*)$/\1/p' <<<"$runtime_lines" | tr -d ' ')"
got_user="$(pm image inspect -f '{{.Config.User}}' "$image")"
got_ep="$(pm image inspect -f '{{json .Config.Entrypoint}}' "$image" | tr -d ' ')"
got_env="$(pm image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$image")"
if [ "$got_user" = "$want_user" ] && [ "$got_ep" = "$want_ep" ] && grep -qxF "$want_env" <<<"$got_env"; then
    ok "image: USER $got_user, ENTRYPOINT $got_ep, ENV $want_env (as in the Dockerfile)"
else
    fail "image: USER '$got_user' (want $want_user), ENTRYPOINT $got_ep (want $want_ep), ENV $(tr '\n' ' ' <<<"$got_env")(want $want_env)"
fi

# The pod's security context: runAsUser/runAsGroup 10001, readOnlyRootFilesystem (and no
# tmpfs on /tmp, /run, which podman would add by default), capabilities drop ALL,
# allowPrivilegeEscalation false.
secure=(--read-only --read-only-tmpfs=false --user 10001:10001 --cap-drop=all
        --security-opt=no-new-privileges --pull=never)

# --- a, b: commands without and with a server ---------------------------------------------------
want_version="$("$bin" --version)"
if out="$(pm run --rm "${secure[@]}" --network none "$image" --version 2>&1)" && [ "$out" = "$want_version" ]; then
    ok "sluice --version: exit 0, prints '$out'"
else
    fail "sluice --version: exit status or output ($out)"
fi
if pm run --rm "${secure[@]}" --network none "$image" --help >"$work/out/help.txt" 2>&1 \
    && grep -q '^Usage: sluice' "$work/out/help.txt"; then
    ok "sluice --help: exit 0, $(wc -l <"$work/out/help.txt") lines of usage"
else
    fail "sluice --help: exit status or output (see $work/out/help.txt)"
fi

t0=$SECONDS
say "starting MariaDB, broker and Schema Registry ($svc)"
services_up=1
mariadb_start "$svc" >"$work/out/services.txt" || fatal "services: MariaDB started"
broker_start "$svc" >>"$work/out/services.txt" || fatal "services: broker started"
registry_start "$svc" >>"$work/out/services.txt" || fatal "services: Schema Registry started"
t_services=$((SECONDS - t0))
port="$(mariadb_port "$svc")"
metrics_port="$(proc_free_port)"

# The replication user the README's "Privileges" asks for, with only those privileges (root would
# pass checks a real deployment fails, and draws a warning for having more than it needs), and its
# password in a file as the chart's Secret provides it: readable through the group only, as with
# the pod's fsGroup 10001.
db_password="container-check-$RANDOM$RANDOM"
mariadb_sql "$svc" - <<SQL || fatal "mariadb: database shop and user sluice created"
CREATE DATABASE shop;
CREATE USER 'sluice'@'127.0.0.1' IDENTIFIED BY '$db_password';
-- with the optional REPLICATION MASTER ADMIN, so that the server id check runs before streaming
GRANT REPLICATION SLAVE, BINLOG MONITOR, REPLICATION MASTER ADMIN ON *.* TO 'sluice'@'127.0.0.1';
GRANT SELECT ON shop.* TO 'sluice'@'127.0.0.1';
SQL
printf '%s\n' "$db_password" >"$work/secrets/mysql-password"
chown 0:10001 "$work/secrets/mysql-password"
chmod 0440 "$work/secrets/mysql-password"

# The chart mounts its ConfigMap read-only at /etc/sluice and passes run --config /etc/sluice/sluice.toml.
cat >"$work/config/sluice.toml" <<TOML
[source]
name = "container"
url = "mysql://sluice@127.0.0.1:$port"
tls = "disabled"
heartbeat = "1s"
start = "earliest"

[kafka]
brokers = "$BROKER"
topic_prefix = "container"
partitions = 2
batch_max_delay = "100ms"
batch_max_records = 50

[registry]
url = "$REGISTRY_URL"

[filter]
include = ["shop.*"]

[snapshot]
mode = "never"
TOML
chmod 0644 "$work/config/sluice.toml"
# the chart's environment (values.yaml: logFormat json, logLevel info, metrics on its own port,
# the password file from the Secret)
chart_env=(-e SLUICE_LOG_FORMAT=json -e SLUICE_LOG=info -e "SLUICE_METRICS__LISTEN=127.0.0.1:$metrics_port")
pod=(-v "$work/config:/etc/sluice:ro" -v "$work/secrets:/var/run/secrets/sluice:ro"
     -e SLUICE_SOURCE__PASSWORD_FILE=/var/run/secrets/sluice/mysql-password)

if pm run --rm "${secure[@]}" --network host "${pod[@]}" "$image" check --config /etc/sluice/sluice.toml \
    >"$work/out/check-before.txt" 2>&1; then
    if grep -q '^\[ok\] connect' "$work/out/check-before.txt" && grep -q '^\[ok\] registry' "$work/out/check-before.txt" \
        && grep -q '^\[ok\] checkpoint: none committed' "$work/out/check-before.txt"; then
        ok "sluice check (before run): exit 0; config, MariaDB, registry and Kafka reachable, no checkpoint yet"
    else
        fail "sluice check (before run): exit 0 but unexpected report: $(tr '\n' '|' <"$work/out/check-before.txt")"
    fi
else
    fail "sluice check (before run): exit status $?: $(tr '\n' '|' <"$work/out/check-before.txt")"
fi

# --- c: sluice run ------------------------------------------------------------------------------
mariadb_sql "$svc" - <<'SQL' || fatal "mariadb: table shop.items created, 3 rows inserted"
CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL, price DECIMAL(10,2));
BEGIN;
INSERT INTO shop.items VALUES (1, 'kettle', 25.00), (2, 'teapot', 18.50), (3, 'cup', 4.20);
COMMIT;
SQL
rows=5

# created, then initialised (runc create: the container's first process waits before exec), so
# strace is attached before sluice's first instruction and sees every file it touches
pm rm -f "$ctr" >/dev/null 2>&1 || true
pm create --name "$ctr" "${secure[@]}" --network host "${pod[@]}" "${chart_env[@]}" "$image" \
    run --config /etc/sluice/sluice.toml >/dev/null
pm init "$ctr" >/dev/null
init_pid="$(pm container inspect -f '{{.State.Pid}}' "$ctr")"
strace -f -qq -tt -o "$work/out/strace.txt" -e trace=%file -p "$init_pid" &
strace_pid=$!
for _ in $(seq 50); do
    [ "$(awk '/^TracerPid:/{print $2}' "/proc/$init_pid/status" 2>/dev/null)" = "$strace_pid" ] && break
    sleep 0.1
done
t_run=$SECONDS
pm start "$ctr" >/dev/null
say "sluice run started in $ctr (pid $init_pid on the host); streaming for about 15 s"

# the probes the Deployment uses, through the metrics listener
ready=""
for _ in $(seq 300); do
    if curl -fsS "http://127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1; then ready=1; break; fi
    [ "$(pm container inspect -f '{{.State.Running}}' "$ctr")" = true ] || break
    sleep 0.1
done
if [ -n "$ready" ] && curl -fsS "http://127.0.0.1:$metrics_port/healthz" >/dev/null 2>&1; then
    ok "sluice run: /healthz and /readyz answer 200 after $((SECONDS - t_run)) s"
else
    fail "sluice run: /readyz and /healthz (container running: $(pm container inspect -f '{{.State.Running}}' "$ctr"))"
fi

# While it streams: two more rows, one at a time.
mariadb_sql "$svc" "INSERT INTO shop.items VALUES (4, 'saucer', 3.10)" || true
mariadb_sql "$svc" "INSERT INTO shop.items VALUES (5, 'tray', 12.00)" || true

# Who it runs as, as the kernel sees it (a scratch image has no shell or ps to ask inside).
run_pid="$(pm container inspect -f '{{.State.Pid}}' "$ctr")"
status="$(cat "/proc/$run_pid/status" 2>/dev/null || true)"
uid_line="$(awk '/^Uid:/{print $2,$3,$4,$5}' <<<"$status")"
gid_line="$(awk '/^Gid:/{print $2,$3,$4,$5}' <<<"$status")"
groups_line="$(awk '/^Groups:/{$1=""; print}' <<<"$status" | xargs)"
capeff="$(awk '/^CapEff:/{print $2}' <<<"$status")"
nnp="$(awk '/^NoNewPrivs:/{print $2}' <<<"$status")"
top="$(pm top "$ctr" user group comm 2>/dev/null | tail -n +2 | xargs || true)"
if [ "$uid_line" = "10001 10001 10001 10001" ] && [ "$gid_line" = "10001 10001 10001 10001" ] \
    && [ "$capeff" = 0000000000000000 ] && [ "$nnp" = 1 ]; then
    ok "sluice run: runs as uid 10001 gid 10001 (groups '${groups_line}'), no capabilities, no_new_privs; podman top: $top"
else
    fail "sluice run: identity: Uid $uid_line, Gid $gid_line, CapEff $capeff, NoNewPrivs $nnp; podman top: $top"
fi
if tr '\0' '\n' <"/proc/$run_pid/environ" 2>/dev/null | grep -qxF "$want_env"; then
    ok "sluice run: its environment has $want_env (from the image)"
else
    fail "sluice run: $want_env is missing from its environment"
fi

# Until the five rows are published and committed, then the rest of the ~15 s.
metric_sum() {
    { curl -fsS "http://127.0.0.1:$metrics_port/metrics" 2>/dev/null || true; } \
        | awk -v name="$1" -v filt="$2" '$1 ~ "^"name"[{ ]" && index($1, filt) {s += $2} END {print s + 0}'
}
changes=0 commits=0
for _ in $(seq 120); do
    changes="$(metric_sum sluice_row_changes_total 'table="shop.items"')"
    commits="$(metric_sum sluice_kafka_commits_total '')"
    [ "${changes%.*}" -ge "$rows" ] && [ "${commits%.*}" -ge 1 ] && break
    [ "$(pm container inspect -f '{{.State.Running}}' "$ctr")" = true ] || break
    sleep 0.5
done
if [ "${changes%.*}" -ge "$rows" ] && [ "${commits%.*}" -ge 1 ]; then
    ok "sluice run: published $changes row changes of shop.items in $commits Kafka commit(s) (metrics) after $((SECONDS - t_run)) s"
else
    fail "sluice run: metrics show $changes of $rows row changes, $commits commits"
fi
while [ $((SECONDS - t_run)) -lt 15 ] && [ "$(pm container inspect -f '{{.State.Running}}' "$ctr")" = true ]; do sleep 1; done

# The Deployment stops it with SIGTERM (it is PID 1 in the container) and waits 30 s.
running="$(pm container inspect -f '{{.State.Running}}' "$ctr")"
t0=$SECONDS
pm stop -t 30 "$ctr" >/dev/null 2>&1 || true
exit_code="$(pm container inspect -f '{{.State.ExitCode}}' "$ctr")"
pm logs "$ctr" >"$work/out/run.log" 2>&1 || true
if [ "$running" = true ] && [ "$exit_code" = 0 ]; then
    ok "sluice run: still running after $((t0 - t_run)) s; SIGTERM ended it with exit 0 in $((SECONDS - t0)) s"
else
    fail "sluice run: running at 15 s: $running; exit status after SIGTERM $exit_code (log: $work/out/run.log)"
fi
if grep -qiE '"level":"(ERROR|WARN)"|panicked|read-only file system|os error 30' "$work/out/run.log"; then
    fail "sluice run: its log has warnings or errors: $(grep -iE '"level":"(ERROR|WARN)"|panicked|read-only file system|os error 30' "$work/out/run.log" | head -3 | cut -c1-300 | tr '\n' '|')"
else
    ok "sluice run: $(wc -l <"$work/out/run.log") log lines, no warning, error, panic or write failure"
fi

# Nothing written: every write to the root file system would fail with EROFS. strace shows each
# file system call from sluice's exec on (runc's own set-up before it is left out).
if [ -n "$strace_pid" ]; then wait "$strace_pid" 2>/dev/null || true; strace_pid=""; fi
awk 'f; /execve\("\/usr\/local\/bin\/sluice"/{f=1; print}' "$work/out/strace.txt" >"$work/out/strace-sluice.txt"
if ! [ -s "$work/out/strace-sluice.txt" ]; then
    fail "sluice run: strace saw the exec of /usr/local/bin/sluice (see $work/out/strace.txt)"
else
    erofs="$(grep -E 'EROFS' "$work/out/strace-sluice.txt" || true)"
    # opens for writing and calls that change the file system, on any mount, whether they
    # succeeded or not: an attempt that fails here fails in the pod too
    writes="$(grep -E 'O_WRONLY|O_RDWR|O_CREAT|O_TRUNC| (creat|mkdir|mkdirat|unlink|unlinkat|rename|renameat2?|link|linkat|symlink|symlinkat|truncate|chmod|fchmodat|chown|lchown|fchownat|mknod|mknodat|utimes|utimensat)\(' \
        "$work/out/strace-sluice.txt" || true)"
    absent="$(grep -oE '^[0-9]+ +[0-9:.]+ +(open|openat|stat|newfstatat|access|faccessat2?|statx|readlink|readlinkat)\([^"]*"[^"]+".* = -1 ENOENT' \
        "$work/out/strace-sluice.txt" | sed -E 's/^[^"]*"([^"]+)".*/\1/' | grep -v 'glibc-hwcaps\|/tls/\|/haswell/\|/x86_64/' | sort -u || true)"
    printf '%s\n' "$absent" >"$work/out/absent-files.txt"
    calls=$(grep -c . "$work/out/strace-sluice.txt")
    if [ -z "$erofs" ] && [ -z "$writes" ]; then
        ok "sluice run: wrote nothing ($calls file system calls traced: no write attempt, no EROFS; $(grep -c . <<<"$absent") absent files looked up, listed in $work/out/absent-files.txt)"
    else
        fail "sluice run: writes: $(printf '%s\n%s\n' "$erofs" "$writes" | grep . | cut -c1-200 | head -5 | tr '\n' '|')"
    fi
fi
# What the container's layer holds afterwards: only the mount points podman made for the
# ConfigMap and the Secret (as the kubelet does), nothing from sluice.
pm diff "$ctr" >"$work/out/diff.txt" 2>&1 || true
other="$(awk '{print $2}' "$work/out/diff.txt" | grep -vxE '/etc|/etc/sluice|/var|/var/run|/var/run/secrets|/var/run/secrets/sluice' || true)"
if [ -z "$other" ]; then
    ok "sluice run: the container's layer holds only the mount points ($(awk '{print $1, $2}' "$work/out/diff.txt" | xargs))"
else
    fail "sluice run: the container's layer changed: $(tr '\n' ' ' <<<"$other")"
fi

# The committed checkpoint, as `sluice check` (in the image again) reads it back from Kafka.
if pm run --rm "${secure[@]}" --network host "${pod[@]}" "$image" check --config /etc/sluice/sluice.toml \
    >"$work/out/check-after.txt" 2>&1 \
    && line="$(grep -E '^\[ok\] checkpoint: [^ ]+:[0-9]+ .*committed' "$work/out/check-after.txt")"; then
    ok "sluice check (after run): exit 0, ${line}"
else
    fail "sluice check (after run): no committed checkpoint: $(tr '\n' '|' <"$work/out/check-after.txt")"
fi

# An independent reader (librdkafka through confluent-kafka, read_committed): the records are there,
# each exactly once. Skipped where that Python module is not installed.
if python3 -c 'import confluent_kafka' 2>/dev/null; then
    if count="$(python3 - "$BROKER" container.shop.items <<'PY'
import sys
from confluent_kafka import Consumer, KafkaError, TopicPartition
broker, topic = sys.argv[1], sys.argv[2]
c = Consumer({"bootstrap.servers": broker, "group.id": "container-check", "enable.auto.commit": False,
              "isolation.level": "read_committed", "enable.partition.eof": True})
md = c.list_topics(topic, timeout=10).topics[topic]
parts = [TopicPartition(topic, p, 0) for p in md.partitions]
c.assign(parts)
eof, n = set(), 0
while len(eof) < len(parts):
    m = c.poll(10)
    if m is None:
        sys.exit("timed out")
    if m.error():
        if m.error().code() == KafkaError._PARTITION_EOF:
            eof.add(m.partition())
            continue
        sys.exit(str(m.error()))
    if not (m.value() and m.value()[0] == 0 and m.key() and m.key()[0] == 0):
        sys.exit(f"not Confluent-framed Avro at offset {m.offset()}")
    n += 1
c.close()
print(n)
PY
    )" && [ "$count" = "$rows" ]; then
        ok "kafka: container.shop.items holds $count committed Avro records (read_committed, independent consumer)"
    else
        fail "kafka: container.shop.items holds '$count' committed records, want $rows"
    fi
else
    echo "skip kafka: the independent read needs python3's confluent_kafka"
fi

say "work files: $work/out (strace.txt, run.log, check-*.txt)"
if [ "$failures" -gt 0 ]; then
    echo "container_check: $failures check(s) FAILED" >&2
    exit 1
fi
echo "container_check: all checks passed" >&2
