#!/usr/bin/env bash
# The Debian package on a fresh Debian 12 root: builds cordon_*.deb from a build tree (cpack),
# checks it with lintian, installs it with `apt-get install ./cordon_*.deb` into a fresh root
# (tests/support/fresh-root.sh), then, from the installed binaries only (no build tree exists in
# that root), as root and as an ordinary user: the demo agent (refusals, the cow diff), a host file
# outside the workspace unreadable, the network refusal as an event in `cordon log`. Then
# `apt-get remove cordon` must leave nothing behind but the session records.
# Usage: tests/package-test.sh [BUILD] (as root; BUILD defaults to ./build, already built).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
START=$SECONDS
say() { echo "package-test: $*"; }
die() { echo "package-test: FAILED: $*" >&2; exit 1; }

# ---- on the host: the package, then everything else in private namespaces ----
if [ "${1:-}" != --inside ]; then
  [ "$(id -u)" -eq 0 ] || die "run as root (it builds and enters a Debian root)"
  for tool in mmdebstrap cpack lintian help2man; do
    command -v "$tool" >/dev/null || die "$tool is missing: .ci/setup installs it"
  done
  BUILD=$(realpath "${1:-$SRC/build}")
  [ -f "$BUILD/CPackConfig.cmake" ] || die "$BUILD is not a configured build tree (run .ci/setup)"
  WORK=$(mktemp -d /var/tmp/cordon-package.XXXXXX)
  mkdir "$WORK/logs" "$WORK/deb"
  trap 'rmdir "$WORK/root" 2>/dev/null || true' EXIT
  say "building the companions (nothing to do if built) and the package"
  cmake --build "$BUILD" --target cordon cordon-fs cordon-netproxy cordon_preload cordon-capture \
    cordon-man cordon-policy-man cordon-completion -- --quiet
  (cd "$BUILD" && cpack -G DEB -B "$WORK/deb" >"$WORK/logs/cpack.log" 2>&1) ||
    { cat "$WORK/logs/cpack.log" >&2; die "cpack failed"; }
  DEB=$(ls "$WORK"/deb/cordon_*.deb)
  say "$(basename "$DEB"): $(dpkg-deb -f "$DEB" Depends)"
  # Errors and warnings fail; informational tags do not (packaging/debian/lintian-overrides).
  lintian --fail-on error,warning "$DEB" >"$WORK/logs/lintian.log" 2>&1 ||
    { cat "$WORK/logs/lintian.log" >&2; die "lintian: errors or warnings in $(basename "$DEB")"; }
  status=0
  PKG_WORK=$WORK PKG_DEB=$DEB unshare --mount --pid --fork --propagation private -- \
    "$0" --inside || status=$?
  for f in root.log user.log; do
    [ -f "$WORK/logs/$f" ] && { echo "---- $f (last 40 lines)"; tail -n 40 "$WORK/logs/$f"; }
  done
  [ "$status" -eq 0 ] || die "see above (exit $status); logs in $WORK/logs"
  rm -rf "$WORK"
  say "passed in $((SECONDS - START)) s"
  exit 0
fi

# ---- pid 1 of a private pid namespace, in a private mount namespace ----
. "$SRC/tests/support/fresh-root.sh"
ROOT=$PKG_WORK/root
LOGS=$PKG_WORK/logs
say "mmdebstrap --variant=apt bookworm (the machine's own apt sources)"
fresh_root_make "$ROOT" "$LOGS"
mkdir -p "$ROOT/opt/pkg" "$ROOT/opt/demo/tests"
cp "$PKG_DEB" "$ROOT/opt/pkg/"
cp -a "$SRC/tests/demo" "$ROOT/opt/demo/tests/"
# A request to an address outside the policy (one that must never leave the machine).
cat > "$ROOT/opt/demo/connect.py" <<'PY'
import socket
s = socket.create_connection(("198.51.100.1", 80), timeout=5)
s.sendall(b"GET / HTTP/1.0\r\nHost: 198.51.100.1\r\n\r\n")
print(s.recv(200))
PY
chown -R 0:0 "$ROOT/opt"
fresh_root_enter "$ROOT" "$LOGS"
cd /
as_root() { env -i "${FRESH_ROOT_ENV[@]}" HOME=/root USER=root DEBIAN_FRONTEND=noninteractive "$@"; }
as_user() {
  env -i LANG=C.UTF-8 setpriv --reuid=1500 --regid=1500 --init-groups --reset-env -- "$@"
}

# The machine before cordon: python3 for the demo agent, an ordinary user, a secret of each
# outside any workspace.
as_root sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends python3' \
  >/fresh-logs/apt.log 2>&1 || { tail -20 /fresh-logs/apt.log; die "installing python3"; }
fresh_root_add_user newcomer 1500
echo "root's secret" > /root/secret && chmod 600 /root/secret
echo "newcomer's secret" > /home/newcomer/secret && chown 1500:1500 /home/newcomer/secret
dpkg-query -W -f '${Package}\n' | sort > /fresh-logs/packages.before
# Every path on the machine before the install; /proc, /sys, /dev and the test's own are not.
# find's complaints are kept and checked at the end.
snapshot() {
  { find / \( -path /proc -o -path /sys -o -path /dev -o -path /fresh-logs -o -path /opt \
    -o -path /var/cache/apt \) -prune -o -print 2>>/fresh-logs/find.err || true; } | sort
}
# An AppArmor that knows ABI 4.0 (Ubuntu 24.04's) is announced by this file; the package's
# postinst then puts its profile in /etc/apparmor.d (there is no AppArmor kernel here to load it
# into, and no aa-enabled to say there is), and removing the package takes it away again.
mkdir -p /etc/apparmor.d/abi && echo "# stands for AppArmor 4's ABI file" > /etc/apparmor.d/abi/4.0
snapshot > /fresh-logs/paths.before
touch /fresh-logs/stamp
sleep 1

say "apt-get install ./$(basename "$PKG_DEB")"
as_root apt-get install -y -qq --no-install-recommends "/opt/pkg/$(basename "$PKG_DEB")" \
  >>/fresh-logs/apt.log 2>&1 || { tail -20 /fresh-logs/apt.log; die "apt-get install"; }
dpkg -L cordon | sort > /fresh-logs/cordon.files
for f in /usr/bin/cordon /usr/libexec/cordon/cordon-fs /usr/libexec/cordon/cordon-netproxy \
         /usr/libexec/cordon/cordon-capture.so /usr/libexec/cordon/libcordon_preload.so \
         /usr/share/man/man1/cordon.1.gz /usr/share/man/man1/cordon-run.1.gz \
         /usr/share/man/man5/cordon-policy.5.gz /usr/share/bash-completion/completions/cordon \
         /usr/share/zsh/vendor-completions/_cordon /usr/share/fish/vendor_completions.d/cordon.fish \
         /usr/share/cordon/apparmor/cordon /usr/share/doc/cordon/copyright; do
  grep -qx "$f" /fresh-logs/cordon.files || die "the package does not install $f"
done
grep -qx 'License: Apache-2.0' /usr/share/doc/cordon/copyright || die "copyright: no Apache-2.0"
cmp -s /usr/share/cordon/apparmor/cordon /etc/apparmor.d/cordon ||
  die "postinst did not put the AppArmor profile in /etc/apparmor.d on an ABI 4.0 host"
! grep -E '^/usr/(lib|libexec)/cordon/.*(test|fuzz|bench)' /fresh-logs/cordon.files ||
  die "the package holds test files"

# As root and as the user: the demo, a secret outside the workspace, the refusal in the log.
check_as() {
  local who=$1 run=$2 home=$3 log=/fresh-logs/$1.log missing out
  say "as $who: the demo agent under /usr/bin/cordon, in /opt/demo"
  $run sh -c 'cd /opt/demo && cordon run -- python3 tests/demo/agent.py &&
              echo "== cordon diff last ==" && cordon diff last' >"$log" 2>&1 ||
    die "as $who: the demo failed: $(tail -5 "$log")"
  missing=$(/opt/demo/tests/demo/check.sh "$log") || die "as $who: $missing"
  # With a network allowance, cordon-netproxy and the capture plugin (from /usr/libexec/cordon)
  # carry the sandbox's traffic: the connect to 198.51.100.1 reaches the proxy, which refuses it.
  $run sh -c 'cd /opt/demo && cordon run --allow-host example.com:443 -- python3 connect.py' \
    >>"$log" 2>&1 || true
  $run sh -c 'cd /opt/demo && cordon log last' >"/fresh-logs/$who.events" 2>&1 ||
    die "as $who: cordon log last failed: $(tail -3 "/fresh-logs/$who.events")"
  grep -E 'net\.refused +deny .*198\.51\.100\.1' "/fresh-logs/$who.events" >/dev/null ||
    die "as $who: no refusal of 198.51.100.1 in cordon log: $(tail -8 "/fresh-logs/$who.events")"
  out=$($run sh -c "cd /opt/demo && cordon run -- cat $home/secret" 2>&1) &&
    die "as $who: cat $home/secret in the sandbox succeeded: $out"
  case $out in *"'s secret"*) die "as $who: the secret leaked: $out" ;; esac
  echo "$out" >>"$log"
  out=$($run sh -c 'cd /opt/demo && cordon run -- cat /etc/shadow' 2>&1) &&
    die "as $who: cat /etc/shadow in the sandbox succeeded: $out"
  echo "$out" >>"$log"
}
check_as root as_root /root
check_as user as_user /home/newcomer
# The installed bash completion offers the user's own sessions, from the installed cordon.
ids=$(as_user bash -c 'cd && source /usr/share/bash-completion/completions/cordon &&
  COMP_WORDS=(cordon diff "") COMP_CWORD=2 && _cordon && echo "${COMPREPLY[*]}"' 2>&1) ||
  die "bash completion failed: $ids"
newest=$(as_user sh -c 'cd && cordon ls --ids | tail -1')
case " $ids " in *" last "*" $newest "*|*" $newest "*" last "*) ;;
  *) die "bash completion of cordon diff offers '$ids', not last and $newest" ;; esac
# Every session has ended: none of their copy-on-write mounts may be left.
if grep -E ' fuse(\.[a-z-]+)? ' /proc/self/mountinfo > /fresh-logs/mounts.left; then
  cat /home/newcomer/.local/state/cordon/sessions/*/cordon-fs.log > /fresh-logs/user-cordon-fs.log
  die "FUSE mounts left after the sessions ended: $(cat /fresh-logs/mounts.left)"
fi

say "apt-get remove cordon"
as_root apt-get remove -y -qq cordon >>/fresh-logs/apt.log 2>&1 ||
  { tail -20 /fresh-logs/apt.log; die "apt-get remove"; }
state=$(dpkg-query -W -f '${db:Status-Status}' cordon 2>/dev/null || true)
[ -z "$state" ] || [ "$state" = not-installed ] || die "cordon is still $state after apt-get remove"
while read -r f; do
  if [ -e "$f" ] && ! grep -qx -- "$f" /fresh-logs/paths.before; then
    die "apt-get remove left $f"
  fi
done < /fresh-logs/cordon.files

# What exists now and did not before, or changed since: only the session records, the apt and
# dpkg bookkeeping, and the files of the packages apt-get pulled in for cordon (fuse3, libraries).
# Also the users' own cache of compiled seccomp filters (no package removes files in a home) and
# cordon's runtime directories in /run (a tmpfs: gone at the next boot).
dpkg-query -W -f '${Package}\n' | sort > /fresh-logs/packages.after
comm -13 /fresh-logs/packages.before /fresh-logs/packages.after > /fresh-logs/packages.new
: > /fresh-logs/deps.files
# dpkg names files by the paths in the package (/bin/fusermount3); on a merged-/usr root find
# sees them under /usr.
while read -r p; do dpkg -L "$p"; done < /fresh-logs/packages.new |
  sed -E 'p; s#^/(bin|sbin|lib|lib64)/#/usr/\1/#' > /fresh-logs/deps.files
snapshot > /fresh-logs/paths.after
{
  comm -13 /fresh-logs/paths.before /fresh-logs/paths.after
  find / \( -path /proc -o -path /sys -o -path /dev -o -path /fresh-logs -o -path /opt \
    -o -path /var/cache/apt \) -prune -o ! -type d -newer /fresh-logs/stamp -print 2>>/fresh-logs/find.err
} | sort -u | grep -vxF -f /fresh-logs/deps.files |
  grep -vE '^/var/lib/cordon(/|$)|^/home/newcomer/\.local(/state(/cordon(/.*)?)?)?$' |
  grep -vE '^/home/newcomer/\.cache(/cordon(/seccomp-[0-9a-f]+\.bpf)?)?$|^/root/\.cache(/cordon(/seccomp-[0-9a-f]+\.bpf)?)?$' |
  grep -vE '^/run/cordon(-shim)?(/|$)' |
  grep -vE '^/var/lib/(dpkg|apt)/|^/var/log/(apt/|dpkg\.log|alternatives\.log)|^/var/cache/' |
  grep -vE '^/etc/ld\.so\.cache$' > /fresh-logs/left || true
[ ! -s /fresh-logs/left ] || die "left behind after apt-get remove: $(head -20 /fresh-logs/left)"
[ ! -s /fresh-logs/find.err ] || die "find could not read: $(head -5 /fresh-logs/find.err)"
[ -d /var/lib/cordon/sessions ] && [ -d /home/newcomer/.local/state/cordon/sessions ] ||
  die "the session records are gone (they must stay)"
say "apt-get remove left only the session records and cordon's dependencies"
