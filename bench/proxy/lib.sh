# Sourced by bench/proxy/run.sh and ab.sh: a free loopback port, nginx on loopback, and the
# benchmark policy (bench.test pinned to 127.0.0.1, caps out of the way).

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
