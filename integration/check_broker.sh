#!/usr/bin/env bash
# Starts a throw-away broker and checks what the publisher relies on: explicit topic creation,
# produce/consume (kcat when installed, and librdkafka via confluent-kafka), transactions (commit, abort,
# an open transaction hidden from read_committed, fencing by a second producer with the same
# transactional.id), and data kept across a broker restart. About 30 s once noida-db is installed.
#
#   integration/check_broker.sh            # needs python3 -m pip install confluent-kafka
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib/broker.sh"

python3 -c 'import confluent_kafka' 2>/dev/null || {
    echo "check_broker.sh: python package confluent-kafka missing (pip install confluent-kafka)" >&2
    exit 1
}
name=check
trap 'broker_stop "$name"' EXIT
broker_start "$name" >/dev/null
echo "broker at $BROKER"
broker_create_topic "$name" it.plain 3
broker_create_topic "$name" it.tx 1

if command -v kcat >/dev/null 2>&1; then
    broker_create_topic "$name" it.kcat 1
    printf 'k1:hello\nk2:world\n' | kcat -P -b "$BROKER" -t it.kcat -K: -q
    got="$(kcat -C -b "$BROKER" -t it.kcat -K: -e -q -o beginning | tr '\n' ' ')"
    [ "$got" = "k1:hello k2:world " ] || { echo "check_broker.sh: kcat read back '$got'" >&2; exit 1; }
    echo "kcat: ok"
fi

python3 "$here/check_broker.py" "$BROKER" produce
python3 "$here/check_broker.py" "$BROKER" verify
# noida-db snapshots its data about 2 s after a change: wait, restart, read everything again
sleep "$BROKER_SNAPSHOT_DELAY"
broker_restart "$name" >/dev/null
echo "restarted at $BROKER"
python3 "$here/check_broker.py" "$BROKER" verify
echo "check_broker.sh: all checks passed"
