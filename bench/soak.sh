#!/usr/bin/env bash
# `make soak` (issue 13, the long form of the fault suite; run by hand, not in CI): a sustained
# write workload for SOAK_SECS (default 600) at the highest rate MariaDB accepts here, published by
# a release `sluice run`, with its RSS and lag sampled every second and plotted; then every row
# change counted (committed row changes = the changes the writers made), then each fuzz target for
# SOAK_FUZZ_SECS (default 60; 0 skips). Results: bench/soak/{samples.csv,soak.png,summary.md}.
#
# The writers: SOAK_WRITERS (default 4) `mariadb` clients fed by bench/soak_writer.py, each on ids
# of its own, every statement its own transaction (inserts, updates of a live row, deletes), so
# each statement changes exactly one row and the expected count is known exactly. Durability is
# off on this throwaway server (innodb_flush_log_at_trx_commit=0, sync_binlog=0) so that the
# server, not the disk, sets the pace.
#
# Env: SLUICE_WORK (default <repo>/.work), CARGO_TARGET_DIR, SOAK_SECS, SOAK_WRITERS,
# SOAK_FUZZ_SECS, BENCH_NO_BUILD=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$repo/integration/lib/mariadb.sh"
. "$repo/integration/lib/broker.sh"
. "$repo/integration/lib/registry.sh"

secs="${SOAK_SECS:-600}"
writers="${SOAK_WRITERS:-4}"
fuzz_secs="${SOAK_FUZZ_SECS:-60}"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
work="$SLUICE_WORK/soak"
out="$here/soak"
rm -rf "$work"
mkdir -p "$work" "$out"

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    echo "soak: building (release)" >&2
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice && cargo build --release -q -p sluice-test-registry)
fi
target="${CARGO_TARGET_DIR:-$repo/target}/release"
export SLUICE_REGISTRY_BIN="$target/sluice-test-registry"
python3 -c 'import confluent_kafka, matplotlib' 2>/dev/null || python3 -m pip install -q confluent-kafka matplotlib >&2

mariadb_start soak --innodb-buffer-pool-size=512M --innodb-flush-log-at-trx-commit=0 --sync-binlog=0 \
    --max-binlog-size=256M >/dev/null
broker_start soak >/dev/null
registry_start soak >/dev/null
sluice_pid=""
cleanup() {
    [ -n "$sluice_pid" ] && kill -9 "$sluice_pid" 2>/dev/null
    pkill -f "soak_writer.py $work" 2>/dev/null || true
    mariadb_stop soak; broker_stop soak; registry_stop soak
}
trap cleanup EXIT
port="$(mariadb_port soak)"
metrics_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"

mariadb_sql soak "CREATE DATABASE soak; CREATE TABLE soak.t (id BIGINT PRIMARY KEY, k INT NOT NULL,
    v VARCHAR(64) NOT NULL, amount DECIMAL(12,2), created DATETIME(6), note VARCHAR(200))"
cat >"$work/sluice.toml" <<TOML
[source]
name = "soak"
url = "mysql://root@127.0.0.1:$port"
tls = "disabled"
start = "current"
[kafka]
brokers = "$BROKER"
partitions = 3
[registry]
url = "$REGISTRY_URL"
[snapshot]
mode = "never"
[metrics]
listen = "127.0.0.1:$metrics_port"
[filter]
include = ["soak.*"]
TOML
SLUICE_LOG=info "$target/sluice" run --config "$work/sluice.toml" 2>"$work/sluice.log" &
sluice_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$metrics_port/readyz" >/dev/null && break; sleep 0.2; done

# one sample a second: seconds, RSS KiB, peak RSS KiB, lag seconds, lag bytes, committed row changes
metric() { awk -v m="$1" 'index($1, m "{") == 1 || $1 == m { s += $2 } END { printf "%.0f", s }' "$work/metrics.txt"; }
sample() {
    local t0="$1"
    echo "t,rss_kib,hwm_kib,lag_seconds,lag_bytes,row_changes" >"$out/samples.csv"
    while kill -0 "$sluice_pid" 2>/dev/null && [ ! -e "$work/stop-sampling" ]; do
        curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$work/metrics.txt" 2>/dev/null || true
        local rss hwm
        rss="$(awk '/VmRSS/ {print $2}' "/proc/$sluice_pid/status" 2>/dev/null || echo 0)"
        hwm="$(awk '/VmHWM/ {print $2}' "/proc/$sluice_pid/status" 2>/dev/null || echo 0)"
        echo "$(( $(date +%s) - t0 )),$rss,$hwm,$(metric sluice_lag_seconds),$(metric sluice_lag_bytes),$(metric sluice_row_changes_total)" \
            >>"$out/samples.csv"
        sleep 1
    done
}
t0="$(date +%s)"
sample "$t0" &
sampler=$!

echo "soak: $writers writers for $secs s" >&2
pids=()
for w in $(seq "$writers"); do
    (python3 "$here/soak_writer.py" "$work" "$w" "$secs" | mariadb_sql soak - >"$work/writer$w.out" 2>&1) &
    pids+=("$!")
done
# each writer and its client: done once the client has run every statement
for p in "${pids[@]}"; do
    wait "$p" || { echo "soak: a writer failed: $(cat "$work"/writer*.out)" >&2; exit 1; }
done
end="$(mariadb_sql soak "SHOW MASTER STATUS" -N | awk '{print $1" "$2}')"
echo "soak: writers done at $(( $(date +%s) - t0 )) s; waiting for the checkpoint at $end" >&2
python3 "$here/wait_checkpoint.py" "$BROKER" soak $end >/dev/null
caught_up="$(( $(date +%s) - t0 ))"
sleep 3
touch "$work/stop-sampling"
wait "$sampler" || true
curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$work/metrics.txt"
published="$(metric sluice_row_changes_total)"
restarts="$(metric sluice_restarts_total)"
expected="$(cat "$work"/expected.* | awk '{ s += $1 } END { print s }')"
kill -TERM "$sluice_pid"; wait "$sluice_pid" || true
sluice_pid=""

fuzz_lines=""
if [ "$fuzz_secs" -gt 0 ]; then
    command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz --locked >&2
    for t in $(ls "$repo/fuzz/fuzz_targets" | sed 's/\.rs$//'); do
        echo "soak: fuzzing $t for $fuzz_secs s" >&2
        if (cd "$repo/fuzz" && RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" -- -max_total_time="$fuzz_secs" \
                >"$work/fuzz-$t.log" 2>&1); then
            runs="$(grep -o 'Done [0-9]* runs' "$work/fuzz-$t.log" | tail -1 | awk '{print $2}')"
            fuzz_lines+="| $t | ${runs:-?} runs | no crash |"$'\n'
        else
            fuzz_lines+="| $t | see $work/fuzz-$t.log | **crash** (make it a regression test) |"$'\n'
        fi
    done
fi

python3 - "$out" "$secs" "$writers" "$expected" "$published" "$restarts" "$caught_up" "$fuzz_lines" <<'PY'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out, secs, writers, expected, published, restarts, caught_up, fuzz = sys.argv[1:9]
rows = list(csv.DictReader(open(f"{out}/samples.csv")))
t = [int(r["t"]) for r in rows]
rss = [int(r["rss_kib"]) / 1024 for r in rows]
lag_s = [float(r["lag_seconds"] or 0) for r in rows]
lag_b = [int(r["lag_bytes"] or 0) / 2**20 for r in rows]
changes = [int(r["row_changes"] or 0) for r in rows]
rate = [0] + [max(0, changes[i] - changes[i - 1]) for i in range(1, len(changes))]
fig, ax = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
ax[0].plot(t, rss); ax[0].set_ylabel("RSS (MiB)"); ax[0].axhline(64, color="r", ls="--", lw=0.8)
ax[1].plot(t, lag_s, label="seconds"); ax[1].set_ylabel("lag (s)")
ax1b = ax[1].twinx(); ax1b.plot(t, lag_b, color="tab:orange", label="binlog bytes"); ax1b.set_ylabel("lag (MiB of binlog)")
ax[2].plot(t, rate); ax[2].set_ylabel("row changes/s committed"); ax[2].set_xlabel("seconds")
fig.suptitle(f"sluice run soak: {writers} writers for {secs} s")
fig.tight_layout(); fig.savefig(f"{out}/soak.png", dpi=90)
peak = max(int(r["hwm_kib"]) for r in rows) / 1024
ok = "yes" if expected == published else "**NO**"
with open(f"{out}/summary.md", "w") as f:
    f.write(f"""# Soak ({secs} s, {writers} writers)

| figure | value |
|---|---|
| row changes written (each statement one row) | {int(expected):,} |
| row changes committed by Sluice (`sluice_row_changes_total`) | {int(published):,} |
| equal | {ok} |
| restarts | {restarts} |
| mean committed rate while writing | {int(published) / int(secs):,.0f} row changes/s |
| caught up (checkpoint at the binlog end) | {caught_up} s after the start |
| peak RSS (VmHWM) | {peak:.1f} MiB |
| max lag | {max(lag_s):.1f} s, {max(lag_b):.1f} MiB of binlog |

![soak](soak.png)
""")
    if fuzz:
        f.write("\n| fuzz target | runs | result |\n|---|---|---|\n" + fuzz)
print(open(f"{out}/summary.md").read())
PY
[ "$expected" = "$published" ]
