#!/usr/bin/env python3
"""bench/proxy/inspect_latency.py PROXY_PORT|direct PORT CAFILE NAME... : median milliseconds of
one HTTPS GET on a fresh connection (TCP, CONNECT when through a proxy, TLS, request, response)
to each NAME in turn; prints "median first" where first is the first NAME's time."""
import socket, ssl, statistics, sys, time

proxy, port, cafile, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
ctx = ssl.create_default_context(cafile=cafile)
times = []
for name in names:
    t0 = time.perf_counter()
    if proxy == "direct":
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
    else:
        s = socket.create_connection(("127.0.0.1", int(proxy)), timeout=10)
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (name.encode(), port,
                                                                     name.encode(), port))
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        assert b" 200 " in head.split(b"\r\n")[0], head
    t = ctx.wrap_socket(s, server_hostname=name)
    t.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name.encode())
    got = b""
    while True:
        d = t.recv(65536)
        if not d:
            break
        got += d
    assert b"hello from nginx" in got, got[:200]
    t.close()
    times.append((time.perf_counter() - t0) * 1000)
print("%.3f %.3f" % (statistics.median(times), times[0]))
