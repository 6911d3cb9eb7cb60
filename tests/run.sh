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

# Scratch on a tmpfs: the root fs here crawls on creates after mass deletes.
SCRATCH=$(mktemp -d /tmp/cordon-tests.XXXXXX)
mount -t tmpfs -o size=4g,mode=1777 cordon-tests "$SCRATCH"
cleanup() { restore_uring; umount -l "$SCRATCH" 2>/dev/null || true; rmdir "$SCRATCH" 2>/dev/null || true; }
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

# An ordinary user gets cordon-fs only where /dev/fuse is open to all (Debian's default, 0666);
# hosts that keep it 0600 (this project's VMs) give the user the kernel-overlayfs fallback, which
# the run above covered. Cover the other case too: the copy-on-write and workflow tests again,
# rootless, with /dev/fuse opened up for the duration (its mode is put back on exit).
FUSE_MODE=$(stat -c %a /dev/fuse 2>/dev/null || true)
if [ -n "$FUSE_MODE" ] && ! su "$TEST_USER" -s /bin/sh -c 'test -r /dev/fuse && test -w /dev/fuse'; then
  echo "== rootless again with /dev/fuse usable (0666 instead of $FUSE_MODE): cordon-fs in a user namespace =="
  trap 'chmod "$FUSE_MODE" /dev/fuse; cleanup' EXIT
  chmod 0666 /dev/fuse
  su "$TEST_USER" -s /bin/bash -c \
    "cd '$PWD' && CORDON_TEST_TMP='$SCRATCH' ctest --test-dir '$BUILD' --output-on-failure --no-tests=error -j2 -R '^(Cow|CowCrash|CowTools|WorkflowCli|Landlock|SandboxFs)\\.'"
  chmod "$FUSE_MODE" /dev/fuse
  trap cleanup EXIT
fi
echo "tests/run.sh: all passed (root, rootless, rootless with cordon-fs)"
