#!/bin/bash
# bench/fs/ab_read.sh — A/B of cordon-fs's /dev/fuse read strategies (CORDON_FS_DEV_READ) on the
# request-bound workloads: untar of 20k small files, create+delete of 10k files, and the daemon's
# CPU time while the view sits idle.
#
#   VARIANTS="block spin spin:20" RUNS=5 bench/fs/ab_read.sh BUILD_DIR      (root)
#
# A variant is a CORDON_FS_DEV_READ value, optionally with "+pin0"/"+pin1" (daemon and workload
# both on that CPU, taskset) or "+dpin0"/"+dpin1" (only the daemon pinned). Variants are
# interleaved RUNS times, each on a fresh backing filesystem (BACKING=ext4, the default: a loop
# ext4 whose image is on /dev/shm, as in run.sh; or BACKING=tmpfs); medians are printed.
# Idle CPU = the daemon's utime+stime (clock ticks) over IDLE_SECONDS of a mounted, unused view.
set -euo pipefail

BUILD=${1:-build}
CORDON_FS=$(readlink -f "$BUILD/fusefs/cordon-fs")
[ -x "$CORDON_FS" ] || { echo "no cordon-fs at $BUILD/fusefs/cordon-fs" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
BACKING=${BACKING:-ext4}
IDLE_SECONDS=${IDLE_SECONDS:-5}
read -r -a VARIANTS <<< "${VARIANTS:-block spin}"

S=$(mktemp -d /dev/shm/cordon-ab-XXXXXX)
MNT=$S/mnt FS=$S/fs DAEMON=
cleanup() {
  umount -l "$MNT" 2>/dev/null || true
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null || true
  umount "$FS" 2>/dev/null || umount -l "$FS" 2>/dev/null || true
  rm -rf "$S"
}
trap cleanup EXIT
mkdir -p "$MNT" "$FS" "$S/gen"
echo '{"filesystem": {"deny": [], "protect": [], "quota": {"bytes": 0, "inodes": 0}}}' > "$S/policy.json"
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
tar cf "$S/small.tar" -C "$S/gen" . && rm -rf "$S/gen"

fresh_fs() {
  if mountpoint -q "$FS"; then umount "$FS"; fi
  if [ "$BACKING" = ext4 ]; then
    rm -f "$S/fs.img"; truncate -s 2G "$S/fs.img"; mkfs.ext4 -q -F "$S/fs.img"
    mount -o loop "$S/fs.img" "$FS"
  else
    mount -t tmpfs -o size=2G tmpfs "$FS"
  fi
  mkdir -p "$FS/lower" "$FS/upper"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
now() { date +%s.%N; }

declare -A V  # variant,metric,run -> value
for run in $(seq 1 "${RUNS:-3}"); do
  for v in "${VARIANTS[@]}"; do
    strategy=${v%%+*} pin=; [ "$v" != "$strategy" ] && pin=${v#*+}
    wrap=() dwrap=()
    case $pin in
      pin[01]) wrap=(taskset -c "${pin#pin}"); dwrap=(taskset -c "${pin#pin}") ;;
      dpin[01]) dwrap=(taskset -c "${pin#dpin}") ;;
      "") ;;
      *) echo "unknown pin '$pin'" >&2; exit 1 ;;
    esac
    fresh_fs
    CORDON_FS_DEV_READ=$strategy CORDON_FS_DEV_READ_STATS=1 "${dwrap[@]}" "$CORDON_FS" \
      --lower "$FS/lower" --upper "$FS/upper" --mountpoint "$MNT" --policy "$S/policy.json" \
      --ready-fd 8 8> "$S/ready" 2> "$S/daemon.err" & DAEMON=$!
    for _ in $(seq 1 100); do [ -s "$S/ready" ] && break; sleep 0.05; done
    [ -s "$S/ready" ] || { echo "cordon-fs did not mount" >&2; cat "$S/daemon.err" >&2; exit 1; }
    load=$(cut -d' ' -f1 /proc/loadavg)
    c0=$(cpu_ticks "$DAEMON"); t0=$(now)
    "${wrap[@]}" tar xf "$S/small.tar" -C "$MNT"
    t1=$(now); c1=$(cpu_ticks "$DAEMON")
    "${wrap[@]}" python3 - "$MNT" <<'PY'
import os, sys
d = os.path.join(sys.argv[1], "cd"); os.mkdir(d)
for i in range(10000):
    open(os.path.join(d, "x%05d" % i), "w").close()
for i in range(10000):
    os.unlink(os.path.join(d, "x%05d" % i))
os.rmdir(d)
PY
    t2=$(now)
    sleep 1  # let the last spin end and background requests drain
    i0=$(cpu_ticks "$DAEMON"); sleep "$IDLE_SECONDS"; i1=$(cpu_ticks "$DAEMON")
    umount "$MNT"; wait "$DAEMON" || true; DAEMON=
    V[$v,untar,$run]=$(echo "$t1 - $t0" | bc)
    V[$v,create_delete,$run]=$(echo "$t2 - $t1" | bc)
    V[$v,untar_cpu,$run]=$(echo "($c1 - $c0) / $(getconf CLK_TCK)" | bc -l)
    V[$v,idle_ticks,$run]=$((i1 - i0))
    printf 'run %d %-16s load %-5s untar %6.3fs (daemon cpu %5.2fs)  create+delete %6.3fs  idle %d ticks/%ss  %s\n' \
      "$run" "$v" "$load" "${V[$v,untar,$run]}" "${V[$v,untar_cpu,$run]}" "${V[$v,create_delete,$run]}" \
      "${V[$v,idle_ticks,$run]}" "$IDLE_SECONDS" "$(grep -o 'reads.*' "$S/daemon.err" || true)"
  done
done
if mountpoint -q "$FS"; then umount "$FS"; fi

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "medians of ${RUNS:-3} (backing $BACKING, load now $(cut -d' ' -f1-3 /proc/loadavg)):"
printf '%-16s %10s %14s %14s %12s\n' variant untar untar_cpu create_delete idle_ticks
for v in "${VARIANTS[@]}"; do
  row=()
  for m in untar untar_cpu create_delete idle_ticks; do
    vals=(); for run in $(seq 1 "${RUNS:-3}"); do vals+=("${V[$v,$m,$run]}"); done
    row+=("$(median "${vals[@]}")")
  done
  printf '%-16s %9.3fs %13.2fs %13.3fs %12s\n' "$v" "${row[@]}"
done
