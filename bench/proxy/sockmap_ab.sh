#!/usr/bin/env bash
# bench/proxy/sockmap_ab.sh [ROUNDS] [PROXY_BIN]: the in-kernel relay ceiling (root only). curl
# inside a network namespace fetches a 1 GiB file from nginx on loopback through: the bare splice
# relay (relay_ceiling.c), the BPF sockmap relay (sockmap_relay.c, one process per variant), and
# cordon-netproxy's transparent path when PROXY_BIN is given (set up as run.sh does); each
# download next to a direct one in the host namespace. The rows' order alternates between rounds.
# Before the timed rounds, every relay must pass a correctness check: a 64 MiB random file whose
# sha256 must match (four at once through each sockmap variant). Prints per download MiB/s, the
# ratio to the direct download next to it, CPU seconds per GiB of the relaying process ("own",
# /proc/PID/schedstat; near 0 for sockmap, whose work runs in softirq and kworkers) and of the
# whole machine ("sys": busy time in /proc/stat, so kworkers and softirqs count; each round first
# waits for a quiet second, but keep the machine otherwise quiet), and medians. Every timed
# download must be exactly 1 GiB.
# SOCKMAP_VARIANTS: "name=options;..." for sockmap_relay (default: "sockmap=").
# RELAY_OPTS: relay_ceiling options.
# Take the shared benchmark lock and bound the time yourself:
#   flock /tmp/cordon-bench.lock timeout 1200 bench/proxy/sockmap_ab.sh 20 \
#     BUILD/netproxy/cordon-netproxy
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3}
proxy_bin=${2:-}
if [[ $(id -u) -ne 0 || ! $rounds =~ ^[0-9]+$ || ( -n $proxy_bin && ! -x $proxy_bin ) ]]; then
  echo "usage (root): $0 [ROUNDS] [PROXY_BIN]" >&2
  exit 2
fi
source "$HERE/lib.sh"
bench_init sockmap

start_nginx_and_policy "$work"
truncate -s 1G "$work/www/big.bin"
head -c 64M /dev/urandom > "$work/www/rand.bin"
want_sum=$(sha256sum < "$work/www/rand.bin")
ns=cordon-sockmap-$$
if [[ -n $proxy_bin ]]; then
  start_transparent_ns "$ns" "$(realpath "$proxy_bin")" "$work/policy.json" "$work/events.jsonl" \
    "$work/tproxy.pid" "$work/tproxy.err"
else
  nss+=("$ns")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
fi
cc -O2 -Wall -Wextra -Werror -o "$work/relay_ceiling" "$HERE/relay_ceiling.c"
cc -O2 -Wall -Wextra -Werror -o "$work/sockmap_relay" "$HERE/sockmap_relay.c"

# rows: name, listen address (inside $ns; empty for cordon) and pid of the relaying process.
names=() addrs=() rpids=()
start_relay() {  # NAME BINARY OPTIONS
  # shellcheck disable=SC2086  # OPTIONS are word-split on purpose
  "$2" $3 -n "/run/netns/$ns" 0 127.0.0.1 "$np" > "$work/$1.addr" 2> "$work/$1.err" &
  pids+=($!)
  names+=("$1") rpids+=($!)
}
start_relay relay "$work/relay_ceiling" "${RELAY_OPTS:-}"
IFS=';' read -ra variants <<< "${SOCKMAP_VARIANTS:-sockmap=}"
for v in "${variants[@]}"; do
  start_relay "${v%%=*}" "$work/sockmap_relay" "${v#*=}"
done
sleep 1
for i in "${!names[@]}"; do
  addrs[i]=$(head -1 "$work/${names[i]}.addr")
  [[ -n ${addrs[i]} ]] ||
    { echo "$0: ${names[i]} did not start: $(cat "$work/${names[i]}.err")" >&2; exit 1; }
done
if [[ -n $proxy_bin ]]; then
  p=$(head -1 "$work/tproxy.pid")
  [[ -n $p ]] || { echo "$0: proxy did not start: $(cat "$work/tproxy.err")" >&2; exit 1; }
  pids+=("$p")
  names+=(cordon) addrs+=("") rpids+=("$p")
fi
url_of() {  # ROW-INDEX FILE
  if [[ -n ${addrs[$1]} ]]; then
    echo "http://${addrs[$1]}/$2"
  else
    echo "http://bench.test:$np/$2"
  fi
}

# Correctness first: the same bytes through every row, and four at once through sockmap.
for i in "${!names[@]}"; do
  n=1
  [[ ${names[i]} == relay || ${names[i]} == cordon ]] || n=4
  cpids=()
  for ((k = 0; k < n; k++)); do
    ip netns exec "$ns" curl -sf --max-time 60 -o "$work/got-$k" "$(url_of "$i" rand.bin)" &
    cpids+=($!)
  done
  wait_ok=1
  for p in "${cpids[@]}"; do wait "$p" || wait_ok=0; done
  for ((k = 0; k < n; k++)); do
    [[ $wait_ok -eq 1 && $(sha256sum < "$work/got-$k") == "$want_sum" ]] ||
      { echo "$0: ${names[i]}: 64 MiB random file corrupted or failed (download $k)" >&2; exit 1; }
    rm -f "$work/got-$k"
  done
  echo "check ${names[i]}: $n x 64 MiB, sha256 ok"
done

busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
tck=$(getconf CLK_TCK)
# Waits (at most QUIET_WAIT seconds, default 180) for a second in which the machine was at most
# 10 % busy, so that a build running next to the benchmark does not land in a round; sets waited.
quiet() {
  local b0 t
  waited=0
  for ((t = 0; t < ${QUIET_WAIT:-180}; t++)); do
    b0=$(busy_ticks)
    sleep 1
    (( ($(busy_ticks) - b0) * 10 <= 2 * tck )) && return 0  # 2 CPUs: 10 % of 2 s
    waited=$((t + 1))
  done
}
cpu_ns() { cut -d' ' -f1 "/proc/$1/schedstat"; }
# One 1 GiB download; prints bytes/s and size.
fetch() {  # ROW-INDEX or "direct"
  local ns_cmd=() url
  if [[ $1 == direct ]]; then
    url="http://127.0.0.1:$np/big.bin"
  else
    ns_cmd=(ip netns exec "$ns")
    url=$(url_of "$1" big.bin)
  fi
  "${ns_cmd[@]}" curl -sf --max-time 120 -o /dev/null \
    -w '%{speed_download} %{size_download}\n' "$url" ||
    { echo "$0: download ($1) failed" >&2; exit 1; }
}
# Sets speed (bytes/s), own and sys (CPU s/GiB).
measure() {  # ROW-INDEX or "direct", PID or ""
  local c0=0 c1=0 b0 b1 size out
  [[ -n $2 ]] && c0=$(cpu_ns "$2")
  b0=$(busy_ticks)
  out=$(fetch "$1")
  b1=$(busy_ticks)
  [[ -n $2 ]] && c1=$(cpu_ns "$2")
  read -r speed size <<< "$out"
  [[ $size == 1073741824 ]] || { echo "$0: download ($1) got $size bytes, not 1 GiB" >&2; exit 1; }
  own=$(awk -v c="$((c1 - c0))" 'BEGIN {printf "%.3f", c / 1e9}')
  sys=$(awk -v t="$((b1 - b0))" -v hz="$tck" 'BEGIN {printf "%.2f", t / hz}')
}
mib() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1048576}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
: > "$work/results"
for ((r = 1; r <= rounds; r++)); do
  order=("${!names[@]}")
  if ((r % 2 == 0)); then
    for ((a = 0, b = ${#order[@]} - 1; a < b; a++, b--)); do
      t=${order[a]} order[a]=${order[b]} order[b]=$t
    done
  fi
  quiet
  line="round $r (waited ${waited}s for quiet):"
  for i in "${order[@]}"; do
    measure direct ""; d=$speed; d_sys=$sys
    measure "$i" "${rpids[i]}"
    line+=" ${names[i]}=$(mib "$speed") ($(ratio "$speed" "$d")x, own $own sys ${sys}s/GiB;"
    line+=" direct $(mib "$d") sys ${d_sys})"
    {
      echo "${names[i]} MiB/s $(mib "$speed")"
      echo "${names[i]} ratio $(ratio "$speed" "$d")"
      echo "${names[i]} own_s/GiB $own"
      echo "${names[i]} sys_s/GiB $sys"
      echo "direct MiB/s $(mib "$d")"
      echo "direct sys_s/GiB $d_sys"
    } >> "$work/results"
  done
  echo "$line load=$(cut -d' ' -f1 /proc/loadavg)"
done
echo "medians:"
for n in direct "${names[@]}"; do
  for m in MiB/s ratio own_s/GiB sys_s/GiB; do
    awk -v n="$n" -v m="$m" '$1 == n && $2 == m {print $3}' "$work/results" | sort -g |
      awk -v n="$n" -v m="$m" '{v[NR] = $1} END {if (NR) printf \
        "  %-10s %-10s median %s (n=%d, min %s, max %s)\n", n, m,
        (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), NR, v[1], v[NR]}'
  done
done
# The direct downloads swing widely; the ratio of the medians is the steadier figure.
med() { awk -v n="$1" '$1 == n && $2 == "MiB/s" {print $3}' "$work/results" | sort -g |
  awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
d_med=$(med direct)
for n in "${names[@]}"; do
  echo "  $n / direct, ratio of medians: $(ratio "$(med "$n")" "$d_med")"
done
for n in "${names[@]}"; do
  [[ -s $work/$n.err ]] && { echo "stderr of $n (last lines):"; tail -n 3 "$work/$n.err"; }
done
exit 0
