# Shell functions (sourced, bash) that build a fresh Debian 12 root with mmdebstrap and boot into
# it as a machine would: used by tests/fresh-machine.sh and tests/package-test.sh. Callers run
# them as pid 1 of private mount and pid namespaces (`unshare --mount --pid --fork
# --propagation private`), so every mount, the root's tmpfs included, is gone with the namespace
# and the host's disk never sees the root's mass delete.

# fresh_root_make ROOT LOGDIR: a tmpfs at ROOT holding `mmdebstrap --variant=apt bookworm` from
# the machine's own apt sources. Packages the host's apt cache holds are not downloaded again
# (and none are unlinked from it). mmdebstrap's output goes to LOGDIR/mmdebstrap.log.
fresh_root_make() {
  local root=$1 logs=$2
  mkdir -p "$root"
  mount -t tmpfs -o size=12g,mode=0755 fresh-root "$root"
  mmdebstrap --verbose --variant=apt --skip=essential/unlink \
    --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
    --setup-hook='mount --bind /var/cache/apt/archives "$1/var/cache/apt/archives"' \
    --customize-hook='umount "$1/var/cache/apt/archives"' \
    bookworm "$root" >"$logs/mmdebstrap.log" 2>&1 ||
    { cat "$logs/mmdebstrap.log" >&2; return 1; }
}

# fresh_root_enter ROOT LOGDIR: boots into ROOT: a fresh /proc of this pid namespace, /sys as the
# host has it, a fresh /dev as udev makes it on Debian (so /dev/fuse is 0666 there, whatever this
# host chose for its own), tmpfs on /tmp and /run, the apt cache shared with the host, LOGDIR at
# /fresh-logs, then pivot_root. Bind mounts the caller wants inside must be made before.
fresh_root_enter() {
  local root=$1 logs=$2 node i
  mount --bind "$root" "$root"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --make-rslave "$root/sys"
  mount -t tmpfs -o mode=0755,nosuid dev "$root/dev"
  for node in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" "urandom c 1 9" \
              "tty c 5 0" "fuse c 10 229"; do
    set -- $node
    mknod -m 0666 "$root/dev/$1" "$2" "$3" "$4"
  done
  mkdir -p "$root/dev/pts" "$root/dev/shm"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
  ln -s pts/ptmx "$root/dev/ptmx"
  mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
  ln -s /proc/self/fd "$root/dev/fd"
  for i in 0:stdin 1:stdout 2:stderr; do ln -s "/proc/self/fd/${i%%:*}" "$root/dev/${i#*:}"; done
  mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$root/tmp"
  mount -t tmpfs -o mode=0755,nosuid,nodev run "$root/run"
  mount --bind /var/cache/apt/archives "$root/var/cache/apt/archives"
  # /etc/mtab as systemd-tmpfiles makes it at boot (fusermount3 reads it to unmount).
  ln -sfn ../proc/self/mounts "$root/etc/mtab"
  mkdir -p "$root/fresh-logs"
  mount --bind "$logs" "$root/fresh-logs"
  cd "$root"
  mkdir -p .oldroot
  pivot_root . .oldroot
  # The apt variant has no umount (package mount): the host's, run by the host's loader.
  /.oldroot/lib64/ld-linux-x86-64.so.2 \
    --library-path /.oldroot/lib/x86_64-linux-gnu:/.oldroot/usr/lib/x86_64-linux-gnu \
    /.oldroot/usr/bin/umount -l /.oldroot
  rmdir /.oldroot
  cd /
}

# fresh_root_add_user NAME UID: an ordinary user with a private home, made the way useradd would
# (the apt variant has no passwd package).
fresh_root_add_user() {
  local name=$1 uid=$2
  echo "$name:x:$uid:$uid:$name:/home/$name:/bin/bash" >> /etc/passwd
  echo "$name:x:$uid:" >> /etc/group
  mkdir -p "/home/$name" && chown "$uid:$uid" "/home/$name" && chmod 0700 "/home/$name"
}

# The environment a login on the fresh root starts with (for env -i).
FRESH_ROOT_ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
