#!/usr/bin/env python3
# bench/proxy/transparent_netns.py NETNS PROXY_BIN POLICY EVENTS: what the launcher does for
# transparent capture, for the benchmark (root only): in the existing network namespace NETNS,
# creates the proxy's listening sockets and the capture ruleset (the same rules as
# netproxy/capture.cc), then runs cordon-netproxy in the host namespace serving those sockets.
# Prints the proxy's pid once it is ready; exits when the proxy does.
import ctypes
import os
import socket
import subprocess
import sys

CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        sys.exit(f"setns: {os.strerror(ctypes.get_errno())}")


def dual_stack(kind):
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 0))
    if kind == socket.SOCK_STREAM:
        s.listen(4096)
    return s


ns, proxy, policy, events = sys.argv[1:5]
home = os.open("/proc/self/ns/net", os.O_RDONLY)
setns(os.open(f"/run/netns/{ns}", os.O_RDONLY))
tp = dual_stack(socket.SOCK_STREAM)
dns_tcp = dual_stack(socket.SOCK_STREAM)
dns_udp = dual_stack(socket.SOCK_DGRAM)
P, DT, DU = (s.getsockname()[1] for s in (tp, dns_tcp, dns_udp))
rules = f"""table inet cordon {{
  chain nat_output {{
    type nat hook output priority -100; policy accept;
    ip daddr 127.0.0.0/8 return
    ip6 daddr ::1 return
    udp dport 53 redirect to :{DU}
    tcp dport 53 redirect to :{DT}
    meta l4proto tcp redirect to :{P}
  }}
  chain filter_output {{
    type filter hook output priority 0; policy drop;
    ip daddr 127.0.0.0/8 accept
    ip6 daddr ::1 accept
    drop
  }}
}}
"""
subprocess.run(["nft", "-f", "-"], input=rules.encode(), check=True)  # forked inside NETNS
setns(home)
ready_r, ready_w = os.pipe()
fds = [tp.fileno(), dns_udp.fileno(), dns_tcp.fileno(), ready_w]
child = subprocess.Popen(
    [proxy, "--policy", policy, "--events", events, "--transparent-fd", str(fds[0]),
     "--dns-fd", str(fds[1]), "--dns-tcp-fd", str(fds[2]), "--ready-fd", str(ready_w)],
    pass_fds=fds)
for s in (tp, dns_tcp, dns_udp):
    s.close()
os.close(ready_w)
if os.read(ready_r, 1) != b"1":
    sys.exit("cordon-netproxy did not become ready")
print(child.pid, flush=True)
sys.exit(child.wait())
