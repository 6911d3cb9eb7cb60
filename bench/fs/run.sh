#!/bin/bash
# bench/fs/run.sh — cordon-fs against a native tmpfs directory, kernel overlayfs and
# fuse-overlayfs, on the same workloads, printing seconds and ratios to native.
#
#   bench/fs/run.sh [BUILD_DIR]        (root; BUILD_DIR defaults to build/, needs fusefs/cordon-fs)
#   RUNS=3 bench/fs/run.sh BUILD_DIR   (the modes interleaved 3 times; the best time of each is kept,
#                                        which tames a busy machine)
#
# All scratch lives on tmpfs (/dev/shm), never the root ext4 (whose creates crawl after mass
# deletes). Workloads: untar ~20k small files, git status on ~10k files (first run after mount),
# find/stat storm (first run after mount), create+delete 10k files, sequential 1 GiB write, then
# read after a remount (the kernel's page cache of the view dropped).
set -euo pipefail

BUILD=${1:-build}
CORDON_FS=$(readlink -f "$BUILD/fusefs/cordon-fs")
[ -x "$CORDON_FS" ] || { echo "no cordon-fs at $BUILD/fusefs/cordon-fs: build it first (ninja -C $BUILD cordon-fs)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (kernel overlayfs needs it)" >&2; exit 1; }
command -v fuse-overlayfs >/dev/null || { echo "apt-get install fuse-overlayfs" >&2; exit 1; }

S=$(mktemp -d /dev/shm/cordon-bench-XXXXXX)
MNT=$S/mnt
DAEMON=
cleanup() {
  umount -l "$MNT" 2>/dev/null || true
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null || true
  rm -rf "$S"
}
trap cleanup EXIT
mkdir -p "$MNT"
echo '{"filesystem": {"deny": [], "protect": [], "quota": {"bytes": 0, "inodes": 0}}}' > "$S/policy.json"

# Inputs: a tarball of 20k small files, and a git repository of 10k files for the lower layer.
echo "preparing inputs in $S ..." >&2
mkdir -p "$S/gen"
python3 - "$S/gen" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(200):
    p = os.path.join(root, "d%03d" % d)
    os.mkdir(p)
    for f in range(100):
        with open(os.path.join(p, "f%03d.txt" % f), "w") as fh:
            fh.write("file %d/%d\n" % (d, f) * 8)
PY
tar cf "$S/small.tar" -C "$S/gen" .
rm -rf "$S/gen"
mkdir -p "$S/repo"
tar xf "$S/small.tar" -C "$S/repo" ./d0{0,1,2,3,4}{0,1,2,3,4,5,6,7,8,9}  # 50 dirs x 100 = 5k
tar xf "$S/small.tar" -C "$S/repo" ./d1{0,1,2,3,4}{0,1,2,3,4,5,6,7,8,9}  # another 5k
git -C "$S/repo" init -q -b main
git -C "$S/repo" add -A
git -C "$S/repo" -c user.name=b -c user.email=b@b commit -qm init

now() { date +%s.%N; }
mount_view() {  # mode lower
  local mode=$1 lower=$2
  rm -rf "$S/upper" "$S/work"; mkdir -p "$S/upper" "$S/work"
  case $mode in
    native) mount --bind "$lower" "$MNT" ;;
    overlay) mount -t overlay overlay -o "lowerdir=$lower,upperdir=$S/upper,workdir=$S/work" "$MNT" ;;
    fuse-overlayfs) fuse-overlayfs -o "lowerdir=$lower,upperdir=$S/upper,workdir=$S/work" "$MNT" ;;
    cordon-fs)
      "$CORDON_FS" --lower "$lower" --upper "$S/upper" --mountpoint "$MNT" --policy "$S/policy.json" \
        --ready-fd 8 8> "$S/ready" & DAEMON=$!
      for _ in $(seq 1 100); do [ -s "$S/ready" ] && break; sleep 0.05; done
      rm -f "$S/ready" ;;
  esac
}
unmount_view() {
  umount "$MNT" 2>/dev/null || umount -l "$MNT"
  if [ -n "$DAEMON" ]; then wait "$DAEMON" 2>/dev/null || true; DAEMON=; fi
}
# "native" writes into a plain tmpfs directory (bind-mounted so every mode uses the same path).
fresh_lower() { rm -rf "$S/lower"; mkdir -p "$S/lower"; }

declare -A T
run_mode() {
  local mode=$1 t0 t1
  # 1. untar 20k files into an empty workspace.
  fresh_lower; mount_view "$mode" "$S/lower"
  t0=$(now); tar xf "$S/small.tar" -C "$MNT"; t1=$(now)
  T[$mode,untar]=$(echo "$t1 - $t0" | bc)
  # 2. create + delete 10k files.
  t0=$(now)
  python3 - "$MNT" <<'PY'
import os, sys
d = os.path.join(sys.argv[1], "cd"); os.mkdir(d)
for i in range(10000):
    open(os.path.join(d, "x%05d" % i), "w").close()
for i in range(10000):
    os.unlink(os.path.join(d, "x%05d" % i))
os.rmdir(d)
PY
  t1=$(now); T[$mode,create_delete]=$(echo "$t1 - $t0" | bc)
  unmount_view
  # 3. find/stat storm and git status on the 10k-file repository as the lower layer.
  rm -rf "$S/lower"; cp -a "$S/repo" "$S/lower"
  mount_view "$mode" "$S/lower"
  t0=$(now); find "$MNT" -printf '%s %m\n' > /dev/null; t1=$(now)
  T[$mode,find]=$(echo "$t1 - $t0" | bc)
  unmount_view; mount_view "$mode" "$S/lower"
  t0=$(now); git -C "$MNT" status --porcelain > /dev/null; t1=$(now)
  T[$mode,git_status]=$(echo "$t1 - $t0" | bc)
  unmount_view
  # 4. sequential 1 GiB write, then read after a remount.
  fresh_lower; mount_view "$mode" "$S/lower"
  t0=$(now); dd if=/dev/zero of="$MNT/big" bs=1M count=1024 conv=fsync status=none; t1=$(now)
  T[$mode,seq_write]=$(echo "$t1 - $t0" | bc)
  unmount_view
  if [ "$mode" = native ]; then cp "$S/lower/big" /dev/null; fi
  # The written file is in the upper layer (or lower for native); read it through a new mount.
  if [ "$mode" != native ]; then
    rm -rf "$S/lower"; mkdir -p "$S/lower"; mv "$S/upper/big" "$S/lower/big"
  fi
  mount_view "$mode" "$S/lower"
  t0=$(now); dd if="$MNT/big" of=/dev/null bs=1M status=none; t1=$(now)
  T[$mode,seq_read]=$(echo "$t1 - $t0" | bc)
  unmount_view
  rm -rf "$S/lower" "$S/upper"
}

MODES=(native overlay fuse-overlayfs cordon-fs)
WORKLOADS=(untar create_delete find git_status seq_write seq_read)
declare -A BEST
for run in $(seq 1 "${RUNS:-1}"); do
  for m in "${MODES[@]}"; do
    echo "run $run: $m ..." >&2
    run_mode "$m"
    for w in "${WORKLOADS[@]}"; do
      if [ -z "${BEST[$m,$w]:-}" ] || [ "$(echo "${T[$m,$w]} < ${BEST[$m,$w]}" | bc)" = 1 ]; then
        BEST[$m,$w]=${T[$m,$w]}
      fi
    done
  done
done

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
