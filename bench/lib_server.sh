# Sourced by the benchmarks that stream from the benchmark server (live_bench.sh, archive_bench.sh):
# `bench_server TOOL ROWS` makes sure the server's datadir holds the workload of
# bench/gen_bench_binlog.sh (generating it, kept under $SLUICE_WORK/mariadb-bench, when missing),
# builds sluice and the live_stream example (release), and sets name, data (the datadir), files,
# first (the workload's first binlog file) and target (the release directory).
# Needs here, repo and SLUICE_WORK set, and integration/lib/mariadb.sh sourced.
bench_server() {
    local tool="$1" rows="$2"
    name="bench"
    data="$(mariadb_datadir "$name")/data"
    files="$SLUICE_WORK/bench"
    if [ ! -s "$(mariadb_datadir "$name")/port" ] || [ ! -d "$files/full" ]; then
        echo "$tool: generating the workload (bench/gen_bench_binlog.sh, a few minutes)" >&2
        BENCH_KEEP_DATADIR=1 "$here/gen_bench_binlog.sh" "$files" "$rows" >&2
    fi
    first="$(ls "$files/full" | head -n 1)"
    [ -f "$data/$first" ] || {
        echo "$tool: $data/$first is missing; delete $(mariadb_datadir "$name") and rerun" >&2
        exit 1
    }
    echo "$tool: building (release)" >&2
    (cd "$repo" && cargo build --release -q -p sluice --bin sluice --example live_stream)
    target="${CARGO_TARGET_DIR:-$repo/target}/release"
}
