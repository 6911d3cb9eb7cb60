#!/usr/bin/env bash
# bench/report/run.sh [BUILD_DIR]: the size of `cordon report`'s page, the time to build it and,
# when chromium is installed, the time the page takes to open (open_time.py, OPEN_RUNS runs), for
# a session of EVENTS (10000) events. The session is a real `cordon run` of `true` whose
# events.jsonl is then replaced by an agent-like mix (make_session.py). Prints numbers; asserts
# nothing. Targets: under 2 MiB, built in under 1 s, open in under 1 s.
set -euo pipefail
BUILD=${1:-${CORDON_BUILD_DIR:-build}}
CORDON=$(realpath "$BUILD/launcher/cordon")
[[ -x $CORDON ]] || { echo "missing $CORDON: build target cordon" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /dev/shm/cordon-bench-report.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"  # as root the sandbox runs as the workspace's owner or nobody
export CORDON_STATE_DIR=$WORK/state
mkdir -p "$WORK/ws"
"$CORDON" run -q --mode ro -w "$WORK/ws" -- true
ID=$("$CORDON" ls --ids | tail -1)
python3 "$HERE/make_session.py" "$CORDON_STATE_DIR/sessions/$ID" "${EVENTS:-10000}"
"$CORDON" report "$ID" -o "$WORK/report.html" 2>/dev/null
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) on $(nproc) cores"
echo "page: $(stat -c %s "$WORK/report.html") bytes ($(( $(stat -c %s "$WORK/report.html") / 1024 )) KiB)"
if command -v hyperfine >/dev/null; then
  hyperfine -N -w 1 -r "${RUNS:-10}" "$CORDON report $ID -o -" --output=null
else
  for _ in 1 2 3 4 5; do /usr/bin/time -f "%e s, %M KiB max RSS" "$CORDON" report "$ID" -o - >/dev/null; done
fi
if command -v chromium >/dev/null; then
  python3 "$HERE/open_time.py" "$WORK/report.html" --runs "${OPEN_RUNS:-5}"
else
  echo "open time: not measured (no chromium)"
fi
