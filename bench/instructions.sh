#!/usr/bin/env bash
# Instructions per row change of Sluice's record path (`make bench-instructions`): the record_path
# example's stages, each run once under valgrind's callgrind, which counts the instructions the
# process executes. Unlike seconds on this shared 2-core VM (one build's CPU moves 10-40% between
# rounds), the count is the same from run to run, so a change of a few percent shows: compare the
# figures of two builds. It counts instructions, not time (a cache miss costs one instruction),
# and includes reading the file and checking its CRC32s (the `decode` stage is that part).
#
# Usage: bench/instructions.sh [FILE]   (default: the first file of the benchmark binlog, made by
#        `make bench-data`); env STAGES (default "decode records values"), RECORD_PATH (a
#        record_path binary to measure instead of this checkout's release build), CG_TOP (how many
#        of the costliest functions to list per stage, default 0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
file="${1:-$(ls "${SLUICE_WORK:-$repo/.work}"/bench/full/mysql-bin.* 2>/dev/null | head -n 1)}"
[ -f "$file" ] || { echo "instructions: no binlog file (run make bench-data, or give one)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions: valgrind is missing (apt-get install valgrind)" >&2; exit 2; }
bin="${RECORD_PATH:-}"
if [ -z "$bin" ]; then
    (cd "$repo" && cargo build --release -q -p sluice --example record_path)
    bin="${CARGO_TARGET_DIR:-$repo/target}/release/examples/record_path"
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# the row changes in the file, as record_path counts them (its table, one run of each stage)
changes="$("$bin" --runs 1 "$file" | sed -nE 's/.*: ([0-9]+) row changes.*/\1/p')"
echo "$file: $changes row changes; instructions counted by callgrind, one run per stage"
echo "| stage | instructions | per row change |"
echo "|---|---:|---:|"
for stage in ${STAGES:-decode records values}; do
    valgrind --tool=callgrind --callgrind-out-file="$out/$stage.cg" "$bin" --runs 1 --only "$stage" "$file" \
        >/dev/null 2>"$out/$stage.err" || { cat "$out/$stage.err" >&2; exit 1; }
    total="$(sed -nE 's/^summary: ([0-9]+)/\1/p' "$out/$stage.cg")"
    python3 -c 'import sys; t, n = int(sys.argv[2]), int(sys.argv[3]); print(f"| {sys.argv[1]} | {t:,} | {t / n:,.0f} |")' \
        "$stage" "$total" "$changes"
done
# the costliest functions of each stage (inlined code counted in the function it was inlined into)
if [ "${CG_TOP:-0}" -gt 0 ]; then
    for stage in ${STAGES:-decode records values}; do
        printf '\n%s: the %s costliest functions (instructions, share, source:function)\n' "$stage" "$CG_TOP"
        callgrind_annotate "$out/$stage.cg" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | sed -n "2,$((CG_TOP + 1))p"
    done
fi
