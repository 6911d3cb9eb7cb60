#!/usr/bin/env bash
# Time of `cordon diff ID --stat` on large sessions (target: 10k added + 10k deleted files in
# under 2 s). Two workloads, each a real `cordon run` session over a tmpfs workspace:
#   renamed   N files moved to another directory (every add pairs with a delete: N renames)
#   replaced  N files deleted and N others of the same sizes but other bytes added (every add
#             meets a bucket of candidates and none matches: the worst case for pairing)
# Usage: bench/review/diff.sh [BUILD_DIR] [N]   (N default 10000; RUNS default 3, median shown)
# CORDON=path/to/cordon overrides the binary (to compare with an older build).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=$(realpath "${1:-build}")
N=${2:-10000}
RUNS=${RUNS:-3}
CORDON=${CORDON:-$BUILD/launcher/cordon}
[ -x "$CORDON" ] || { echo "bench/review: $CORDON not built" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench/review: python3 missing" >&2; exit 2; }

SCRATCH=$(mktemp -d /dev/shm/cordon-bench-review.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$SCRATCH"' EXIT
export CORDON_STATE_DIR=$SCRATCH/state

# make_session NAME PYTHON: a workspace of N files in old/, and a session that ran PYTHON in it.
make_session() {
  local ws=$SCRATCH/$1
  mkdir -p "$ws/old"
  python3 - "$ws/old" "$N" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, "f%06d" % i), "w") as f:
        f.write("line %06d of a file in the workspace\n" % i * 3)
PY
  if [ "$(id -u)" = 0 ]; then chown -R 4242:4242 "$ws"; fi
  "$CORDON" run -q -w "$ws" -- /usr/bin/python3 -c "$2" >/dev/null
}

# Wall time and CPU time (user + system) of each run; the medians. On a busy machine the wall
# time waits for a CPU: the CPU time is what the diff costs.
time_diff() {
  local ws=$SCRATCH/$1 walls=() cpus=()
  for _ in $(seq "$RUNS"); do
    (cd "$ws" && TIMEFORMAT='%R %U %S' && time "$CORDON" diff last --stat >"$SCRATCH/out.txt") \
      2>"$SCRATCH/time.txt"
    read -r real user sys <"$SCRATCH/time.txt"
    walls+=("$real")
    cpus+=("$(echo "$user + $sys" | bc)")
  done
  local mid=$(((RUNS + 1) / 2)) wall cpu
  wall=$(printf '%s\n' "${walls[@]}" | sort -n | sed -n "${mid}p")
  cpu=$(printf '%s\n' "${cpus[@]}" | sort -n | sed -n "${mid}p")
  printf '%-9s %6d x %-6d wall %6.2f s  cpu %6.2f s  (%s; load %s)\n' "$1" "$N" "$N" "$wall" "$cpu" \
    "$(head -1 "$SCRATCH/out.txt" | sed 's/.*: //')" "$(cut -d' ' -f1 /proc/loadavg)"
}

make_session renamed "import os
os.mkdir('new')
for n in os.listdir('old'): os.rename('old/' + n, 'new/' + n)"
time_diff renamed
make_session replaced "import os, shutil
shutil.rmtree('old')
os.mkdir('new')
for i in range($N):
    with open('new/g%06d' % i, 'w') as f:
        f.write('LINE %06d OF A FILE IN THE WORKSPACE\n' % i * 3)"
time_diff replaced
