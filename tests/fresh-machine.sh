#!/usr/bin/env bash
# README command 1 on a fresh Debian 12 machine, as a newcomer would paste it: builds a fresh root
# with mmdebstrap, copies this checkout in (owned by root, as a clone by root would be), boots into
# it the way a machine does (private mount and pid namespaces, fresh /proc, /dev and /tmp, /sys,
# pivot_root), runs the command exactly as the README writes it, then runs the demo again as an
# ordinary user created there, in that root-owned checkout. Checks what the demo printed: the
# refusals, the agent's work in the diff, the checkout untouched. Usage: tests/fresh-machine.sh
# (as root). Shares the host's apt cache and, if the host has ccache, its compiler cache.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
START=$SECONDS
say() { echo "fresh-machine: $*"; }
die() { echo "fresh-machine: FAILED: $*" >&2; exit 1; }

if [ "${1:-}" = --inside ]; then
  inside=1
else
  inside=0
  [ "$(id -u)" -eq 0 ] || die "run as root (it builds and enters a Debian root)"
  command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: apt-get install mmdebstrap" \
    "(.ci/setup installs it)"
fi

# README command 1: the first ```sh block of the README, as written.
readme_command() {
  awk '/^```sh$/ {on = 1; next} on && /^```/ {exit} on {print}' "$SRC/README.md"
}

# ---- on the host: a scratch directory, then everything else in private namespaces ----
if [ "$inside" = 0 ]; then
  CMD=$(readme_command)
  [ -n "$CMD" ] || die "no \`\`\`sh block in $SRC/README.md"
  say "README command 1: $CMD"
  WORK=$(mktemp -d /var/tmp/cordon-fresh.XXXXXX)
  mkdir "$WORK/logs"
  trap 'rmdir "$WORK/root" 2>/dev/null || true' EXIT
  # The root lives on a tmpfs mounted inside the private mount namespace: whatever happens, it
  # is gone with the namespace, and the host's disk never sees its mass delete.
  status=0
  FRESH_WORK=$WORK FRESH_CMD=$CMD unshare --mount --pid --fork --propagation private -- \
    "$0" --inside || status=$?
  LOGS=$WORK/logs
  for f in root.log user.log; do
    [ -f "$LOGS/$f" ] && { echo "---- $f (last 60 lines)"; tail -n 60 "$LOGS/$f"; }
  done
  [ "$status" -eq 0 ] || die "the fresh machine failed (exit $status); logs in $LOGS"

  # What the demo must have shown, as root and as the user.
  check() {
    local log=$1 who=$2 missing
    missing=$("$SRC/tests/demo/check.sh" "$log") || die "$who: $missing"
    for w in "== what the agent changed: cordon diff last ==" \
             "Apply the agent's work: build/launcher/cordon commit last"; do
      grep -qF -- "$w" "$log" || die "$who: the demo did not print: $w"
    done
  }
  check "$LOGS/root.log" "as root"
  check "$LOGS/user.log" "as the user"
  cmp -s "$LOGS/project.before" "$LOGS/project.after" ||
    die "the checkout's tests/demo/project changed: $(diff "$LOGS/project.before" "$LOGS/project.after")"
  say "times: $(cat "$LOGS/times")"
  rm -rf "$WORK"
  say "passed in $((SECONDS - START)) s"
  exit 0
fi

# ---- pid 1 of a private pid namespace, in a private mount namespace ----
. "$SRC/tests/support/fresh-root.sh"
WORK=$FRESH_WORK
ROOT=$WORK/root
LOGS=$WORK/logs  # on the host's disk: read by the checks after this namespace is gone

t=$SECONDS
say "mmdebstrap --variant=apt bookworm (the machine's own apt sources)"
fresh_root_make "$ROOT" "$LOGS"
t_root=$((SECONDS - t))

# The checkout as a clone would have it (tracked and untracked-but-not-ignored files, no build),
# owned by root, at the same path as here: compiles then match the host's compiler cache.
CHECKOUT=$SRC
mkdir -p "$ROOT$CHECKOUT"
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$SRC" ls-files -z --cached --others --exclude-standard |
    tar -C "$SRC" --null -T - -cf - | tar -C "$ROOT$CHECKOUT" -xf -
else
  tar -C "$SRC" --exclude='./build*' -cf - . | tar -C "$ROOT$CHECKOUT" -xf -
fi
chown -R 0:0 "$ROOT$CHECKOUT"

ccache_env=()
cache_dir=$(ccache -k cache_dir 2>/dev/null || true)
if [ -n "$cache_dir" ] && [ -d "$cache_dir" ]; then
  # The host's cache and configuration at the same paths: compiles whose inputs are byte for byte
  # the host's come from it; anything the fresh root lacks (a header, a library) still fails.
  mkdir -p "$ROOT$cache_dir"
  mount --bind "$cache_dir" "$ROOT$cache_dir"
  conf=$(ccache -p 2>/dev/null | sed -n 's/^(\(\/[^)]*\)) cache_dir = .*/\1/p' | head -1)
  if [ -n "$conf" ] && [ -f "$conf" ]; then
    cp "$conf" "$ROOT/ccache.conf"
    ccache_env=(CCACHE_CONFIGPATH=/ccache.conf)
  else
    ccache_env=(CCACHE_DIR="$cache_dir")
  fi
fi
fresh_root_enter "$ROOT" "$LOGS"

env_base=("${FRESH_ROOT_ENV[@]}")
if [ ${#ccache_env[@]} -gt 0 ]; then
  say "ccache shared with the host (installed into the fresh root first)"
  env -i "${env_base[@]}" DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends ccache >/dev/null'
fi

project=("$CHECKOUT"/tests/demo/project/* "$CHECKOUT"/tests/demo/project/.env)
sha256sum "${project[@]}" > /fresh-logs/project.before
say "as root, in $CHECKOUT: $FRESH_CMD"
t=$SECONDS
status=0
env -i "${env_base[@]}" "${ccache_env[@]}" HOME=/root USER=root \
  bash -c "cd '$CHECKOUT' && $FRESH_CMD" > /fresh-logs/root.log 2>&1 || status=$?
t_cmd=$((SECONDS - t))
[ "$status" -eq 0 ] || { say "README command 1 failed as root (exit $status)"; exit 1; }

# An ordinary user; the checkout and its build belong to root.
fresh_root_add_user newcomer 1500
say "as the user newcomer, in the root-owned $CHECKOUT: tests/demo/run.sh"
t=$SECONDS
status=0
env -i LANG=C.UTF-8 setpriv --reuid=1500 --regid=1500 --init-groups --reset-env -- \
  bash -c "cd '$CHECKOUT' && tests/demo/run.sh" > /fresh-logs/user.log 2>&1 || status=$?
t_user=$((SECONDS - t))
sha256sum "${project[@]}" > /fresh-logs/project.after
echo "mmdebstrap ${t_root} s, README command 1 as root ${t_cmd} s, demo as the user ${t_user} s" \
  > /fresh-logs/times
[ "$status" -eq 0 ] || { say "the demo failed as the user (exit $status)"; exit 1; }
