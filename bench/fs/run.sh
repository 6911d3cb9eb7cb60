#!/bin/bash
# bench/fs/run.sh — cordon-fs against a native directory, kernel overlayfs and fuse-overlayfs, on
# the same workloads, printing seconds and ratios to native (issue 4's "native ext4 = 1x").
#
#   bench/fs/run.sh [BUILD_DIR]        (root; BUILD_DIR defaults to build/, needs fusefs/cordon-fs)
#   RUNS=3 bench/fs/run.sh BUILD_DIR   (the modes interleaved 3 times; the best time of each is kept,
#                                        which tames a busy machine; every run's times are printed)
#   BACKING=tmpfs bench/fs/run.sh ...  (the old setup: everything on a plain tmpfs directory)
#   MODES="native cordon-fs" ...      (a subset; native first, as the 1x baseline)
#
# cordon-fs runs twice: "cordon-fs" over io_uring (FUSE_OVER_IO_URING, Linux 6.14+: the script sets
# /sys/module/fuse/parameters/enable_uring=Y for its mounts and puts the old value back at exit),
# and "cordon-fs-dev" forced onto the classic /dev/fuse read/write transport (--no-io-uring).
#
# BACKING=ext4 (default): every mode gets a FRESH ext4 (mkfs.ext4 with default options, so with a
# journal) on a loop device whose image file lives on /dev/shm, and everything a mode touches is on
# it: the native directory, the lower layer, and the upper (and work) layers of overlayfs,
# fuse-overlayfs and cordon-fs. So each mode writes to the same kind of filesystem, and none
# inherits the after-delete state of another. The image on tmpfs keeps the "disk" a memory copy,
# never the root ext4 (no journal: its creates crawl after mass deletes).
#
# Workloads: untar ~20k small files, create+delete 10k files, 50k lstats of missing names (the
# cost of one FUSE request round trip, bench/fs/lookup_floor.c), cold find/stat storm and cold git
# status on a ~10k-file repository (the lower layer, its index fresh), sequential 1 GiB write
# (fsync'd), cold read of it.
# "Cold" = for every mode alike: view unmounted, sync, drop_caches (page cache, dentries and
# inodes of the ext4 below and of the view), view mounted again, then timed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BUILD=${1:-build}
BACKING=${BACKING:-ext4}
IMAGE_SIZE=${IMAGE_SIZE:-4G}
CORDON_FS=$(readlink -f "$BUILD/fusefs/cordon-fs")
[ -x "$CORDON_FS" ] || { echo "no cordon-fs at $BUILD/fusefs/cordon-fs: build it first (ninja -C $BUILD cordon-fs)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (kernel overlayfs, loop mounts and drop_caches need it)" >&2; exit 1; }
command -v fuse-overlayfs >/dev/null || { echo "apt-get install fuse-overlayfs" >&2; exit 1; }
case $BACKING in
  ext4) command -v mkfs.ext4 >/dev/null || { echo "apt-get install e2fsprogs" >&2; exit 1; } ;;
  tmpfs) ;;
  *) echo "BACKING must be ext4 or tmpfs, not '$BACKING'" >&2; exit 1 ;;
esac

S=$(mktemp -d /dev/shm/cordon-bench-XXXXXX)  # inputs, the image, the mountpoints: all tmpfs
MNT=$S/mnt       # the view every mode is measured through
FS=$S/fs         # the filesystem holding native dir / lower / upper / work
DAEMON=
cleanup() {
  umount -l "$MNT" 2>/dev/null || true
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null || true
  umount "$FS" 2>/dev/null || umount -l "$FS" 2>/dev/null || true
  rm -rf "$S"
}
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_WAS=$(cat "$URING_PARAM" 2>/dev/null || true)
cleanup_all() { cleanup; [ -n "$URING_WAS" ] && echo "$URING_WAS" > "$URING_PARAM" 2>/dev/null || true; }
trap cleanup_all EXIT
mkdir -p "$MNT" "$FS"
echo '{"filesystem": {"deny": [], "protect": [], "quota": {"bytes": 0, "inodes": 0}}}' > "$S/policy.json"

# Inputs (on tmpfs): a tarball of 20k small files, and a git repository of 10k files that becomes
# the lower layer of the find and git status workloads.
echo "preparing inputs in $S ..." >&2
make_small_tar "$S"
cc -O2 -Wall -Wextra -o "$S/lookup_floor" "$(dirname "$0")/lookup_floor.c"
make_repo_tree "$S/small.tar" "$S/repo"
git_commit_all "$S/repo"

unmount_fs() {
  for _ in $(seq 1 100); do
    mountpoint -q "$FS" || return 0
    umount "$FS" 2>/dev/null && return 0
    sleep 0.1
  done
  umount "$FS"  # still busy after 10 s: say by whom
}
# A fresh backing filesystem for one mode's run.
fresh_fs() {
  if [ "$BACKING" = ext4 ]; then
    unmount_fs
    rm -f "$S/fs.img"
    truncate -s "$IMAGE_SIZE" "$S/fs.img"
    # Default mkfs options. On a regular file mke2fs punches holes instead of zeroing, so the
    # inode tables are born zeroed: no ext4lazyinit thread writing behind the measurements.
    mkfs.ext4 -q -F "$S/fs.img"
    mount -o loop "$S/fs.img" "$FS"
  else
    rm -rf "${FS:?}"/*
  fi
}
describe_fs() {
  if [ "$BACKING" = ext4 ]; then
    fresh_fs; unmount_fs  # described unmounted: no "needs_recovery" in the features
    echo "backing: a fresh ext4 per mode and run: mkfs.ext4 defaults on a $IMAGE_SIZE image on /dev/shm, loop-mounted"
    echo "  $(dumpe2fs -h "$S/fs.img" 2>/dev/null | grep -E '^Filesystem features:' | tr -s ' ')"
    echo "  journal:$(dumpe2fs -h "$S/fs.img" 2>/dev/null | grep -E '^(Total )?[Jj]ournal size:' | tr -s ' ' | cut -d: -f2)"
    mount -o loop "$S/fs.img" "$FS"
    echo "  mounted: $(findmnt -no SOURCE,FSTYPE,OPTIONS "$FS")"
    unmount_fs
  else
    echo "backing: tmpfs directory $FS ($(findmnt -no FSTYPE,OPTIONS -T "$FS" | head -1))"
  fi
}

now() { date +%s.%N; }
mount_view() {  # mode lower
  local mode=$1 lower=$2
  rm -rf "$FS/upper" "$FS/work"; mkdir -p "$FS/upper" "$FS/work"
  case $mode in
    native) mount --bind "$lower" "$MNT" ;;
    overlay) mount -t overlay overlay -o "lowerdir=$lower,upperdir=$FS/upper,workdir=$FS/work" "$MNT" ;;
    fuse-overlayfs)
      # In the foreground (as a child we can wait for): a daemonized one still holds the backing
      # filesystem for a moment after the umount.
      fuse-overlayfs -f -o "lowerdir=$lower,upperdir=$FS/upper,workdir=$FS/work" "$MNT" & DAEMON=$!
      for _ in $(seq 1 100); do mountpoint -q "$MNT" && break; sleep 0.05; done
      mountpoint -q "$MNT" || { echo "fuse-overlayfs did not mount" >&2; exit 1; } ;;
    cordon-fs|cordon-fs-dev)
      local transport=()
      if [ "$mode" = cordon-fs-dev ]; then transport=(--no-io-uring); else
        [ -n "$URING_WAS" ] && echo Y > "$URING_PARAM"
      fi
      "$CORDON_FS" "${transport[@]}" --lower "$lower" --upper "$FS/upper" --mountpoint "$MNT" --policy "$S/policy.json" \
        --ready-fd 8 8> "$S/ready" 2>> "$S/daemon-$mode.log" & DAEMON=$!
      for _ in $(seq 1 100); do [ -s "$S/ready" ] && break; sleep 0.05; done
      [ -s "$S/ready" ] || { echo "cordon-fs did not mount" >&2; exit 1; }
      rm -f "$S/ready" ;;
    *) echo "unknown mode $mode" >&2; exit 1 ;;
  esac
}
unmount_view() {
  umount "$MNT" 2>/dev/null || umount -l "$MNT"
  if [ -n "$DAEMON" ]; then wait "$DAEMON" 2>/dev/null || true; DAEMON=; fi
}
# Cold caches, the same for every mode: nothing of the tree below or of the view is cached.
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# "native" works in a plain directory of the backing filesystem (bind-mounted so every mode uses
# the same path).
fresh_lower() { rm -rf "$FS/lower"; mkdir -p "$FS/lower"; }

declare -A T
run_mode() {
  local mode=$1 t0 t1
  fresh_fs
  # 1. untar 20k files into an empty workspace.
  fresh_lower; mount_view "$mode" "$FS/lower"
  t0=$(now); tar xf "$S/small.tar" -C "$MNT"; t1=$(now)
  T[$mode,untar]=$(echo "$t1 - $t0" | bc)
  # 2. create + delete 10k files.
  t0=$(now)
  create_delete_10k "$MNT"
  t1=$(now); T[$mode,create_delete]=$(echo "$t1 - $t0" | bc)
  # 3. 50k lstats of names that do not exist, the second pass over the same names: natively a
  # cached negative dentry, through FUSE one LOOKUP round trip each (lookup_floor.c says why).
  mkdir "$MNT/lf"
  local _first again
  read -r _first again < <("$S/lookup_floor" "$MNT/lf" 50000)
  T[$mode,lookup_50k]=$(echo "scale=6; $again * 50000 / 1000000" | bc)
  unmount_view
  # 4. cold find/stat storm and cold git status, the 10k-file repository as the lower layer.
  rm -rf "$FS/lower"; cp -a "$S/repo" "$FS/lower"
  # The copy has new inode numbers and ctimes: refresh the index once, natively, so git status
  # through the view compares stat data (the stat storm of a working repository) instead of
  # rehashing all 10k files.
  git -C "$FS/lower" status --porcelain > /dev/null
  cold; mount_view "$mode" "$FS/lower"
  t0=$(now); find "$MNT" -printf '%s %m\n' > /dev/null; t1=$(now)
  T[$mode,find]=$(echo "$t1 - $t0" | bc)
  unmount_view; cold; mount_view "$mode" "$FS/lower"
  t0=$(now); git -C "$MNT" status --porcelain > /dev/null; t1=$(now)
  T[$mode,git_status]=$(echo "$t1 - $t0" | bc)
  unmount_view
  # 5. sequential 1 GiB write (fsync'd), then a cold read of it.
  fresh_lower; mount_view "$mode" "$FS/lower"
  t0=$(now); dd if=/dev/zero of="$MNT/big" bs=1M count=1024 conv=fsync status=none; t1=$(now)
  T[$mode,seq_write]=$(echo "$t1 - $t0" | bc)
  unmount_view
  # The written file is in the upper layer (or the lower for native); read it through a new mount
  # as a lower file (a rename within the backing filesystem).
  if [ "$mode" != native ]; then
    rm -rf "$FS/lower"; mkdir -p "$FS/lower"; mv "$FS/upper/big" "$FS/lower/big"
  fi
  cold; mount_view "$mode" "$FS/lower"
  t0=$(now); dd if="$MNT/big" of=/dev/null bs=1M status=none; t1=$(now)
  T[$mode,seq_read]=$(echo "$t1 - $t0" | bc)
  unmount_view
  rm -rf "$FS/lower" "$FS/upper" "$FS/work"
}

# Which transport each cordon-fs mode really ran on, from the daemon's own start line.
say_transport() {
  local m
  for m in cordon-fs cordon-fs-dev; do
    [ -f "$S/daemon-$m.log" ] || continue
    echo "$m ran over: $(grep -o 'transport: [a-z_/]*[a-z]' "$S/daemon-$m.log" | cut -d' ' -f2 | sort | uniq -c | awk '{printf "%s%s (%d mounts)", (NR > 1 ? ", " : ""), $2, $1}')"
  done
}
read -r -a MODES <<< "${MODES:-native overlay fuse-overlayfs cordon-fs cordon-fs-dev}"
[ "${MODES[0]}" = native ] || { echo "MODES must start with native (the 1x baseline)" >&2; exit 1; }
WORKLOADS=(untar create_delete lookup_50k find git_status seq_write seq_read)
echo "$(date -u +%FT%TZ) kernel $(uname -r), $(nproc) CPUs, RUNS=${RUNS:-1}, cordon-fs: $CORDON_FS"
if [ -z "$URING_WAS" ]; then
  echo "note: $URING_PARAM missing (kernel without FUSE over io_uring): cordon-fs uses /dev/fuse in both modes"
fi
describe_fs
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A BEST
for run in $(seq 1 "${RUNS:-1}"); do
  for m in "${MODES[@]}"; do
    echo "run $run: $m ... (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    run_mode "$m"
    line="run $run $(printf '%-18s' "$m")"
    for w in "${WORKLOADS[@]}"; do
      line+=" $w=${T[$m,$w]}"
      if [ -z "${BEST[$m,$w]:-}" ] || [ "$(echo "${T[$m,$w]} < ${BEST[$m,$w]}" | bc)" = 1 ]; then
        BEST[$m,$w]=${T[$m,$w]}
      fi
    done
    echo "$line"
  done
done
unmount_fs
say_transport
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "best of ${RUNS:-1} (seconds, ratio to native):"
printf '%-14s' workload; for m in "${MODES[@]}"; do printf '%18s' "$m"; done; echo
for w in "${WORKLOADS[@]}"; do
  printf '%-14s' "$w"
  base=${BEST[native,$w]}
  for m in "${MODES[@]}"; do
    v=${BEST[$m,$w]}
    printf '%10.3fs %5.1fx' "$v" "$(echo "$v / $base" | bc -l)"
  done
  echo
done
