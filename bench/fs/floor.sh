#!/bin/bash
# bench/fs/floor.sh — how close to native any FUSE filesystem can get on the metadata workloads
# cordon-fs misses (untar 20k files, create+delete 10k, cold git status on 10k files), measured in
# one run:
#
#   native      tar/python on a fresh ext4 (1x)
#   fuse floor  cordon-bench-ramfs (ram_fs.cc): a FUSE filesystem that speaks to the kernel as
#               cordon-fs does (same mount options, INIT flags, timeouts, io_uring transport,
#               passthrough writes) but answers every request from memory, with no host work
#   floor+host  the same, plus the host work any filesystem that keeps the files on the host must
#               do (ram_fs.cc --host): each file and directory created, chmod/chown/utimens'ed,
#               unlinked on the same ext4, each file's own fd its passthrough backing
#   cordon-fs   the real thing, upper layer on the same fresh ext4
# and for git status, whose tree is the lower layer: native, floor+lower (ram_fs.cc --lower: a
# read-only view doing one host fstatat per LOOKUP, as any view of a host tree must) and cordon-fs,
# each cold (sync, drop_caches, fresh mount) and interleaved.
#
# Each also "pinned" (the workload under `taskset -c 0`): the scheduler otherwise moves the
# program to the idle vCPU at most request replies, which pinning shows the cost of. Pinning is
# a measurement only: cordon never pins the programs it runs.
#
#   bench/fs/floor.sh [BUILD_DIR] [RUNS]   (root; BUILD_DIR defaults to build/; RUNS 3: the modes
#                                           interleaved RUNS times, best kept, every run printed)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BUILD=${1:-build}
RUNS=${2:-3}
CORDON_FS=$(readlink -f "$BUILD/fusefs/cordon-fs")
RAMFS=$(readlink -f "$BUILD/bench/fs/cordon-bench-ramfs")
for b in "$CORDON_FS" "$RAMFS"; do
  [ -x "$b" ] || { echo "missing $b: build it first (ninja -C $BUILD cordon-fs cordon-bench-ramfs)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (loop mounts, FUSE passthrough and enable_uring need it)" >&2; exit 1; }
[[ "$RUNS" =~ ^[1-9][0-9]?$ ]] || { echo "RUNS must be 1-99, not '$RUNS'" >&2; exit 1; }

S=$(mktemp -d /dev/shm/cordon-floor-XXXXXX)
MNT=$S/mnt
FS=$S/fs
DAEMON=
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_WAS=$(cat "$URING_PARAM" 2>/dev/null || true)
cleanup() {
  umount -l "$MNT" 2>/dev/null || true
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null || true
  umount "$FS" 2>/dev/null || umount -l "$FS" 2>/dev/null || true
  rm -rf "$S"
  [ -n "$URING_WAS" ] && echo "$URING_WAS" > "$URING_PARAM" 2>/dev/null || true
}
trap cleanup EXIT
[ -n "$URING_WAS" ] && echo Y > "$URING_PARAM"
mkdir -p "$MNT" "$FS"
echo '{"filesystem": {"deny": [], "protect": [], "quota": {"bytes": 0, "inodes": 0}}}' > "$S/policy.json"
make_small_tar "$S"
make_repo_tree "$S/small.tar" "$S/repo"

fresh_fs() {
  for _ in $(seq 1 100); do mountpoint -q "$FS" || break; umount "$FS" 2>/dev/null || sleep 0.1; done
  rm -f "$S/fs.img"; truncate -s 4G "$S/fs.img"; mkfs.ext4 -q -F "$S/fs.img"; mount -o loop "$S/fs.img" "$FS"
}
mount_view() {
  case $1 in
    native) mkdir -p "$FS/native"; mount --bind "$FS/native" "$MNT" ;;
    floor) "$RAMFS" "$MNT" --backing "$FS/backing" 2>> "$S/ramfs.log" & DAEMON=$! ;;
    floor+lower) "$RAMFS" "$MNT" --backing "$S/backing" --lower "$FS/repo" 2>> "$S/ramfs.log" & DAEMON=$! ;;
    native-repo) mount --bind "$FS/repo" "$MNT" ;;
    cordon-fs-repo)
      rm -rf "$FS/upper"; mkdir -p "$FS/upper"
      "$CORDON_FS" --lower "$FS/repo" --upper "$FS/upper" --mountpoint "$MNT" --policy "$S/policy.json" \
        2>> "$S/cordon-fs.log" & DAEMON=$! ;;
    floor+host) mkdir -p "$FS/host"
      "$RAMFS" "$MNT" --backing "$FS/backing" --host "$FS/host" 2>> "$S/ramfs.log" & DAEMON=$! ;;
    cordon-fs)
      mkdir -p "$FS/lower" "$FS/upper"
      "$CORDON_FS" --lower "$FS/lower" --upper "$FS/upper" --mountpoint "$MNT" --policy "$S/policy.json" \
        2>> "$S/cordon-fs.log" & DAEMON=$! ;;
  esac
  for _ in $(seq 1 100); do mountpoint -q "$MNT" && return 0; sleep 0.05; done
  echo "$1 did not mount" >&2; exit 1
}
unmount_view() {
  umount "$MNT" 2>/dev/null || umount -l "$MNT"
  if [ -n "$DAEMON" ]; then wait "$DAEMON" 2>/dev/null || true; DAEMON=; fi
}
now() { date +%s.%N; }

declare -A BEST
MODES=(native floor floor+host cordon-fs)
printf '%-11s %-8s %4s %10s %14s\n' mode pinned run untar_s create_delete_s
for run in $(seq 1 "$RUNS"); do
  for mode in "${MODES[@]}"; do
    for pin in no yes; do
      P=(); [ $pin = yes ] && P=(taskset -c 0)
      fresh_fs; mount_view "$mode"
      t0=$(now); "${P[@]}" tar xf "$S/small.tar" -C "$MNT"; t1=$(now)
      untar=$(echo "$t1 - $t0" | bc)
      t0=$(now)
      create_delete_10k "$MNT" "${P[@]}"
      t1=$(now); cd_s=$(echo "$t1 - $t0" | bc)
      # untar wrote 20k files: checked, so no mode is timed on a workload it did not do
      n=$(find "$MNT" -type f | wc -l)
      [ "$n" = 20000 ] || { echo "$mode: $n files after untar, not 20000" >&2; exit 1; }
      unmount_view
      printf '%-11s %-8s %4s %10.3f %14.3f\n' "$mode" "$pin" "$run" "$untar" "$cd_s"
      for w in untar cd; do
        v=$([ $w = untar ] && echo "$untar" || echo "$cd_s")
        k="$mode,$pin,$w"
        if [ -z "${BEST[$k]:-}" ] || (( $(echo "$v < ${BEST[$k]}" | bc) )); then BEST[$k]=$v; fi
      done
    done
  done
done
echo
echo "best of $RUNS, ratio to native unpinned (and to native pinned, for pinned rows):"
printf '%-11s %-8s %16s %22s\n' mode pinned untar create+delete
for mode in "${MODES[@]}"; do
  for pin in no yes; do
    printf '%-11s %-8s' "$mode" "$pin"
    for w in untar cd; do
      v=${BEST[$mode,$pin,$w]}; base=${BEST[native,$pin,$w]}
      printf ' %9.3f s (%4.1fx)' "$v" "$(echo "$v / $base" | bc -l)"
    done
    echo
  done
done

# Cold git status: one ext4 holding the repository, every mode cold and interleaved.
fresh_fs
cp -a "$S/repo" "$FS/repo"
git_commit_all "$FS/repo"
GS_MODES=(native-repo floor+lower cordon-fs-repo)
declare -A GS
echo
printf '%-15s %4s %12s\n' mode run git_status_s
for run in $(seq 1 "$RUNS"); do
  for mode in "${GS_MODES[@]}"; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    mount_view "$mode"
    t0=$(now); out=$(git -C "$MNT" status --porcelain); t1=$(now)
    [ -z "$out" ] || { echo "$mode: git status found changes: $out" | head -5 >&2; exit 1; }
    unmount_view
    v=$(echo "$t1 - $t0" | bc)
    printf '%-15s %4s %12.3f\n' "$mode" "$run" "$v"
    if [ -z "${GS[$mode]:-}" ] || (( $(echo "$v < ${GS[$mode]}" | bc) )); then GS[$mode]=$v; fi
  done
done
echo
echo "git status, cold, best of $RUNS:"
for mode in "${GS_MODES[@]}"; do
  printf '%-15s %7.3f s (%4.1fx)\n' "$mode" "${GS[$mode]}" "$(echo "${GS[$mode]} / ${GS[native-repo]}" | bc -l)"
done
