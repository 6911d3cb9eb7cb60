#!/usr/bin/env bash
# bench/shim/run.sh [BUILD_DIR]: 1M open/close and 100k loopback connects, without a shim, with a
# bare pass-through LD_PRELOAD, with cordon's shim (events on, collector reading) and with
# proxychains-ng (loopback passed through). Prints per-call times and ratios to the baseline.
# Use a Release build for numbers (the collector is C++; -O0 makes it several times slower).
# Each configuration runs REPS times, interleaved, and the median is reported (2 shared cores).
# Two measures: wall time per call, and the process's own CPU time (user+sys) per call, which is
# the robust one on a loaded machine (wall time then mostly counts preemptions).
set -euo pipefail

BUILD=${1:-${CORDON_BUILD_DIR:-/work/builds/shim}}
OPENS=${OPENS:-1000000}
CONNECTS=${CONNECTS:-100000}
REPS=${REPS:-5}
SHIM=$BUILD/preload_shim/libcordon_preload.so
COLLECTOR=$BUILD/preload_shim/cordon-shim-collector
HERE=$(cd "$(dirname "$0")" && pwd)
for f in "$SHIM" "$COLLECTOR"; do
  [[ -e $f ]] || { echo "missing $f: build targets cordon_preload and cordon-shim-collector" >&2; exit 1; }
done
command -v proxychains4 >/dev/null || { echo "proxychains4 missing (apt-get install proxychains4)" >&2; exit 1; }

# Scratch on tmpfs (the root fs is slow for file churn).
WORK=$(mktemp -d /dev/shm/cordon-bench-shim.XXXXXX)
COLLECTOR_PID=
cleanup() {
  if [[ -n $COLLECTOR_PID ]]; then kill "$COLLECTOR_PID" 2>/dev/null || true; wait "$COLLECTOR_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

gcc -O2 -o "$WORK/bench" "$HERE/bench.c"
gcc -O2 -shared -fPIC -o "$WORK/passthrough.so" "$HERE/passthrough.c" -ldl

cat > "$WORK/proxychains.conf" <<CONF
strict_chain
quiet_mode
localnet 127.0.0.0/255.0.0.0
[ProxyList]
socks5 127.0.0.1 1
CONF

"$COLLECTOR" "$WORK/shim.sock" "$WORK/events.jsonl" bench > "$WORK/collector.out" &
COLLECTOR_PID=$!
for _ in $(seq 100); do [[ -S $WORK/shim.sock ]] && break; sleep 0.05; done

run_config() {  # config what n -> ns/op
  local config=$1 what=$2 n=$3
  case $config in
    none) "$WORK/bench" "$what" "$n" "$WORK/f" ;;
    passthrough) LD_PRELOAD=$WORK/passthrough.so "$WORK/bench" "$what" "$n" "$WORK/f" ;;
    cordon) LD_PRELOAD=$SHIM CORDON_SHIM_SOCK=$WORK/shim.sock "$WORK/bench" "$what" "$n" "$WORK/f" ;;
    # The shim's own work without the collector competing for the CPU: hooks run and build their
    # events, nothing is sent (CORDON_SHIM_SOCK empty disables the channel).
    cordon-nosend) LD_PRELOAD=$SHIM CORDON_SHIM_SOCK= "$WORK/bench" "$what" "$n" "$WORK/f" ;;
    proxychains) proxychains4 -q -f "$WORK/proxychains.conf" "$WORK/bench" "$what" "$n" "$WORK/f" ;;
  esac | awk '{print $3 "/" $4}'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

CONFIGS=(none passthrough cordon cordon-nosend proxychains)
for what in open connect; do
  n=$OPENS; [[ $what == connect ]] && n=$CONNECTS
  declare -A samples=()
  for rep in $(seq "$REPS"); do
    for c in "${CONFIGS[@]}"; do
      samples[$c]+="$(run_config "$c" "$what" "$n") "
    done
  done
  col() { echo "${samples[$1]}" | tr ' ' '\n' | grep . | cut -d/ -f"$2" | median; }
  base_wall=$(col none 1); base_cpu=$(col none 2)
  printf '%-8s n=%-8s %-14s %11s %7s %11s %7s   samples wall/cpu (ns/op)\n' "$what" "$n" config \
    "wall ns/op" ratio "cpu ns/op" ratio
  for c in "${CONFIGS[@]}"; do
    w=$(col "$c" 1); u=$(col "$c" 2)
    printf '%-8s %-10s %-14s %11.1f %7.3f %11.1f %7.3f   %s\n' "$what" "" "$c" "$w" \
      "$(echo "$w / $base_wall" | bc -l)" "$u" "$(echo "$u / $base_cpu" | bc -l)" "${samples[$c]}"
  done
  unset samples
done

kill "$COLLECTOR_PID"; wait "$COLLECTOR_PID" || true; COLLECTOR_PID=
echo "collector: $(tail -1 "$WORK/collector.out")"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo "events.jsonl lines: $(wc -l < "$WORK/events.jsonl")"
