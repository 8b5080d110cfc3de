#!/usr/bin/env bash
# Commit latency (issue 24): the time from reading a transaction's commit event to the acknowledgement
# of the Kafka commit that holds it (`sluice_commit_latency_seconds`), and from the server's commit
# timestamp (`sluice_commit_latency_server_seconds`, whole seconds), under a steady load of RATE row
# changes/s (bench/steady_writer.py: a multi-row INSERT every 10 ms), with the default settings and with
# the low-latency setting (kafka.batch_max_delay = "10ms"). p50 and p99 are
# read from the histogram's buckets over the measured window (after a warm-up), interpolated within a
# bucket as Prometheus's histogram_quantile does.
#
# Usage: bench/latency_bench.sh [SECONDS] [RATE...]     (default: 60 s at 5000 and 20000 row changes/s)
# Env: SLUICE_WORK (default <repo>/.work), CARGO_TARGET_DIR, BENCH_NO_BUILD=1 (use the release binaries
# already built).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"

secs="${1:-60}"
shift || true
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(5000 20000)
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
out="$SLUICE_WORK/latency_bench"
mkdir -p "$out"
echo "$secs" >"$out/secs"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
    echo "latency_bench: building (release)" >&2
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice && cargo build --release -q -p sluice-test-registry)
fi
target="${CARGO_TARGET_DIR:-$repo/target}/release"
export SLUICE_REGISTRY_BIN="$target/sluice-test-registry"

mariadb_start latbench >/dev/null
broker_start latbench >/dev/null
registry_start latbench >/dev/null
sluice_pid=""
trap '[ -n "$sluice_pid" ] && kill -9 "$sluice_pid" 2>/dev/null; mariadb_stop latbench; broker_stop latbench; registry_stop latbench' EXIT
port="$(mariadb_port latbench)"
mariadb -h 127.0.0.1 -P "$port" -u root -e \
    "CREATE DATABASE lat; CREATE TABLE lat.t (id BIGINT PRIMARY KEY, note VARCHAR(64), k INT, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6))"

# the histogram's buckets now: le -> cumulative count
scrape() {
    curl -s "http://127.0.0.1:$1/metrics" | grep "^$2_bucket" \
        | sed -E 's/.*le="([^"]+)".* ([0-9.e+]+)$/\1 \2/'
}

echo "| setting | rows/s asked | rows/s written | transactions measured | p50 | p99 | p50 / p99 from the server's commit time (whole seconds) | Kafka commits/s | Kafka commit p50 / p99 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
run=0
for setting in default low-latency; do
    for rate in "${rates[@]}"; do
        # a server id of its own per run: the server drops the last run's dump thread only later
        run=$((run + 1))
        metrics_port="$(proc_free_port)"
        mariadb -h 127.0.0.1 -P "$port" -u root -e "TRUNCATE lat.t"
        extra=""
        if [ "$setting" = low-latency ]; then
            extra='batch_max_delay = "10ms"'
        fi
        cat >"$out/sluice.toml" <<TOML
[source]
name = "lat-$setting-$rate"
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
start = "current"
server_id = $((51100 + run))
[snapshot]
mode = "never"
[registry]
url = "$REGISTRY_URL"
[filter]
include = ["lat.*"]
[metrics]
listen = "127.0.0.1:$metrics_port"
[kafka]
brokers = "$BROKER"
topic_prefix = "lat$rate$setting"
$extra
TOML
        SLUICE_LOG=warn "$target/sluice" run --config "$out/sluice.toml" 2>"$out/sluice-$setting-$rate.log" &
        sluice_pid=$!
        for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$metrics_port/readyz" >/dev/null && break; sleep 0.2; done
        python3 "$here/steady_writer.py" "$port" "$rate" "$((secs + 10))" >"$out/writer" &
        writer=$!
        sleep 10 # warm-up: topics made, schemas registered
        scrape "$metrics_port" sluice_commit_latency_seconds >"$out/a"
        scrape "$metrics_port" sluice_commit_latency_server_seconds >"$out/sa"
        scrape "$metrics_port" sluice_kafka_commit_seconds >"$out/ka"
        sleep "$secs"
        scrape "$metrics_port" sluice_kafka_commit_seconds >"$out/kb"
        scrape "$metrics_port" sluice_commit_latency_seconds >"$out/b"
        scrape "$metrics_port" sluice_commit_latency_server_seconds >"$out/sb"
        wait "$writer"
        read -r written took <"$out/writer"
        kill -TERM "$sluice_pid"; wait "$sluice_pid" || true
        sluice_pid=""
        python3 - "$out" "$setting" "$rate" "$written" "$took" <<'PY'
import sys
out, setting, rate, written, took = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def read(name):
    d = {}
    for line in open(f"{out}/{name}"):
        le, n = line.split()
        d[float("inf") if le == "+Inf" else float(le)] = float(n)
    return d
def quantile(q, a, b):
    les = sorted(b)
    counts = [b[le] - a.get(le, 0) for le in les]
    total = counts[-1]
    if total == 0:
        return float("nan"), 0
    rank = q * total
    prev_le, prev_n = 0.0, 0.0
    for le, n in zip(les, counts):
        if n >= rank:
            if le == float("inf"):
                return prev_le, total
            return prev_le + (le - prev_le) * (rank - prev_n) / max(n - prev_n, 1e-9), total
        prev_le, prev_n = le, n
    return prev_le, total
a, b, sa, sb, ka, kb = read("a"), read("b"), read("sa"), read("sb"), read("ka"), read("kb")
p50, n = quantile(0.5, a, b)
p99, _ = quantile(0.99, a, b)
s50, _ = quantile(0.5, sa, sb)
s99, _ = quantile(0.99, sa, sb)
k50, commits = quantile(0.5, ka, kb)
k99, _ = quantile(0.99, ka, kb)
secs = float(open(f"{out}/secs").read())
ms = lambda s: f"{s * 1000:.0f} ms"
print(f"| {setting} | {rate:,} | {written / took:,.0f} | {n:,.0f} | {ms(p50)} | {ms(p99)} | {ms(s50)} / {ms(s99)} | {commits / secs:.1f} | {ms(k50)} / {ms(k99)} |")
PY
    done
done
