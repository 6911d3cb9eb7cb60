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
    local log=$1 who=$2
    local want=(
      "refused  read /etc/shadow"
      "refused  read tests/demo/project/.env"
      "refused  resolve evil.example"
      "refused  connect 198.51.100.1:443"
      "refused  write /usr/bin/cordon-was-here"
      "refused  plant tests/demo/project/.envrc"
      "done     edit greet.py"
      "done     delete debug.log"
      "done     write NOTES.md"
      "done     run greet.py: it says Hello, world!"
      "== what the agent changed: cordon diff last =="
      "added tests/demo/project/NOTES.md"
      "deleted tests/demo/project/debug.log"
      "modified tests/demo/project/greet.py"
      '+    return "Hello, " + name + "!"'
      "Apply the agent's work: build/launcher/cordon commit last"
    )
    for w in "${want[@]}"; do
      grep -qF -- "$w" "$log" || die "$who: the demo did not print: $w"
    done
    ! grep -qE 'ALLOWED  (read|write|connect|resolve|plant)|FAILED  ' "$log" ||
      die "$who: the demo got through or failed: $(grep -E 'ALLOWED|FAILED' "$log" | head -3)"
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
WORK=$FRESH_WORK
ROOT=$WORK/root
LOGS=$WORK/logs  # on the host's disk: read by the checks after this namespace is gone
mkdir -p "$ROOT"
mount -t tmpfs -o size=12g,mode=0755 fresh-machine "$ROOT"

t=$SECONDS
say "mmdebstrap --variant=apt bookworm (the machine's own apt sources)"
# Packages the host's apt cache holds are not downloaded again (and none are unlinked from it).
mmdebstrap --verbose --variant=apt --skip=essential/unlink \
  --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
  --setup-hook='mount --bind /var/cache/apt/archives "$1/var/cache/apt/archives"' \
  --customize-hook='umount "$1/var/cache/apt/archives"' \
  bookworm "$ROOT" >"$LOGS/mmdebstrap.log" 2>&1 ||
  { cat "$LOGS/mmdebstrap.log" >&2; exit 1; }
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

# Boot: a fresh /proc of this pid namespace, /sys as the host has it, a fresh /dev as udev makes
# it on Debian (so /dev/fuse is 0666 there, whatever this host chose for its own), tmpfs on /tmp
# and /run, the apt cache shared with the host, then pivot_root.
mount --bind "$ROOT" "$ROOT"
mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys"
mount --make-rslave "$ROOT/sys"
mount -t tmpfs -o mode=0755,nosuid dev "$ROOT/dev"
for node in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" "urandom c 1 9" "tty c 5 0" \
            "fuse c 10 229"; do
  set -- $node
  mknod -m 0666 "$ROOT/dev/$1" "$2" "$3" "$4"
done
mkdir -p "$ROOT/dev/pts" "$ROOT/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$ROOT/dev/pts"
ln -s pts/ptmx "$ROOT/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ROOT/dev/shm"
ln -s /proc/self/fd "$ROOT/dev/fd"
for i in 0:stdin 1:stdout 2:stderr; do ln -s "/proc/self/fd/${i%%:*}" "$ROOT/dev/${i#*:}"; done
mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$ROOT/tmp"
mount -t tmpfs -o mode=0755,nosuid,nodev run "$ROOT/run"
mount --bind /var/cache/apt/archives "$ROOT/var/cache/apt/archives"
mkdir -p "$ROOT/fresh-logs"
mount --bind "$LOGS" "$ROOT/fresh-logs"
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
cd "$ROOT"
mkdir -p .oldroot
pivot_root . .oldroot
# The apt variant has no umount (package mount): the host's, run by the host's loader.
/.oldroot/lib64/ld-linux-x86-64.so.2 \
  --library-path /.oldroot/lib/x86_64-linux-gnu:/.oldroot/usr/lib/x86_64-linux-gnu \
  /.oldroot/usr/bin/umount -l /.oldroot
rmdir /.oldroot
cd /

env_base=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
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

# An ordinary user, made the way useradd would (the apt variant has no passwd package): the
# checkout and its build belong to root.
echo "newcomer:x:1500:1500:newcomer:/home/newcomer:/bin/bash" >> /etc/passwd
echo "newcomer:x:1500:" >> /etc/group
mkdir -p /home/newcomer && chown 1500:1500 /home/newcomer && chmod 0700 /home/newcomer
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
