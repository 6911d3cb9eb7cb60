#!/usr/bin/env bash
# The checks tests/container/podman_test.sh runs inside the cordon image, as the image's user.
#   inside.sh pod overlay|fuse
#                       the pod-like settings (cordon's seccomp profile, /proc unmasked, an
#                       openable /dev/fuse): doctor, isolation, network capture, the cow workspace
#                       with diff and commit, limits. overlay: no capability, so the setuid
#                       fusermount3 cannot mount and cow goes through kernel overlayfs (the state
#                       directory on a tmpfs); fuse: CAP_SYS_ADMIN of the container's user
#                       namespace, cow through cordon-fs (the state directory may be anywhere)
#   inside.sh nofuse    the same settings with a /dev/fuse this uid cannot open: doctor's row and fix
#   inside.sh masked    /proc masked (podman's default): doctor's row, cordon run's message
#   inside.sh seccomp   podman's default seccomp profile: doctor's row, cordon run's message
#   inside.sh nodevice  no /dev/fuse at all (podman's default): doctor's row and fix
# Prints "inside(MODE): ok" at the end; the first failed check ends it with its output.
set -uo pipefail
MODE=${1:?mode}
say() { echo "inside($MODE): $*"; }
fail() { echo "inside($MODE): FAILED: $*" >&2; exit 1; }
# expect TEXT WHAT FILE: FILE contains TEXT (fixed string).
expect() { grep -qF -- "$1" "$3" || { cat "$3" >&2; fail "$2: no '$1'"; }; }
T=$(mktemp -d /tmp/inside.XXXXXX)

# cordon doctor: ROW must be in STATE, and FIX (if given) in the output.
doctor_row() {
  local row=$1 state=$2 fix=${3:-}
  grep -qE "^$row +$state " "$T/doctor" || { cat "$T/doctor" >&2; fail "doctor: $row is not $state"; }
  [ -z "$fix" ] || expect "$fix" "doctor's fix for $row" "$T/doctor"
}
cordon doctor >"$T/doctor" 2>&1
doctor_status=$?

case "$MODE" in
  masked)
    doctor_row namespaces ok
    doctor_row /proc missing "podman: --security-opt unmask=ALL"
    expect "procMount: Unmasked" "doctor's Kubernetes fix for /proc" "$T/doctor"
    [ "$doctor_status" = 2 ] || fail "doctor exited $doctor_status with /proc missing, not 2"
    status=0
    cordon run -q --mode ro -w /workspace -- true >"$T/run" 2>&1 || status=$?
    [ "$status" = 125 ] || { cat "$T/run" >&2; fail "cordon run exited $status, not 125"; }
    expect "unmask=ALL" "cordon run's message with /proc masked" "$T/run"
    say ok; exit 0 ;;
  seccomp)
    doctor_row namespaces missing "seccomp"
    expect "seccompProfile" "doctor's Kubernetes fix for namespaces" "$T/doctor"
    [ "$doctor_status" = 2 ] || fail "doctor exited $doctor_status with namespaces missing, not 2"
    status=0
    cordon run -q --mode ro -w /workspace -- true >"$T/run" 2>&1 || status=$?
    [ "$status" = 125 ] || { cat "$T/run" >&2; fail "cordon run exited $status, not 125"; }
    expect "seccomp" "cordon run's message under podman's default seccomp profile" "$T/run"
    say ok; exit 0 ;;
  nodevice)
    doctor_row /dev/fuse degraded "--device /dev/fuse"
    expect "No such file or directory" "doctor's /dev/fuse row" "$T/doctor"
    say ok; exit 0 ;;
  nofuse)
    doctor_row namespaces ok
    doctor_row /proc ok
    doctor_row /dev/fuse degraded "--device /dev/fuse"
    expect "Permission denied" "doctor's /dev/fuse row" "$T/doctor"
    say ok; exit 0 ;;
  pod) ;;
  *) fail "unknown mode" ;;
esac

# ---- pod: everything works ----
BACKEND=${2:?overlay or fuse}
for row in namespaces /proc seccomp nftables; do doctor_row "$row" ok; done
if [ "$BACKEND" = fuse ]; then
  doctor_row /dev/fuse ok
else
  doctor_row /dev/fuse degraded "podman --cap-add SYS_ADMIN"
  expect "CAP_SYS_ADMIN is not in the capability bounding set" "doctor's /dev/fuse row" "$T/doctor"
fi
grep -qE '^cgroups +(ok|degraded) ' "$T/doctor" || { cat "$T/doctor" >&2; fail "doctor: cgroups"; }
grep -qE '^state dir +(ok|degraded) ' "$T/doctor" || { cat "$T/doctor" >&2; fail "doctor: state dir"; }
[ "$doctor_status" -le 1 ] || { cat "$T/doctor" >&2; fail "doctor exited $doctor_status"; }
say "doctor: $(tail -n 1 "$T/doctor")"

# Isolation: nothing of $HOME outside the workspace; a process of the container's is not in the
# sandbox's pid namespace; the sandbox's own network namespace.
echo "the image user's secret" >"$HOME/secret.txt"
sleep 987 &
marker=$!
out=$(cordon run -q --mode ro -w /workspace -- sh -c \
  "cat $HOME/secret.txt 2>&1; cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; \
   echo net=\$(readlink /proc/self/ns/net); echo pid=\$(readlink /proc/self/ns/pid)" 2>&1)
kill "$marker"
case "$out" in *"the image user's secret"*) fail "the sandbox read \$HOME/secret.txt: $out" ;; esac
case "$out" in *"sleep 987"*) fail "the sandbox sees the container's processes: $out" ;; esac
[ "$(sed -n 's/^net=//p' <<<"$out")" != "$(readlink /proc/self/ns/net)" ] || fail "same net ns: $out"
[ "$(sed -n 's/^pid=//p' <<<"$out")" != "$(readlink /proc/self/ns/pid)" ] || fail "same pid ns: $out"
say "isolation: \$HOME unreadable, the container's processes unseen, own net and pid namespaces"

# Network: a server on the container's loopback, allowed by port; a documentation address refused
# by the proxy before any packet leaves.
mkdir "$T/www" && echo "served inside the container" >"$T/www/page.txt"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$T/www" "$port" >"$T/www.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port/page.txt" >/dev/null && break
  sleep 0.1
done
cordon run -q --mode ro -w /workspace --allow-host "localhost:$port" -- sh -c \
  "curl -s --max-time 10 http://localhost:$port/page.txt; \
   curl -s --max-time 10 http://198.51.100.7/; echo; echo exit=\$?" >"$T/net" 2>&1
expect "served inside the container" "the allowed loopback server" "$T/net"
expect "198.51.100.7:80 is not in network.allow" "the proxy's refusal" "$T/net"
cordon log last >"$T/net.log" 2>&1
expect "net.refused" "the record of the refusal" "$T/net.log"
say "network: localhost:$port reached, 198.51.100.7 refused by the proxy"

# The workspace: a write lands in the session's layer, shows in diff, and commit lands it.
echo "the original" >/workspace/kept.txt
cordon run -w /workspace -- sh -c 'echo "written in the sandbox" > new.txt; \
  echo changed >> kept.txt' >"$T/cow" 2>&1 || { cat "$T/cow" >&2; fail "cordon run (cow) failed"; }
if [ "$BACKEND" = fuse ]; then
  grep -q "kernel overlayfs" "$T/cow" && { cat "$T/cow" >&2; fail "cow did not go through cordon-fs"; }
else
  expect "copy-on-write through kernel overlayfs, not cordon-fs (CAP_SYS_ADMIN" "cow's fallback" "$T/cow"
fi
[ ! -e /workspace/new.txt ] || fail "the sandbox wrote /workspace/new.txt before commit"
[ "$(cat /workspace/kept.txt)" = "the original" ] || fail "kept.txt changed before commit"
cordon diff last >"$T/diff" 2>&1 || { cat "$T/diff" >&2; fail "cordon diff failed"; }
expect "new.txt" "cordon diff" "$T/diff"
expect "+written in the sandbox" "cordon diff" "$T/diff"
expect "+changed" "cordon diff" "$T/diff"
cordon commit last >"$T/commit" 2>&1 || { cat "$T/commit" >&2; fail "cordon commit failed"; }
[ "$(cat /workspace/new.txt)" = "written in the sandbox" ] || fail "commit did not land new.txt"
[ "$(tail -n 1 /workspace/kept.txt)" = changed ] || fail "commit did not land kept.txt"
say "workspace ($BACKEND): the write was in cordon diff only, then commit landed it"

# Limits: the wall clock ends the program with 124; memory above the limit is refused.
status=0
cordon run -q --mode ro -w /workspace --timeout 2s -- sleep 60 >"$T/timeout" 2>&1 || status=$?
[ "$status" = 124 ] || { cat "$T/timeout" >&2; fail "--timeout 2s: exit $status, not 124"; }
status=0
cordon run -q --mode ro -w /workspace --memory 64M -- python3 -c \
  'b = bytearray(256 << 20); print("allocated", len(b))' >"$T/memory" 2>&1 || status=$?
[ "$status" != 0 ] || { cat "$T/memory" >&2; fail "256 MiB allocated under --memory 64M"; }
grep -q allocated "$T/memory" && fail "256 MiB allocated under --memory 64M"
say "limits: --timeout 2s ended sleep with 124; 256 MiB under --memory 64M failed ($status)"
say ok
