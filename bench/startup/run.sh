#!/usr/bin/env bash
# Start-up cost of a sandbox, all in one hyperfine run: plain /bin/true, `unshare -Urnm --pid
# --fork`, bubblewrap with every namespace, and `cordon run` (embedded default policy: all
# namespaces, composed root, limits, seccomp, preload shim, session record) with the workspace
# read-only, and in the default cow mode (which also starts and mounts cordon-fs, where /dev/fuse
# is usable), and `cordon exec` of /bin/true into a detached session (`cordon run --detach`, the
# same policy, started once before the runs and stopped after), from `cordon` and from the small
# `cordon-exec` binary. Prints medians and ratios.
# Usage: bench/startup/run.sh [BUILD_DIR]   (root or an ordinary user; not part of CI pass/fail)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=$(realpath "${1:-build}")
CORDON="$BUILD/launcher/cordon"
RUNS=${RUNS:-200}
for tool in hyperfine bwrap unshare python3; do
  command -v "$tool" >/dev/null || { echo "bench/startup: $tool missing (sudo .ci/setup)" >&2; exit 2; }
done
[ -x "$CORDON" ] || { echo "bench/startup: $CORDON not built (sudo .ci/setup)" >&2; exit 2; }

WS=$(mktemp -d /dev/shm/cordon-bench-ws.XXXXXX)
STATE=$(mktemp -d /dev/shm/cordon-bench-state.XXXXXX)
OUT=$(mktemp /tmp/cordon-bench.XXXXXX.json)
SESSION=
trap '[ -z "$SESSION" ] || "$CORDON" stop "$SESSION"; rm -rf "$WS" "$STATE" "$OUT"' EXIT
chmod 755 "$WS"
export CORDON_STATE_DIR=$STATE
SESSION=$("$CORDON" run --detach -q -w "$WS" --idle-timeout 0)

hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$OUT" \
  -n "true" "/bin/true" \
  -n "unshare" "unshare -Urnm --pid --fork /bin/true" \
  -n "bwrap" "bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true" \
  -n "cordon-ro" "$CORDON run -q --mode ro -w $WS -- /bin/true" \
  -n "cordon-cow" "$CORDON run -q -w $WS -- /bin/true" \
  -n "cordon exec" "$CORDON exec $SESSION -- /bin/true" \
  -n "cordon-exec" "$BUILD/launcher/cordon-exec $SESSION -- /bin/true" >/dev/null

python3 - "$OUT" <<'PY'
import json, sys
res = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
bw = res["bwrap"]["median"]
print(f"{'command':11} {'median ms':>10} {'mean ms':>9} {'stddev':>8} {'vs bwrap':>9}")
for name in ["true", "unshare", "bwrap", "cordon-ro", "cordon-cow", "cordon exec", "cordon-exec"]:
    r = res[name]
    print(f"{name:11} {r['median']*1e3:10.2f} {r['mean']*1e3:9.2f} {r['stddev']*1e3:8.2f} "
          f"{r['median']/bw:8.2f}x")
PY
