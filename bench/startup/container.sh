#!/usr/bin/env bash
# Start-up of `cordon run` inside its container image (nested under podman with the pod's
# settings) against the same binaries on the host: hyperfine on the host as root, on the host as
# an ordinary user (USER_NAME, cordon-test by default) and inside one long-lived container (the
# host's hyperfine bound in), in ROUNDS (5) turns of RUNS (20) runs each, every one timing
# `cordon run -- /bin/true` with the workspace read-only and in cow mode. The host runs the
# image's own cordon (copied out of the image), so every row times the same build. Prints the
# medians over all turns and the container's ratio to each host row.
# Usage: bench/startup/container.sh [IMAGE]   (root; IMAGE defaults to localhost/cordon:ci, as
# tests/container/podman_test.sh builds it; not part of CI pass/fail)
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE=${1:-localhost/cordon:ci}
RUNS=${RUNS:-20}
ROUNDS=${ROUNDS:-5}
[ "$(id -u)" -eq 0 ] || { echo "bench/startup/container: run as root" >&2; exit 2; }
for tool in hyperfine podman runc python3; do
  command -v "$tool" >/dev/null || { echo "bench/startup/container: $tool missing (.ci/setup)" >&2; exit 2; }
done
podman image exists "$IMAGE" ||
  { echo "bench/startup/container: no image $IMAGE (tests/container/podman_test.sh builds it)" >&2; exit 2; }

WORK=$(mktemp -d /dev/shm/cordon-bench-container.XXXXXX)
chmod 755 "$WORK"
NAME=cordon-bench-$$
USER_NAME=${USER_NAME:-cordon-test}
cleanup() {
  podman rm -f -t 0 "$NAME" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mknod -m 0666 "$WORK/fuse" c 10 229
mkdir -p "$WORK/ws" "$WORK/state" "$WORK/out" "$WORK/user-ws" "$WORK/user-state"
chmod 777 "$WORK/out"
chown "$USER_NAME" "$WORK/user-ws" "$WORK/user-state"
# The image's /usr/local, where the ordinary user can run it (cordon finds its daemons beside it,
# in ../libexec/cordon).
ROOT=$(podman image mount "$IMAGE")
cp -a "$ROOT/usr/local" "$WORK/local"
podman image unmount "$IMAGE" >/dev/null
chmod -R a+rX "$WORK/local"

# bench_cmds CORDON WS OUT: the hyperfine command for the two rows, its JSON in OUT.
bench_cmds() {
  local cordon=$1 ws=$2 out=$3
  echo hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$out" \
    -n cordon-ro "'$cordon run -q --mode ro -w $ws -- /bin/true'" \
    -n cordon-cow "'$cordon run -q -w $ws -- /bin/true'"
}

# In a container with the pod's settings: the state directory on a tmpfs, as the pod's volume.
podman --runtime runc run -d --name "$NAME" --userns=auto --cap-drop=ALL \
  --security-opt seccomp="$PWD/deploy/seccomp/cordon.json" --security-opt unmask=ALL \
  -v "$WORK/fuse:/dev/fuse" --device-cgroup-rule "c 10:229 rwm" \
  --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --network none \
  --tmpfs /var/lib/cordon:rw,U,size=512m -v "$(command -v hyperfine):/usr/local/bin/hyperfine:ro" \
  -v "$WORK/out:/out" --entrypoint /bin/sleep "$IMAGE" 3600 >/dev/null

# ROUNDS rounds of RUNS runs in each place, taken in turn, so that a change of the machine's load
# during the run weighs on every row alike. On the host, as root (cgroup limits; cordon-fs) and
# as the ordinary user (rlimits; kernel overlayfs where /dev/fuse is closed to it, as in the
# container without CAP_SYS_ADMIN).
for round in $(seq "$ROUNDS"); do
  CORDON_STATE_DIR=$WORK/state eval "$(bench_cmds "$WORK/local/bin/cordon" "$WORK/ws" \
    "$WORK/out/host-$round.json")" >/dev/null
  runuser -u "$USER_NAME" -- env HOME="$WORK/user-state" CORDON_STATE_DIR="$WORK/user-state" \
    bash -c "$(bench_cmds "$WORK/local/bin/cordon" "$WORK/user-ws" "$WORK/out/user-$round.json")" \
    >/dev/null
  podman exec "$NAME" bash -c "$(bench_cmds cordon /workspace "/out/container-$round.json") >/dev/null"
done

python3 - "$WORK/out" "$ROUNDS" "$USER_NAME" <<'PY'
import json, statistics, sys
out, rounds, user_name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def times(where):
    t = {}
    for i in range(1, rounds + 1):
        for r in json.load(open(f"{out}/{where}-{i}.json"))["results"]:
            t.setdefault(r["command"], []).extend(r["times"])
    return {k: statistics.median(v) for k, v in t.items()}
host, user, cont = times("host"), times("user"), times("container")
print(f"{'command':10} {'host root ms':>12} {'host ' + user_name + ' ms':>18} {'container ms':>13} "
      f"{'vs root':>8} {'vs user':>8}")
for name in ["cordon-ro", "cordon-cow"]:
    print(f"{name:10} {host[name]*1e3:12.2f} {user[name]*1e3:18.2f} {cont[name]*1e3:13.2f} "
          f"{cont[name]/host[name]:7.2f}x {cont[name]/user[name]:7.2f}x")
PY
