#!/usr/bin/env bash
# bench/proxy/inspect.sh BUILD_DIR [REQUESTS]: HTTPS through cordon-netproxy's TLS inspection
# against direct TLS and against mitmproxy (mitmdump, when installed), nginx with TLS on loopback
# as the server: the latency of a request on a fresh connection with the leaf already minted, the
# first request to a new name (leaf minted), the keep-alive request rate (curl, one connection)
# and bulk throughput (1 GiB), with ratios to direct. Take the benchmark lock:
#   flock /tmp/cordon-bench.lock bench/proxy/inspect.sh BUILD_DIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 1 || ! -x $1/netproxy/cordon-netproxy ]]; then
  echo "usage: $0 BUILD_DIR [REQUESTS]   (BUILD_DIR with netproxy/cordon-netproxy built)" >&2
  exit 2
fi
proxy_bin=$(cd "$1" && pwd)/netproxy/cordon-netproxy
n=${2:-1000}
for tool in nginx curl python3 openssl; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is not installed" >&2; exit 2; }
done
source "$HERE/lib.sh"
bench_init inspect
start_nginx_and_policy "$work"
truncate -s 1G "$work/www/big.bin"

# The "real" server's CA and a certificate for bench.test and *.bench.test.
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
(cd "$work" &&
  openssl req -x509 $ec -keyout up-ca.key -out up-ca.pem -days 2 -subj '/CN=bench CA' 2>/dev/null &&
  openssl req $ec -keyout srv.key -out srv.csr -subj '/CN=bench.test' 2>/dev/null &&
  printf 'subjectAltName=DNS:localhost,DNS:bench.test,DNS:*.bench.test\n' > san.ext &&
  openssl x509 -req -in srv.csr -CA up-ca.pem -CAkey up-ca.key -CAcreateserial -out srv.pem \
    -days 2 -extfile san.ext 2>/dev/null)
tp=$(free_port)
sed -i "s|server { listen 127.0.0.1:$np; root $work/www; }|&\n  server { listen 127.0.0.1:$tp ssl; ssl_certificate $work/srv.pem; ssl_certificate_key $work/srv.key; root $work/www; }|" "$work/nginx.conf"
kill "$(cat "$work/nginx.pid")"; sleep 0.3; nginx -c "$work/nginx.conf"

names=(); resolve=""
for i in $(seq 1 50); do names+=("n$i.bench.test"); resolve+="\"n$i.bench.test\": \"127.0.0.1\", "; done
cat > "$work/inspect.json" <<POL
{"version": 1, "network": {"allow": ["localhost:$tp", "*.bench.test:$tp"],
 "resolve": {${resolve}"bench.test": "127.0.0.1"}, "inspect": ["localhost", "*.bench.test"],
 "max_connections": 4096, "max_connections_per_host": 4096, "connections_per_minute": 10000000}}
POL
mkdir -p "$work/ca"
SSL_CERT_FILE=$work/up-ca.pem "$proxy_bin" --policy "$work/inspect.json" --listen 127.0.0.1:0 \
  --ca-dir "$work/ca" > "$work/cordon.addr" 2> "$work/cordon.err" &
pids+=($!)
for _ in $(seq 50); do [[ -s $work/cordon.addr ]] && break; sleep 0.1; done
cp=$(sed 's/.*://' "$work/cordon.addr")

mp=""
if command -v mitmdump >/dev/null; then
  mp=$(free_port)
  mitmdump -q --listen-host 127.0.0.1 -p "$mp" --set confdir="$work/mitm" \
    --set ssl_verify_upstream_trusted_ca="$work/up-ca.pem" > "$work/mitm.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [[ -s $work/mitm/mitmproxy-ca-cert.pem ]] && break; sleep 0.1; done
  sleep 1
fi

# localhost: a name mitmproxy can resolve too (the host's /etc/hosts).
url="https://localhost:$tp"
lat() {  # lat PROXY CAFILE NAME... -> "median first"
  python3 "$HERE/inspect_latency.py" "$1" "$tp" "$2" "${@:3}"
}
warm=(); for _ in $(seq 200); do warm+=(localhost); done
keepalive() {  # keepalive CURL_ARGS... -> requests/s over one connection
  local urls=() t0 t1
  for _ in $(seq "$n"); do urls+=("$url/index.html"); done
  t0=$(date +%s.%N)
  curl -sS "$@" "${urls[@]}" -o /dev/null
  t1=$(date +%s.%N)
  python3 -c "print('%.0f' % ($n / ($t1 - $t0)))"
}
bulk() {  # bulk CURL_ARGS... -> MiB/s
  curl -sS "$@" -o /dev/null -w '%{speed_download}' \
    "$url/big.bin" | python3 -c "import sys; print('%.0f' % (float(sys.stdin.read()) / 2**20))"
}

read -r d_warm _ < <(lat direct "$work/up-ca.pem" "${warm[@]}")
read -r c_warm _ < <(lat "$cp" "$work/ca/ca.pem" "${warm[@]}")
# First request to each new name: the leaf is minted for it (every name once).
c_first=$(BENCH_HERE=$HERE python3 - "$cp" "$tp" "$work/ca/ca.pem" "${names[@]}" <<'PY'
import os, statistics, subprocess, sys
proxy, port, ca, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
here = os.environ["BENCH_HERE"]
ts = [float(subprocess.run([sys.executable, "%s/inspect_latency.py" % here, proxy, port, ca, n],
      capture_output=True, text=True, check=True).stdout.split()[0]) for n in names]
print("%.3f" % statistics.median(ts))
PY
)
d_ka=$(keepalive --cacert "$work/up-ca.pem")
c_ka=$(keepalive --cacert "$work/ca/ca.pem" -x "http://127.0.0.1:$cp")
d_bulk=$(bulk --cacert "$work/up-ca.pem")
c_bulk=$(bulk --cacert "$work/ca/ca.pem" -x "http://127.0.0.1:$cp")
m_warm=- m_ka=- m_bulk=-
if [[ -n $mp ]]; then
  read -r m_warm _ < <(lat "$mp" "$work/mitm/mitmproxy-ca-cert.pem" "${warm[@]}")
  m_ka=$(keepalive --cacert "$work/mitm/mitmproxy-ca-cert.pem" -x "http://127.0.0.1:$mp")
  m_bulk=$(bulk --cacert "$work/mitm/mitmproxy-ca-cert.pem" -x "http://127.0.0.1:$mp")
fi
ratio() { python3 -c "import sys; a,b=sys.argv[1:]; print('-' if '-' in (a,b) else '%.2f' % (float(a)/float(b)))" "$1" "$2"; }
printf '%-40s %12s %12s %12s\n' "" direct cordon mitmproxy
printf '%-40s %12s %12s %12s\n' "fresh connection + request, warm leaf (ms)" "$d_warm" "$c_warm" "$m_warm"
printf '%-40s %12s %12s %12s\n' "  added to direct (ms)" "" \
  "$(python3 -c "print('%.3f' % ($c_warm - $d_warm))")" \
  "$([[ $m_warm == - ]] && echo - || python3 -c "print('%.3f' % ($m_warm - $d_warm))")"
printf '%-40s %12s %12s %12s\n' "first request to a new name (ms)" "" "$c_first" ""
printf '%-40s %12s %12s %12s\n' "  minting added to warm (ms)" "" \
  "$(python3 -c "print('%.3f' % ($c_first - $c_warm))")" ""
printf '%-40s %12s %12s %12s\n' "keep-alive requests/s (curl, 1 conn)" "$d_ka" "$c_ka" "$m_ka"
printf '%-40s %12s %12s %12s\n' "  ratio to direct" "" "$(ratio "$c_ka" "$d_ka")" "$(ratio "$m_ka" "$d_ka")"
printf '%-40s %12s %12s %12s\n' "bulk 1 GiB (MiB/s)" "$d_bulk" "$c_bulk" "$m_bulk"
printf '%-40s %12s %12s %12s\n' "  ratio to direct" "" "$(ratio "$c_bulk" "$d_bulk")" "$(ratio "$m_bulk" "$d_bulk")"
