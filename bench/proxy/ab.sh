#!/usr/bin/env bash
# bench/proxy/ab.sh BIN_A BIN_B [ROUNDS] [SECONDS]: interleaved A/B of two cordon-netproxy
# binaries on the transparent path (root only): one network namespace per binary, set up as
# run.sh does (bench/proxy/transparent_netns.py), nginx on loopback; each round measures, A then
# B then B then A (so neither always goes first), the added latency of a new connection (median
# of 300 Connection: close GETs, direct nginx measured next to each) and the keep-alive request
# rate (wrk -c50, SECONDS; 0 skips it), each with the proxy's own CPU time per connection or
# request (the steadiest of these numbers on a shared machine). Prints one line per measurement with the load average, then medians.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 2 || ! -x $1 || ! -x $2 || $(id -u) -ne 0 ]]; then
  echo "usage (root): $0 BIN_A BIN_B [ROUNDS] [SECONDS]" >&2
  exit 2
fi
bins=("$(realpath "$1")" "$(realpath "$2")")
rounds=${3:-3}
secs=${4:-3}
source "$HERE/lib.sh"
bench_init ab

start_nginx_and_policy "$work"
start_ab_proxies "cordon-ab-$$"
sleep 1
collect_ab_proxies
# CPU time the proxy ran (ns, /proc/PID/schedstat): per connection and per request it is what the
# proxy costs, much less disturbed by other load on the machine than the latencies and rates.
cpu_ns() { cut -d' ' -f1 "/proc/${ppid[$1]}/schedstat"; }

# 300 measured + 30 warm-up connections per run of newconn.py.
conns_per_run=330
newconn() {  # $1 = namespace index or "direct"
  if [[ $1 == direct ]]; then
    python3 "$HERE/newconn.py" 127.0.0.1 "$np" /index.html "127.0.0.1:$np"
  else
    ip netns exec "${nss[$1]}" python3 "$HERE/newconn.py" bench.test "$np" /index.html "bench.test:$np"
  fi
}
rate() {  # $1 = namespace index or "direct"
  local out
  if [[ $1 == direct ]]; then
    out=$(wrk -t1 -c50 -d"${secs}s" "http://127.0.0.1:$np/index.html" 2>&1)
  else
    out=$(ip netns exec "${nss[$1]}" wrk -t1 -c50 -d"${secs}s" "http://bench.test:$np/index.html" 2>&1)
  fi
  if grep -q "Non-2xx" <<<"$out"; then echo "$0: non-2xx: $out" >&2; exit 1; fi
  awk '/requests in/ {n = $1} /Requests\/sec/ {r = $2} END {print r, n}' <<<"$out"
}
load() { cut -d' ' -f1 /proc/loadavg; }
names=(A B)
: > "$work/results"
for ((r = 1; r <= rounds; r++)); do
  for i in 0 1 1 0; do
    d=$(newconn direct); c0=$(cpu_ns "$i"); t=$(newconn "$i"); c1=$(cpu_ns "$i")
    cpu=$(( (c1 - c0) / conns_per_run / 1000 ))
    echo "round $r ${names[$i]} newconn direct=$d proxied=$t added=$((t - d)) proxy_cpu_per_conn_us=$cpu load=$(load)"
    echo "${names[$i]} added $((t - d))" >> "$work/results"
    echo "${names[$i]} cpu/conn $cpu" >> "$work/results"
  done
  for i in 0 1 1 0; do
    ((secs > 0)) || break
    read -r d _ < <(rate direct)
    c0=$(cpu_ns "$i"); read -r t n < <(rate "$i"); c1=$(cpu_ns "$i")
    cpu=$(awk -v c="$((c1 - c0))" -v n="$n" 'BEGIN {printf "%.1f", c / n / 1000}')
    ratio=$(awk -v a="$t" -v b="$d" 'BEGIN {printf "%.3f", a / b}')
    echo "round $r ${names[$i]} keep-alive direct=$d proxied=$t ratio=$ratio proxy_cpu_per_req_us=$cpu load=$(load)"
    echo "${names[$i]} ratio $ratio" >> "$work/results"
    echo "${names[$i]} rate $t" >> "$work/results"
    echo "${names[$i]} cpu/req $cpu" >> "$work/results"
  done
done
echo "medians (A=${bins[0]}, B=${bins[1]}):"
for n in A B; do
  for m in added cpu/conn ratio rate cpu/req; do
    awk -v n="$n" -v m="$m" '$1 == n && $2 == m {print $3}' "$work/results" | sort -g |
      awk -v n="$n" -v m="$m" '{v[NR] = $1} END {if (NR) printf "  %s %-6s median %s (n=%d, min %s, max %s)\n", n, m, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), NR, v[1], v[NR]}'
  done
done
