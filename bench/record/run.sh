#!/usr/bin/env bash
# bench/record/run.sh [BUILD_DIR]: the cost of the record's limits (token bucket per kind family,
# a look at the size of events.jsonl every few KiB for the cap) on the normal event path, in ns
# per event, with and without; then the hash chain's cost over a plain write(2), under flock(2) and
# through the record's head, with one writer and two taking turns (wall and CPU time).
# Medians of interleaved rounds; the scratch file is on a tmpfs.
set -euo pipefail
BUILD=${1:-${CORDON_BUILD_DIR:-build}}
BIN=$BUILD/bench/record/cordon-bench-record
[[ -x $BIN ]] || { echo "missing $BIN: build target cordon-bench-record" >&2; exit 1; }
WORK=$(mktemp -d /dev/shm/cordon-bench-record.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$BIN" "$WORK" "${EVENTS:-200000}" "${ROUNDS:-7}"
