# Added latency of a new connection: median of 300 sequential connect + GET (Connection: close) +
# read-to-EOF, after 30 warm-up rounds, in microseconds.
# argv: CONNECT_HOST PORT REQUEST_URL HOST_HEADER (REQUEST_URL absolute for an explicit proxy).
import socket, statistics, sys, time
host, port, url, hosthdr = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
req = f"GET {url} HTTP/1.1\r\nHost: {hosthdr}\r\nConnection: close\r\n\r\n".encode()
times = []
for i in range(330):
    t = time.perf_counter()
    s = socket.create_connection(addr, timeout=10)
    s.sendall(req)
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    if b" 200 " not in got.split(b"\r\n", 1)[0]:
        sys.exit("not 200: " + got[:80].decode(errors="replace"))
    if i >= 30:
        times.append(time.perf_counter() - t)
print(f"{statistics.median(times) * 1e6:.0f}")
