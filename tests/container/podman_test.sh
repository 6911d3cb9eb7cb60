#!/usr/bin/env bash
# cordon in its container image (deploy/container/Containerfile), nested under podman as a pod
# runs it: a user namespace of its own (--userns=auto, as hostUsers: false), no capability
# (--cap-drop=ALL), cordon's seccomp profile, /proc unmasked (as procMount: Unmasked), /dev/fuse
# passed in, the image's ordinary user. Rootful podman, then rootless podman as an ordinary user
# with a subuid range (cordon-test). Inside, tests/container/inside.sh checks doctor, isolation,
# network capture, the cow workspace with diff and commit, and limits; then podman's defaults
# (its seccomp profile, masked /proc, no /dev/fuse, a /dev/fuse the container cannot open) and
# cordon's message naming the setting for each.
# Usage: tests/container/podman_test.sh   (as root; .ci/run runs it; podman, runc, mmdebstrap from
# .ci/setup). The base image (localhost/debian:bookworm) is made with mmdebstrap from the
# machine's apt sources when missing and kept, as is the built image (podman's layer cache and the
# host's ccache make a rebuild of changed sources quick); every container is removed.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
START=$SECONDS
BASE=${CORDON_CONTAINER_BASE:-localhost/debian:bookworm}
IMAGE=${CORDON_CONTAINER_IMAGE:-localhost/cordon:ci}
ROOTLESS_USER=${CORDON_CONTAINER_USER:-cordon-test}
say() { echo "container: $*"; }
die() { echo "container: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (it builds an image and runs podman as root and as $ROOTLESS_USER)"
for tool in podman runc mmdebstrap newuidmap; do
  command -v "$tool" >/dev/null || die "$tool is missing (.ci/setup installs it)"
done
# crun refuses this kind of host's hybrid cgroup v1 hierarchy; runc runs on both.
PODMAN=(podman --runtime runc)

WORK=$(mktemp -d /var/tmp/cordon-container.XXXXXX)
chmod 755 "$WORK"
cleanup() {
  if [ -n "${ROOTLESS_HOME:-}" ]; then
    # Rootless podman keeps a pause process holding its user namespace; it outlives the reset.
    local pause
    pause=$(cat "$ROOTLESS_HOME/run/libpod/tmp/pause.pid" 2>/dev/null || true)
    as_user podman system reset --force >/dev/null 2>&1 || true
    if [ -n "$pause" ] && [ "$(stat -c %U "/proc/$pause" 2>/dev/null)" = "$ROOTLESS_USER" ]; then
      kill "$pause" 2>/dev/null || true
    fi
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the image ----
if ! podman image exists "$BASE"; then
  say "making $BASE with mmdebstrap --variant=apt bookworm (the machine's apt sources)"
  mmdebstrap --variant=apt bookworm - 2>"$WORK/mmdebstrap.log" | podman import - "$BASE" >/dev/null ||
    { cat "$WORK/mmdebstrap.log" >&2; die "mmdebstrap | podman import"; }
fi
build_args=(--build-arg "BASE=$BASE" -f "$SRC/deploy/container/Containerfile"
  --ignorefile "$SRC/deploy/container/containerignore" -t "$IMAGE")
# The host's compiler cache, where it has one (the build stage mirrors a host build's layout).
cache=$(ccache -k cache_dir 2>/dev/null || true)
if [ -n "$cache" ] && [ -d "$cache" ]; then
  build_args+=(-v "$cache:/ccache")
fi
t=$SECONDS
# CORDON_CONTAINER_NO_BUILD=1: use $IMAGE as it is (a rerun of the checks alone).
if [ "${CORDON_CONTAINER_NO_BUILD:-0}" != 1 ]; then
  "${PODMAN[@]}" build --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 "${build_args[@]}" \
    "$SRC" >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log" >&2; die "podman build"; }
  say "image $IMAGE built in $((SECONDS - t)) s"
fi
podman image exists "$IMAGE" || die "no image $IMAGE"

# ---- podman's user namespaces ----
# --userns=auto takes its ranges from the subordinate ids of the user named "containers".
for f in /etc/subuid /etc/subgid; do
  grep -q '^containers:' "$f" || echo "containers:2147483647:2147483648" >>"$f"
done
id -u "$ROOTLESS_USER" >/dev/null 2>&1 || useradd -M "$ROOTLESS_USER"
grep -q "^$ROOTLESS_USER:" /etc/subuid || die "$ROOTLESS_USER has no range in /etc/subuid"

# FUSE device nodes of our own, open to every uid (0666, as udev makes /dev/fuse on Debian) and
# closed to all but root (0600, as some hosts keep theirs, and as --device passes the host's node
# into a user-namespaced container): the host's own /dev/fuse is left as it is.
mknod -m 0666 "$WORK/fuse" c 10 229
mknod -m 0600 "$WORK/fuse-closed" c 10 229

# The pod's settings, as deploy/kubernetes has them: no capability, the state directory on a
# tmpfs owned by the image's user (emptyDir, medium: Memory).
POD=(--rm --userns=auto --cap-drop=ALL --security-opt "seccomp=$SRC/deploy/seccomp/cordon.json"
  --security-opt unmask=ALL --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --network none
  --tmpfs /var/lib/cordon:rw,U,size=512m -v "$SRC/tests/container:/checks:ro")
# Bound over /dev/fuse and allowed by a device rule: --device SRC:/dev/fuse would not do, podman
# binds the host's /dev/fuse into a user-namespaced container whatever SRC names.
OPEN_FUSE=(-v "$WORK/fuse:/dev/fuse" --device-cgroup-rule "c 10:229 rwm")

# run WHO NAME PODMAN-ARGS...: one container; its output in $WORK/WHO-NAME.log, shown on failure.
run() {
  local who=$1 name=$2 status=0
  shift 2
  local log="$WORK/$who-$name.log"
  if [ "$who" = root ]; then
    timeout 300 "${PODMAN[@]}" run "$@" >"$log" 2>&1 || status=$?
  else
    as_user timeout 300 "${PODMAN[@]}" run "$@" >"$log" 2>&1 || status=$?
  fi
  [ "$status" -eq 0 ] || { cat "$log" >&2; die "$who: $name: podman run exited $status"; }
  grep '^inside' "$log" | sed "s/^/  $who: /" || true
}
as_user() {
  runuser -u "$ROOTLESS_USER" -- env HOME="$ROOTLESS_HOME" XDG_RUNTIME_DIR="$ROOTLESS_HOME/run" "$@"
}

checks() {
  local who=$1 t=$SECONDS
  local inside=(--entrypoint /bin/bash "$IMAGE" /checks/inside.sh)
  # The recipe as it is: no capability, so cow goes through kernel overlayfs on the tmpfs.
  run "$who" pod-overlay "${POD[@]}" "${OPEN_FUSE[@]}" "${inside[@]}" pod overlay
  # CAP_SYS_ADMIN of the container's own user namespace: cow through cordon-fs, with the state
  # directory on the container's overlay root.
  run "$who" pod-fuse --rm --userns=auto --cap-drop=ALL --cap-add SYS_ADMIN \
    --security-opt "seccomp=$SRC/deploy/seccomp/cordon.json" --security-opt unmask=ALL \
    --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --network none \
    -v "$SRC/tests/container:/checks:ro" "${OPEN_FUSE[@]}" "${inside[@]}" pod fuse
  # The image's entrypoint, as a pod's command uses it.
  run "$who" entrypoint "${POD[@]}" "${OPEN_FUSE[@]}" "$IMAGE" \
    run -q -w /workspace -- sh -c 'echo "hello from $(hostname)"'
  grep -qx "hello from cordon" "$WORK/$who-entrypoint.log" ||
    { cat "$WORK/$who-entrypoint.log" >&2; die "$who: the entrypoint's run did not print"; }
  # A /dev/fuse closed to the container's uids, then none at all.
  run "$who" nofuse "${POD[@]}" -v "$WORK/fuse-closed:/dev/fuse" \
    --device-cgroup-rule "c 10:229 rwm" "${inside[@]}" nofuse
  run "$who" nodevice "${POD[@]}" "${inside[@]}" nodevice
  # podman's defaults, one at a time: each must be named by cordon with its fix.
  local defaults=(--rm --userns=auto --cap-drop=ALL --ulimit nofile=1024:1024
    --ulimit nproc=4096:4096 --network none -v "$SRC/tests/container:/checks:ro")
  run "$who" masked "${defaults[@]}" --security-opt "seccomp=$SRC/deploy/seccomp/cordon.json" \
    "${OPEN_FUSE[@]}" "${inside[@]}" masked
  run "$who" seccomp "${defaults[@]}" --security-opt unmask=ALL "${OPEN_FUSE[@]}" \
    "${inside[@]}" seccomp
  say "$who: passed in $((SECONDS - t)) s"
}

say "rootful podman (--userns=auto: the container's uids are unprivileged on the host)"
checks root

say "rootless podman as $ROOTLESS_USER"
ROOTLESS_HOME="$WORK/home"
install -d -o "$ROOTLESS_USER" -m 700 "$ROOTLESS_HOME" "$ROOTLESS_HOME/run" \
  "$ROOTLESS_HOME/.config" "$ROOTLESS_HOME/.config/containers"
# Kernel overlayfs for the user's storage (podman 4.3 would pick vfs, which copies the whole image
# for every container): the image's layers mapped once for --userns=auto's range, then reused.
printf '[storage]\ndriver = "overlay"\n' >"$ROOTLESS_HOME/.config/containers/storage.conf"
chown -R "$ROOTLESS_USER" "$ROOTLESS_HOME/.config"
t=$SECONDS
podman save "$IMAGE" 2>/dev/null | as_user podman load >"$WORK/load.log" 2>&1 ||
  { cat "$WORK/load.log" >&2; die "podman load as $ROOTLESS_USER"; }
say "image loaded into $ROOTLESS_USER's storage in $((SECONDS - t)) s"
checks "$ROOTLESS_USER"

leftover=$(podman ps -aq --filter "ancestor=$IMAGE")
[ -z "$leftover" ] || die "containers left behind: $leftover"
say "passed in $((SECONDS - START)) s"
