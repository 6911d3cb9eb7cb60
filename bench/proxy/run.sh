#!/usr/bin/env bash
# bench/proxy/run.sh BUILD_DIR [SECONDS]: request rate (wrk, keep-alive), bulk throughput and idle
# connection memory against nginx on loopback — direct, through cordon-netproxy (explicit HTTP
# proxy, absolute-form and CONNECT), through tinyproxy and through squid (when installed) —
# printing ratios to direct, next to a bare splice relay (relay_ceiling.c: no policy, no events)
# as the yardstick of what any user-space relay costs here, and (root, BPF) an in-kernel sockmap
# relay (sockmap_relay.c) as the yardstick of one that never copies to user space. As root it also
# measures the
# transparent path: a network namespace with the capture ruleset (transparent_netns.py), clients
# inside it reaching nginx by name through the proxy's DNS and REDIRECT.
# Timed runs share the machine: take the benchmark lock, e.g.
#   flock /tmp/cordon-bench.lock bench/proxy/run.sh BUILD_DIR 3
# Everything listens on 127.0.0.1 and lives in a scratch directory on /dev/shm.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 1 || ! -x $1/netproxy/cordon-netproxy ]]; then
  echo "usage: $0 BUILD_DIR [SECONDS]   (BUILD_DIR with netproxy/cordon-netproxy built)" >&2
  exit 2
fi
proxy_bin=$(cd "$1" && pwd)/netproxy/cordon-netproxy
secs=${2:-5}
for tool in nginx wrk tinyproxy curl python3; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is not installed" >&2; exit 2; }
done
netns=""
source "$HERE/lib.sh"
bench_init proxy

# nginx: a small page for the request rate, a 1 GiB sparse file for bulk throughput.
start_nginx_and_policy "$work"
truncate -s 1G "$work/www/big.bin"

# cordon-netproxy: explicit listener, bench.test pinned to 127.0.0.1.
"$proxy_bin" --policy "$work/policy.json" --listen 127.0.0.1:0 --events "$work/events.jsonl" \
  > "$work/cordon.addr" 2> "$work/cordon.err" &
pids+=($!)
cordon_pid=$!

# tinyproxy, allowing loopback clients.
tp=$(free_port)
cat > "$work/tinyproxy.conf" <<TP
Port $tp
Listen 127.0.0.1
Timeout 600
MaxClients 4096
Allow 127.0.0.1
ConnectPort $np
LogLevel Critical
TP
tinyproxy -d -c "$work/tinyproxy.conf" > /dev/null 2>&1 &
pids+=($!)
tinyproxy_pid=$!

# squid (optional): memory cache only, no logs on disk but its own cache.log in the scratch dir.
squid_pid=""
if command -v squid >/dev/null; then
  sq=$(free_port)
  mkdir -p "$work/squid"
  cat > "$work/squid.conf" <<SQ
http_port 127.0.0.1:$sq
pid_filename $work/squid/squid.pid
cache_log $work/squid/cache.log
access_log none
cache deny all
cache_mem 8 MB
coredump_dir $work/squid
shutdown_lifetime 1 seconds
max_filedescriptors 8192
http_access allow localhost
http_access deny all
SQ
  if [[ $(id -u) -eq 0 ]]; then chown -R proxy "$work/squid" 2>/dev/null || true; fi
  squid -N -f "$work/squid.conf" > "$work/squid/stdout.log" 2>&1 &
  pids+=($!)
  squid_pid=$!
fi
# The bare splice relay (relay_ceiling.c): accept, dial nginx, splice both ways, nothing else. What
# any user-space relay costs on this machine, as a yardstick for cordon's rows.
cc -O2 -Wall -Wextra -Werror -o "$work/relay_ceiling" "$HERE/relay_ceiling.c"
"$work/relay_ceiling" 0 127.0.0.1 "$np" > "$work/relay.addr" &
pids+=($!)
# The in-kernel relay (sockmap_relay.c: a BPF sockmap redirects each skb to the peer socket), root
# only; skipped, saying why, when not root or when the kernel refuses the BPF program or map.
sockmap_addr="" sockmap_skip="not root"
if [[ $(id -u) -eq 0 ]]; then
  cc -O2 -Wall -Wextra -Werror -o "$work/sockmap_relay" "$HERE/sockmap_relay.c"
  "$work/sockmap_relay" 0 127.0.0.1 "$np" > "$work/sockmap.addr" 2> "$work/sockmap.err" &
  pids+=($!)
fi

# Transparent: a second cordon-netproxy serving a namespace of our own (root only).
tproxy_pid=""
if [[ $(id -u) -eq 0 ]]; then
  netns=cordon-bench-$$
  start_transparent_ns "$netns" "$proxy_bin" "$work/policy.json" \
    "$work/transparent-events.jsonl" "$work/tproxy.pid" "$work/tproxy.err"
fi
sleep 1
cordon_addr=$(head -1 "$work/cordon.addr")
relay_addr=$(head -1 "$work/relay.addr")
if [[ $(id -u) -eq 0 ]]; then
  sockmap_addr=$(head -1 "$work/sockmap.addr")
  [[ -n $sockmap_addr ]] || sockmap_skip="BPF unavailable: $(head -1 "$work/sockmap.err")"
fi
if [[ -n $netns ]]; then
  tproxy_pid=$(head -1 "$work/tproxy.pid")
  [[ -n $tproxy_pid ]] || { echo "$0: transparent proxy did not start: $(cat "$work/tproxy.err")" >&2; exit 1; }
  pids+=("$tproxy_pid")
fi
in_ns() { ip netns exec "$netns" "$@"; }

# wrk through a proxy: absolute-form request line to the proxy address.
cat > "$work/proxy.lua" <<LUA
wrk.path = "http://bench.test:$np/index.html"
wrk.headers["Host"] = "bench.test:$np"
LUA
# tinyproxy resolves names itself: give it the address.
cat > "$work/proxy_ip.lua" <<LUA
wrk.path = "http://127.0.0.1:$np/index.html"
wrk.headers["Host"] = "127.0.0.1:$np"
LUA
# A run with any non-2xx answer is an error, not a number.
rate() {
  local out
  out=$(wrk -t1 -c50 -d"${secs}s" "$@" 2>&1)
  if grep -q "Non-2xx" <<<"$out"; then
    echo "$0: wrk $*: non-2xx responses:" >&2
    echo "$out" >&2
    exit 1
  fi
  awk '/Requests\/sec/ {print $2}' <<<"$out"
}

direct_rate=$(rate "http://127.0.0.1:$np/index.html")
cordon_rate=$(rate -s "$work/proxy.lua" "http://$cordon_addr")
tiny_rate=$(rate -s "$work/proxy_ip.lua" "http://127.0.0.1:$tp")
squid_rate=""
[[ -n $squid_pid ]] && squid_rate=$(rate -s "$work/proxy_ip.lua" "http://127.0.0.1:$sq")
t_rate=""
[[ -n $tproxy_pid ]] && t_rate=$(in_ns bash -c "$(declare -f rate); secs=$secs; rate http://bench.test:$np/index.html")

bulk() { curl -sf -o /dev/null -w '%{speed_download}' "$@" || { echo "$0: curl $* failed" >&2; exit 1; }; }
mib() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1048576}'; }
direct_bulk=$(bulk "http://127.0.0.1:$np/big.bin")
cordon_bulk=$(bulk -x "http://$cordon_addr" "http://bench.test:$np/big.bin")
cordon_tunnel=$(bulk -p -x "http://$cordon_addr" "http://bench.test:$np/big.bin")
relay_bulk=$(bulk "http://$relay_addr/big.bin")
sockmap_bulk=""
[[ -n $sockmap_addr ]] && sockmap_bulk=$(bulk "http://$sockmap_addr/big.bin")
tiny_bulk=$(bulk -x "http://127.0.0.1:$tp" "http://127.0.0.1:$np/big.bin")
tiny_tunnel=$(bulk -p -x "http://127.0.0.1:$tp" "http://127.0.0.1:$np/big.bin")
t_bulk=""
[[ -n $tproxy_pid ]] && t_bulk=$(in_ns curl -sf -o /dev/null -w '%{speed_download}' "http://bench.test:$np/big.bin")
squid_bulk="" squid_tunnel=""
if [[ -n $squid_pid ]]; then
  squid_bulk=$(bulk -x "http://127.0.0.1:$sq" "http://127.0.0.1:$np/big.bin")
  squid_tunnel=$(bulk -p -x "http://127.0.0.1:$sq" "http://127.0.0.1:$np/big.bin")
fi

# Idle connection memory: 1000 CONNECT tunnels held open, RSS delta per tunnel.
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
idle_kib() {  # $1 pid, $2 proxy host:port, $3 target host
  local before after
  before=$(rss "$1")
  python3 - "$2" "$3" "$np" <<'PY' &
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
socks = []
for _ in range(1000):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(f"CONNECT {sys.argv[2]}:{sys.argv[3]} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    if b" 200" not in s.recv(200):
        sys.exit("CONNECT refused")
    socks.append(s)
time.sleep(4)
PY
  local py=$!
  sleep 3
  after=$(rss "$1")
  wait "$py" || true
  awk -v a="$after" -v b="$before" 'BEGIN {printf "%.1f", (a - b) / 1000}'
}
ulimit -n 8192 2>/dev/null || true
cordon_base=$(rss "$cordon_pid")
cordon_idle=$(idle_kib "$cordon_pid" "$cordon_addr" bench.test)
tiny_idle=$(idle_kib "$tinyproxy_pid" "127.0.0.1:$tp" 127.0.0.1)
squid_idle=""
[[ -n $squid_pid ]] && squid_idle=$(idle_kib "$squid_pid" "127.0.0.1:$sq" 127.0.0.1)
# Transparent idle connections: plain TCP connections by name from inside the namespace, nothing
# sent (decided after the peek deadline, then relayed idle).
t_idle="" t_base=""
if [[ -n $tproxy_pid ]]; then
  t_base=$(rss "$tproxy_pid")
  before=$t_base
  in_ns python3 - "$np" <<'PY' &
import socket, sys, time
socks = [socket.create_connection(("bench.test", int(sys.argv[1])), timeout=10) for _ in range(1000)]
time.sleep(5)
PY
  py=$!
  sleep 4
  after=$(rss "$tproxy_pid")
  wait "$py" || true
  t_idle=$(awk -v a="$after" -v b="$before" 'BEGIN {printf "%.1f", (a - b) / 1000}')
fi

# Added latency of a new connection (newconn.py: median of 300 after 30 warm-up rounds).
newconn_us() { python3 "$HERE/newconn.py" "$@"; }
nc_direct=$(newconn_us 127.0.0.1 "$np" /index.html "127.0.0.1:$np")
nc_explicit=$(newconn_us "${cordon_addr%:*}" "${cordon_addr##*:}" "http://bench.test:$np/index.html" "bench.test:$np")
nc_relay=$(newconn_us "${relay_addr%:*}" "${relay_addr##*:}" /index.html "127.0.0.1:$np")
nc_sockmap=""
[[ -n $sockmap_addr ]] && nc_sockmap=$(newconn_us "${sockmap_addr%:*}" "${sockmap_addr##*:}" /index.html "127.0.0.1:$np")
nc_transparent=""
[[ -n $tproxy_pid ]] && nc_transparent=$(in_ns python3 "$HERE/newconn.py" bench.test "$np" /index.html "bench.test:$np")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "n/a"}'; }
printf '%-34s %12s %8s\n' "keep-alive req/s (wrk -c50)" "req/s" "ratio"
printf '%-34s %12s %8s\n' "direct nginx" "$direct_rate" "1.00x"
printf '%-34s %12s %8s\n' "cordon-netproxy (absolute-form)" "$cordon_rate" "$(ratio "$cordon_rate" "$direct_rate")"
[[ -n $tproxy_pid ]] && printf '%-34s %12s %8s\n' "cordon-netproxy (transparent)" "$t_rate" "$(ratio "$t_rate" "$direct_rate")"
printf '%-34s %12s %8s\n' "tinyproxy (absolute-form)" "$tiny_rate" "$(ratio "$tiny_rate" "$direct_rate")"
[[ -n $squid_pid ]] && printf '%-34s %12s %8s\n' "squid (absolute-form)" "$squid_rate" "$(ratio "$squid_rate" "$direct_rate")"
printf '\n%-34s %12s %8s\n' "bulk 1 GiB (curl)" "MiB/s" "ratio"
printf '%-34s %12s %8s\n' "direct nginx" "$(mib "$direct_bulk")" "1.00x"
printf '%-34s %12s %8s\n' "cordon-netproxy (absolute-form)" "$(mib "$cordon_bulk")" "$(ratio "$cordon_bulk" "$direct_bulk")"
printf '%-34s %12s %8s\n' "cordon-netproxy (CONNECT)" "$(mib "$cordon_tunnel")" "$(ratio "$cordon_tunnel" "$direct_bulk")"
[[ -n $tproxy_pid ]] && printf '%-34s %12s %8s\n' "cordon-netproxy (transparent)" "$(mib "$t_bulk")" "$(ratio "$t_bulk" "$direct_bulk")"
printf '%-34s %12s %8s\n' "bare splice relay (no policy)" "$(mib "$relay_bulk")" "$(ratio "$relay_bulk" "$direct_bulk")"
if [[ -n $sockmap_bulk ]]; then
  printf '%-34s %12s %8s\n' "in-kernel sockmap relay" "$(mib "$sockmap_bulk")" "$(ratio "$sockmap_bulk" "$direct_bulk")"
else
  printf '%-34s %21s\n' "in-kernel sockmap relay" "skipped ($sockmap_skip)"
fi
printf '%-34s %12s %8s\n' "tinyproxy (absolute-form)" "$(mib "$tiny_bulk")" "$(ratio "$tiny_bulk" "$direct_bulk")"
printf '%-34s %12s %8s\n' "tinyproxy (CONNECT)" "$(mib "$tiny_tunnel")" "$(ratio "$tiny_tunnel" "$direct_bulk")"
if [[ -n $squid_pid ]]; then
  printf '%-34s %12s %8s\n' "squid (absolute-form)" "$(mib "$squid_bulk")" "$(ratio "$squid_bulk" "$direct_bulk")"
  printf '%-34s %12s %8s\n' "squid (CONNECT)" "$(mib "$squid_tunnel")" "$(ratio "$squid_tunnel" "$direct_bulk")"
fi
printf '\n%-34s %12s %8s\n' "new connection (median, 300)" "us" "added"
printf '%-34s %12s %8s\n' "direct nginx" "$nc_direct" "-"
printf '%-34s %12s %8s\n' "cordon-netproxy (absolute-form)" "$nc_explicit" "$((nc_explicit - nc_direct))"
[[ -n $nc_transparent ]] && printf '%-34s %12s %8s\n' "cordon-netproxy (transparent)" "$nc_transparent" "$((nc_transparent - nc_direct))"
printf '%-34s %12s %8s\n' "bare splice relay (no policy)" "$nc_relay" "$((nc_relay - nc_direct))"
[[ -n $nc_sockmap ]] && printf '%-34s %12s %8s\n' "in-kernel sockmap relay" "$nc_sockmap" "$((nc_sockmap - nc_direct))"
printf '\n%-34s %12s\n' "memory" "KiB"
printf '%-34s %12s\n' "cordon-netproxy base RSS" "$cordon_base"
printf '%-34s %12s\n' "cordon-netproxy per idle tunnel" "$cordon_idle"
if [[ -n $tproxy_pid ]]; then
  printf '%-34s %12s\n' "transparent proxy base RSS" "$t_base"
  printf '%-34s %12s\n' "transparent per idle connection" "$t_idle"
fi
printf '%-34s %12s\n' "tinyproxy per idle tunnel" "$tiny_idle"
[[ -n $squid_pid ]] && printf '%-34s %12s\n' "squid per idle tunnel" "$squid_idle"
exit 0
