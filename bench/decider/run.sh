#!/usr/bin/env bash
# bench/decider/run.sh BUILD_DIR [SECONDS]: what a decider costs (docs/decider.md). nginx on
# loopback behind cordon-netproxy's explicit proxy; prints
#  - the allowed request rate (wrk -t1 -c50, keep-alive) and a new connection's latency with no
#    question open, then with 200 connections held waiting for a decider that never answers;
#  - a new connection's latency to a name the policy allows vs one the example decider allows
#    (asked every time, scope once), and the median net.decider wait_us.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR [SECONDS]}" && pwd)
secs=${2:-5}
for tool in nginx wrk python3; do
  command -v "$tool" >/dev/null || { echo "$0: needs $tool" >&2; exit 2; }
done
source "$SRC/bench/proxy/lib.sh"
bench_init decider
start_nginx_and_policy "$work"
cat > "$work/policy.json" <<POL
{"version": 1, "network": {"allow": ["bench.test:$np"],
 "resolve": {"bench.test": "127.0.0.1", "asked.test": "127.0.0.1"},
 "max_connections": 4096, "max_connections_per_host": 4096, "connections_per_minute": 10000000}}
POL
python3 "$HERE/decider_bench.py" "$build/netproxy/cordon-netproxy" "$work" "$np" "$secs" \
  "$SRC/docs/examples/decider.py" "$SRC/tests/netproxy/bad_decider.py" "$SRC/bench/proxy/newconn.py"
