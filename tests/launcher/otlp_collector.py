#!/usr/bin/python3
"""An OTLP/HTTP collector for tests, on 127.0.0.1: writes each request it gets as one JSON line
(method, path, content type, body) to OUT, and answers as MODE says: ok (200 {}), partial (200
with partialSuccess rejecting 1 record), stall (reads the request, never answers). --tls CERT KEY
serves HTTPS. Its port goes to PORTFILE once it listens. Lives at most --lifetime seconds."""
import argparse
import json
import socket
import ssl
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["ok", "partial", "stall"])
ap.add_argument("out")
ap.add_argument("portfile")
ap.add_argument("--tls", nargs=2)
ap.add_argument("--lifetime", type=float, default=60)
args = ap.parse_args()

lock = threading.Lock()
held = []  # stalled connections, kept open so the client sees no answer and no close


def read_request(conn):
    conn.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(body) < n:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return method, path, headers, body[:n]


def serve(conn):
    try:
        req = read_request(conn)
        if req is None:
            conn.close()
            return
        method, path, headers, body = req
        with lock, open(args.out, "a") as f:
            f.write(json.dumps({"method": method, "path": path,
                                "content_type": headers.get("content-type", ""),
                                "host": headers.get("host", ""),
                                "body": body.decode("utf-8", "replace")}) + "\n")
        if args.mode == "stall":
            held.append(conn)
            return
        answer = b"{}"
        if args.mode == "partial":
            answer = json.dumps({"partialSuccess": {"rejectedLogRecords": "1",
                                                    "errorMessage": "one too many"}}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     str(len(answer)).encode() + b"\r\nConnection: close\r\n\r\n" + answer)
        conn.close()
    except (OSError, ValueError):
        conn.close()


srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(64)
ctx = None
if args.tls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.tls[0], args.tls[1])
with open(args.portfile + ".tmp", "w") as f:
    f.write(str(srv.getsockname()[1]))
import os
os.rename(args.portfile + ".tmp", args.portfile)
end = time.monotonic() + args.lifetime
srv.settimeout(0.2)
while time.monotonic() < end:
    try:
        c, _ = srv.accept()
    except socket.timeout:
        continue
    if ctx is not None:
        try:
            c.settimeout(5)
            c = ctx.wrap_socket(c, server_side=True)
        except (OSError, ssl.SSLError):
            c.close()
            continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
