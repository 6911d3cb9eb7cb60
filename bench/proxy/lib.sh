# Sourced by bench/proxy/run.sh, ab.sh, bulk_ab.sh and sockmap_ab.sh: the scratch directory and
# cleanup, a free loopback port, nginx on loopback, the benchmark policy (bench.test pinned to
# 127.0.0.1, caps out of the way) and the transparent path's network namespace. The callers keep
# their scratch directory in $work and what to tear down in the arrays pids and nss.

# bench_init NAME: a scratch directory on tmpfs in $work (readable by nginx's unprivileged
# workers), empty pids and nss, and cleanup_bench on exit.
bench_init() {
  work=$(mktemp -d "/dev/shm/cordon-bench-$1-XXXXXX")
  chmod 755 "$work"
  pids=()
  nss=()
  trap cleanup_bench EXIT
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# nginx serving WORK/www (a small index.html; add files after) on a free loopback port, which it
# leaves in $np; its pid file is WORK/nginx.pid. Then WORK/policy.json allows bench.test:$np.
start_nginx_and_policy() {
  local work=$1
  mkdir -p "$work/www" "$work/nginx"
  echo "hello from nginx" > "$work/www/index.html"
  np=$(free_port)
  cat > "$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx; proxy_temp_path $work/nginx; fastcgi_temp_path $work/nginx;
  uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
  keepalive_requests 1000000;
  sendfile on;
  server { listen 127.0.0.1:$np; root $work/www; }
}
CONF
  nginx -c "$work/nginx.conf"
  cat > "$work/policy.json" <<POL
{"version": 1, "network": {"allow": ["bench.test:$np"], "resolve": {"bench.test": "127.0.0.1"},
 "max_connections": 4096, "max_connections_per_host": 4096, "connections_per_minute": 10000000}}
POL
}

# Network namespace NS set up as cordon's launcher does for the transparent path (lo up, default
# routes via lo, a resolv.conf naming an address that must never answer), served by cordon-netproxy
# BIN with POLICY through transparent_netns.py (the proxy's pid on PIDFILE's first line, stderr in
# ERRFILE, events to EVENTS). NS joins nss and the helper's pid joins pids, for cleanup_bench.
start_transparent_ns() {
  local ns=$1 bin=$2 policy=$3 events=$4 pidfile=$5 errfile=$6
  nss+=("$ns")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ns" route add default dev lo src 127.0.0.1
  ip -n "$ns" -6 route add default dev lo src ::1
  mkdir -p "/etc/netns/$ns"
  printf 'nameserver 198.51.100.53\noptions timeout:2 attempts:1\n' > "/etc/netns/$ns/resolv.conf"
  python3 "$HERE/transparent_netns.py" "$ns" "$bin" "$policy" "$events" > "$pidfile" 2> "$errfile" &
  pids+=($!)
}

# Kills what the script started (pids), deletes its namespaces (nss) and nginx, removes $work.
cleanup_bench() {
  local p ns
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for ns in "${nss[@]}"; do
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  [[ -f $work/nginx.pid ]] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work"
}

# The A/B scripts' pair: binary A serves namespace PREFIX-0, binary B PREFIX-1 (start_transparent_ns
# with $work/{events,tproxy}-I.* files); bins holds the two binaries.
start_ab_proxies() {
  local i
  for i in 0 1; do
    start_transparent_ns "$1-$i" "${bins[$i]}" "$work/policy.json" "$work/events-$i.jsonl" \
      "$work/tproxy-$i.pid" "$work/tproxy-$i.err"
  done
}

# Once they had time to start: their pids into ppid (and pids, for cleanup), or exit saying why.
collect_ab_proxies() {
  local i p
  ppid=()
  for i in 0 1; do
    p=$(head -1 "$work/tproxy-$i.pid")
    [[ -n $p ]] || { echo "$0: proxy $i did not start: $(cat "$work/tproxy-$i.err")" >&2; exit 1; }
    pids+=("$p")
    ppid+=("$p")
  done
}
