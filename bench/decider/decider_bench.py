#!/usr/bin/env python3
"""The measurements of bench/decider/run.sh (which starts nginx and writes the policy).
argv: PROXY_BIN WORK NGINX_PORT SECONDS EXAMPLE_DECIDER BAD_DECIDER NEWCONN_PY"""
import json, re, socket, statistics, subprocess, sys, time

proxy_bin, work, np, secs, example, bad, newconn = sys.argv[1:8]
HELD = 200


def start(decider_argv, timeout="600s"):
    """cordon-netproxy with `decider_argv` on a socketpair; returns (proxy, decider, port)."""
    ours, theirs = socket.socketpair()
    decider = subprocess.Popen(decider_argv, stdin=theirs.fileno(), stdout=theirs.fileno())
    theirs.close()
    proxy = subprocess.Popen(
        [proxy_bin, "--policy", f"{work}/policy.json", "--events", f"{work}/events.jsonl",
         "--listen", "127.0.0.1:0", "--decider-fd", str(ours.fileno()), "--decider-timeout",
         timeout], pass_fds=[ours.fileno()], stdout=subprocess.PIPE, text=True)
    ours.close()
    port = int(proxy.stdout.readline().rsplit(":", 1)[1])
    return proxy, decider, port


def stop(*procs):
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def wrk_rate(port):
    lua = f"{work}/proxy.lua"
    with open(lua, "w") as f:
        f.write(f'wrk.path = "http://bench.test:{np}/index.html"\n'
                f'wrk.headers["Host"] = "bench.test:{np}"\n')
    out = subprocess.run(["wrk", "-t1", "-c50", f"-d{secs}s", "-s", lua, f"http://127.0.0.1:{port}"],
                         capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        sys.exit("wrk: non-2xx responses:\n" + out)
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def newconn_us(port, host):
    return int(subprocess.run(["python3", newconn, "127.0.0.1", str(port),
                               f"http://{host}:{np}/index.html", f"{host}:{np}"],
                              capture_output=True, text=True, check=True).stdout)


def hold(port, n):
    """n SOCKS5 CONNECTs to asked.test, each left waiting for the decider's answer."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        name = b"asked.test"
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + int(np).to_bytes(2, "big"))
        socks.append(s)
    return socks


# 1. A held connection costs nothing to the others.
proxy, decider, port = start(["python3", bad, "silent"])
idle_rate, idle_new = wrk_rate(port), newconn_us(port, "bench.test")
held = hold(port, HELD)
time.sleep(0.5)
busy_rate, busy_new = wrk_rate(port), newconn_us(port, "bench.test")
for s in held:
    s.settimeout(0)
    try:
        if s.recv(16):
            sys.exit("a held connection was answered: the decider never answers")
    except BlockingIOError:
        pass  # still waiting, as it should be
    s.close()
stop(proxy, decider)
print(f"allowed requests/s (wrk -c50, keep-alive): {idle_rate:.0f} with no question open, "
      f"{busy_rate:.0f} with {HELD} connections held ({busy_rate / idle_rate:.2f}x)")
print(f"new connection, allowed name: {idle_new} us with no question open, {busy_new} us with "
      f"{HELD} held")

# 2. What a decider round trip adds per decision.
open(f"{work}/events.jsonl", "w").close()
proxy, decider, port = start(["python3", example, "--allow", "asked.test"])
policy_us, decider_us = newconn_us(port, "bench.test"), newconn_us(port, "asked.test")
stop(proxy, decider)
waits = [e["wait_us"] for e in map(json.loads, open(f"{work}/events.jsonl"))
         if e.get("kind") == "net.decider" and "wait_us" in e]
print(f"new connection: {policy_us} us allowed by the policy, {decider_us} us allowed by the "
      f"example decider (asked every time): +{decider_us - policy_us} us per decision")
print(f"net.decider wait_us over {len(waits)} questions: median {statistics.median(waits):.0f}, "
      f"p90 {sorted(waits)[int(len(waits) * 0.9)]}, max {max(waits)}")
