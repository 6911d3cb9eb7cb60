#!/usr/bin/env bash
# bench/proxy/bulk_ab.sh BIN_A BIN_B [ROUNDS]: interleaved A/B of two cordon-netproxy binaries on
# the transparent path's bulk throughput (root only): curl inside a network namespace fetches a
# 1 GiB file from nginx on loopback through the proxy (one namespace per binary, set up as run.sh
# does with transparent_netns.py). Each round measures A, B, B, A; next to each proxied download it
# measures direct nginx and the bare splice relay (relay_ceiling.c, compiled here, listening inside
# namespace A: the same client-in-namespace, upstream-on-host shape, no policy). Prints MiB/s,
# ratios to the direct run next to it, CPU seconds per GiB of the proxy or relay ("own",
# /proc/PID/schedstat) and of the whole download ("all": nginx's worker + proxy or relay + curl;
# the kernel's TCP work lands on whichever of them runs it, so only the sum is steady), and the
# load; then medians.
# RELAY_OPTS in the environment adds relay_ceiling options (e.g. "-w 0 -p 65536").
# Take the shared benchmark lock and bound the time yourself:
#   flock /tmp/cordon-bench.lock timeout 1200 bench/proxy/bulk_ab.sh A B 3
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 2 || ! -x $1 || ! -x $2 || $(id -u) -ne 0 ]]; then
  echo "usage (root): $0 BIN_A BIN_B [ROUNDS]" >&2
  exit 2
fi
bins=("$(realpath "$1")" "$(realpath "$2")")
rounds=${3:-3}
source "$HERE/lib.sh"
bench_init bulk

start_nginx_and_policy "$work"
truncate -s 1G "$work/www/big.bin"
start_ab_proxies "cordon-bulk-$$"
cc -O2 -Wall -Wextra -Werror -o "$work/relay_ceiling" "$HERE/relay_ceiling.c"
# shellcheck disable=SC2086  # RELAY_OPTS: extra relay_ceiling options, word-split on purpose
"$work/relay_ceiling" ${RELAY_OPTS:-} -n "/run/netns/${nss[0]}" 0 127.0.0.1 "$np" > "$work/relay.addr" &
pids+=($!)
relay_pid=$!
sleep 1
relay_addr=$(head -1 "$work/relay.addr")
collect_ab_proxies
cpu_ns() { cut -d' ' -f1 "/proc/$1/schedstat"; }
# Times it went to sleep (voluntary context switches): each one costs a wakeup, often across CPUs.
sleeps() { awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$1/status"; }
nginx_worker=$(pgrep -P "$(cat "$work/nginx.pid")" | head -1)
# One 1 GiB download, bounded in time; prints bytes/s and curl's CPU seconds.
fetch() {  # $1 = "direct", "relay" or a namespace index
  local ns=() url
  case $1 in
    direct) url="http://127.0.0.1:$np/big.bin" ;;
    relay) ns=(ip netns exec "${nss[0]}"); url="http://$relay_addr/big.bin" ;;
    *) ns=(ip netns exec "${nss[$1]}"); url="http://bench.test:$np/big.bin" ;;
  esac
  { "${ns[@]}" /usr/bin/time -f ' %U %S' curl -sf --max-time 120 -o /dev/null \
      -w '%{speed_download}' "$url"; } 2>&1 | awk '{printf "%s %.2f\n", $1, $2 + $3}' |
    grep . || { echo "$0: download ($1) failed" >&2; exit 1; }
}
# Runs fetch $1 and sets: speed (bytes/s), own (CPU s/GiB of the relaying process $2, if any),
# nsleep (how often that process went to sleep during the download),
# all (CPU s/GiB of nginx + relaying process + curl: what the machine spent on the download).
measure() {
  local c0 n0 s0 c1 n1 s1 curl_s
  c0=$( [[ -n ${2:-} ]] && cpu_ns "$2" || echo 0); n0=$(cpu_ns "$nginx_worker")
  s0=$( [[ -n ${2:-} ]] && sleeps "$2" || echo 0)
  read -r speed curl_s < <(fetch "$1") || true
  [[ -n ${curl_s:-} ]] || { echo "$0: download ($1) failed" >&2; exit 1; }
  c1=$( [[ -n ${2:-} ]] && cpu_ns "$2" || echo 0); n1=$(cpu_ns "$nginx_worker")
  s1=$( [[ -n ${2:-} ]] && sleeps "$2" || echo 0)
  own=$(awk -v c="$((c1 - c0))" 'BEGIN {printf "%.3f", c / 1e9}')
  nsleep=$((s1 - s0))
  all=$(awk -v c="$((c1 - c0 + n1 - n0))" -v u="$curl_s" 'BEGIN {printf "%.3f", c / 1e9 + u}')
}
mib() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1048576}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
load() { cut -d' ' -f1 /proc/loadavg; }
names=(A B)
: > "$work/results"
for ((r = 1; r <= rounds; r++)); do
  for i in 0 1 1 0; do
    measure direct; d=$speed; d_all=$all
    measure relay "$relay_pid"; b=$speed; b_own=$own; b_all=$all; b_sleeps=$nsleep
    measure "$i" "${ppid[$i]}"; t=$speed; t_own=$own; t_all=$all; t_sleeps=$nsleep
    echo "round $r ${names[$i]} direct=$(mib "$d") (all ${d_all}s/GiB)" \
      "relay=$(mib "$b") ($(ratio "$b" "$d")x, own ${b_own} all ${b_all}s/GiB, $b_sleeps sleeps)" \
      "proxy=$(mib "$t") ($(ratio "$t" "$d")x, own ${t_own} all ${t_all}s/GiB, $t_sleeps sleeps)" \
      "proxy/relay=$(ratio "$t" "$b") load=$(load)"
    {
      echo "${names[$i]} MiB/s $(mib "$t")"
      echo "${names[$i]} ratio $(ratio "$t" "$d")"
      echo "${names[$i]} cpu_s/GiB $t_own"
      echo "${names[$i]} all_s/GiB $t_all"
      echo "${names[$i]} vs_relay $(ratio "$t" "$b")"
      echo "${names[$i]} sleeps/GiB $t_sleeps"
      echo "relay sleeps/GiB $b_sleeps"
      echo "relay MiB/s $(mib "$b")"
      echo "relay ratio $(ratio "$b" "$d")"
      echo "relay cpu_s/GiB $b_own"
      echo "relay all_s/GiB $b_all"
      echo "direct MiB/s $(mib "$d")"
      echo "direct all_s/GiB $d_all"
    } >> "$work/results"
  done
done
echo "medians (A=${bins[0]}, B=${bins[1]}):"
for n in A B relay direct; do
  for m in MiB/s ratio cpu_s/GiB all_s/GiB sleeps/GiB vs_relay; do
    awk -v n="$n" -v m="$m" '$1 == n && $2 == m {print $3}' "$work/results" | sort -g |
      awk -v n="$n" -v m="$m" '{v[NR] = $1} END {if (NR) printf "  %-6s %-10s median %s (n=%d, min %s, max %s)\n", n, m, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), NR, v[1], v[NR]}'
  done
done
