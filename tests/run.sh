#!/usr/bin/env bash
# Runs cordon's test suite: everything as root (strict: a privileged test that skips fails), then
# again as an ordinary user for the rootless path. Usage: tests/run.sh [BUILD_DIR] (as root, or
# as a user with sudo: it asks sudo for itself).
set -euo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$0")/.."
TEST_USER=${CORDON_TEST_USER:-cordon-test}

if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "tests/run.sh: run as root (the suite needs real namespaces, cgroups, netfilter and FUSE"\
         "as root, and creates the user $TEST_USER for the rootless run)" >&2
    exit 2
  fi
  echo "tests/run.sh: the suite needs root (namespaces, cgroups, netfilter and FUSE as root, and a"\
       "user it creates for the rootless run): running it through sudo"
  exec sudo "$SELF" "$@"
fi
BUILD=$(realpath "${1:-build}")
if [ ! -x "$BUILD/launcher/cordon" ]; then
  echo "tests/run.sh: $BUILD/launcher/cordon not built; run: .ci/setup" >&2
  exit 2
fi

# FUSE over io_uring (Linux 6.14+) is off by default behind a module parameter; cordon-fs serves
# over it when it is on and over /dev/fuse otherwise. The suite runs with it on (tests that force
# /dev/fuse say so); the old value is put back on exit.
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_WAS=$(cat "$URING_PARAM" 2>/dev/null || true)
restore_uring() { [ -n "$URING_WAS" ] && echo "$URING_WAS" > "$URING_PARAM" 2>/dev/null || true; }
if [ -n "$URING_WAS" ]; then
  echo Y > "$URING_PARAM"
  echo "tests/run.sh: FUSE over io_uring on for the suite (was $URING_WAS)"
fi

# Some root-run tests need an unprivileged user that may open /dev/fuse (a rootless cordon-fs).
# Where /dev/fuse is closed to others (this project's VMs keep it 0600), the user $FUSE_USER gets
# an ACL entry on it for the duration of the run, removed on exit; where it is 0666 (Debian's
# default) any user will do. The rootless cordon-fs pass below runs as that user too.
FUSE_USER=${CORDON_TEST_FUSE_USER:-cordon-fuse}
id -u "$FUSE_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$FUSE_USER"
FUSE_ACL_ADDED=
if [ -e /dev/fuse ] && ! su "$FUSE_USER" -s /bin/sh -c 'test -r /dev/fuse && test -w /dev/fuse'; then
  if ! command -v setfacl >/dev/null; then
    echo "tests/run.sh: setfacl is missing (Debian package acl); run: .ci/setup" >&2
    exit 2
  fi
  setfacl -m "u:$FUSE_USER:rw" /dev/fuse
  FUSE_ACL_ADDED=1
fi
# Removing the entry leaves the ACL's mask behind; with no named entry left, drop the ACL entirely.
restore_fuse() {
  [ -n "$FUSE_ACL_ADDED" ] || return 0
  setfacl -x "u:$FUSE_USER" /dev/fuse 2>/dev/null || true
  if ! getfacl -cp /dev/fuse 2>/dev/null | grep -Eq '^(user|group):[^:]+:'; then
    setfacl -b /dev/fuse 2>/dev/null || true
  fi
}
export CORDON_TEST_FUSE_USER=$FUSE_USER

# Scratch on a tmpfs: the root fs here crawls on creates after mass deletes.
SCRATCH=$(mktemp -d /tmp/cordon-tests.XXXXXX)
mount -t tmpfs -o size=4g,mode=1777 cordon-tests "$SCRATCH"
cleanup() { restore_uring; restore_fuse; umount -l "$SCRATCH" 2>/dev/null || true; rmdir "$SCRATCH" 2>/dev/null || true; }
trap cleanup EXIT
export CORDON_TEST_TMP=$SCRATCH

echo "== tests as root =="
CORDON_TEST_STRICT=1 CORDON_STATE_DIR="$SCRATCH/state-root" \
  ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -j2

echo "== tests as the ordinary user $TEST_USER (rootless) =="
id -u "$TEST_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$TEST_USER"
# The user must reach the build and source trees.
for d in "$BUILD" "$PWD"; do
  if ! su "$TEST_USER" -s /bin/sh -c "test -r '$d' && test -x '$d'"; then
    echo "tests/run.sh: $TEST_USER cannot read $d; put the checkout somewhere world-readable" \
         "(e.g. /opt or /var/tmp) for the rootless run" >&2
    exit 2
  fi
done
# ctest records its results under the build tree's Testing/: give that part to the user.
mkdir -p "$BUILD/Testing" && chown -R "$TEST_USER" "$BUILD/Testing"
su "$TEST_USER" -s /bin/bash -c \
  "cd '$PWD' && CORDON_TEST_TMP='$SCRATCH' ctest --test-dir '$BUILD' --output-on-failure --no-tests=error -j2"

# An ordinary user gets cordon-fs only where it may open /dev/fuse; $TEST_USER above may not (on
# hosts that keep /dev/fuse closed), so that pass covered the kernel-overlayfs fallback. Cover
# cordon-fs in a user namespace too: the copy-on-write and workflow tests again, as $FUSE_USER.
if su "$TEST_USER" -s /bin/sh -c 'test -r /dev/fuse && test -w /dev/fuse'; then
  echo "== ($TEST_USER may use /dev/fuse: the rootless run above already went through cordon-fs) =="
else
  echo "== tests as $FUSE_USER, who may use /dev/fuse: cordon-fs in a user namespace =="
  chown -R "$FUSE_USER" "$BUILD/Testing"
  su "$FUSE_USER" -s /bin/bash -c \
    "cd '$PWD' && CORDON_TEST_TMP='$SCRATCH' ctest --test-dir '$BUILD' --output-on-failure --no-tests=error -j2 -R '^(Cow|CowCrash|Fleet|CowTools|CowFs|IdMap|WorkflowCli|Landlock|SandboxFs|Escape|DenyInGrant|EveryRuleInEveryGrant/DenyInGrant|Backends/ReviewAttack)\\.'"
fi
echo "tests/run.sh: all passed (root, rootless, rootless with cordon-fs)"
