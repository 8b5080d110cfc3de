#!/usr/bin/env bash
# Seeds fuzz/corpus/<target> with the repository's real binlogs (corpus dirs are git-ignored).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="$here/../crates/binlog/tests/data"
mkdir -p "$here/corpus/file" "$here/corpus/event"
find "$data" -type f ! -name '*.md' ! -name '*.txt' ! -name '*.sql' ! -name '*.json' -size -2M | while read -r f; do
    cp "$f" "$here/corpus/file/$(basename "$f")"
    # the event target wants events without the 4-byte magic, behind one flag byte
    { printf '\0'; tail -c +5 "$f"; } >"$here/corpus/event/$(basename "$f")"
done
echo "seeded $(ls "$here/corpus/file" | wc -l) files"
