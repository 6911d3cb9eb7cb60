#!/usr/bin/env python3
"""Loopback upstream servers for the netproxy tests. Prints one JSON line with the ports, then
serves until stdin closes. Every server binds 127.0.0.1:0 (or the address given) only."""
import hashlib, http.server, json, os, socket, socketserver, ssl, sys, threading

args = dict(a.split("=", 1) for a in sys.argv[1:])
root = args.get("root", ".")
stats = {"posts": 0, "echo_bytes": 0, "echo_conns": 0, "echo_open": 0, "banner_conns": 0, "dns_queries": 0}
lock = threading.Lock()


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the proxy's reuse is exercised

    def __init__(self, *a, **kw):
        super().__init__(*a, directory=root, **kw)

    def log_message(self, *a):
        pass

    def log_request_head(self):
        # reqlog=FILE: every request line and its headers, as received, appended to FILE.
        if "reqlog" in args:
            with lock, open(args["reqlog"], "a") as f:
                f.write(self.requestline + "\n" + str(self.headers))

    def do_GET(self):
        self.log_request_head()
        if self.path.startswith("/echo-request"):
            body = (self.requestline + "\n" + str(self.headers)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/echo-host":
            body = ("host=%s\n" % self.headers.get("Host")).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/until-eof/"):
            # A body with no length, delimited by the end of the connection (HTTP/1.0 style).
            n = int(self.path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(0, n, 65536):
                self.wfile.write(bytes([65 + (i // 65536) % 26]) * min(65536, n - i))
            self.close_connection = True
            return
        super().do_GET()

    def do_POST(self):
        self.log_request_head()
        with lock:
            stats["posts"] += 1
        digest = hashlib.sha256()
        data = bytearray()
        keep = not self.path.startswith("/sha256")  # /sha256: digest only, any size

        def take(n):
            # bodylog=FILE: every body byte as it arrives, even of a body that never ends.
            try:
                got = self.rfile.read(n)
            except OSError:
                got = b""  # reset mid-body: what arrived is logged, the request ends
            if "bodylog" in args and got:
                with lock, open(args["bodylog"], "ab") as f:
                    f.write(got)
            digest.update(got)
            if keep:
                data.extend(got)
            return len(got)

        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                try:
                    line = self.rfile.readline()
                except OSError:
                    return
                if not line:
                    return
                size = int(line.split(b";")[0], 16)
                last = size == 0
                while size > 0:
                    got = take(min(size, 65536))
                    if got == 0:
                        return
                    size -= got
                self.rfile.readline()
                if last:
                    break
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left > 0:
                got = take(min(left, 65536))
                if got == 0:
                    return
                left -= got
        if not keep:
            body = ("sha256 %s\n" % digest.hexdigest()).encode()
        else:
            if "reqlog" in args:
                with lock, open(args["reqlog"], "a") as f:
                    f.write("body: " + data.decode(errors="replace") + "\n")
            body = ("got %d bytes\n" % len(data)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ThreadingHTTP(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def serve(srv):
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        with lock:
            stats["echo_conns"] += 1
            stats["echo_open"] += 1
        try:
            while True:
                d = self.request.recv(65536)
                if not d:
                    break
                with lock:
                    stats["echo_bytes"] += len(d)
                self.request.sendall(d)
        except OSError:
            pass  # reset by the peer: the connection is over all the same
        finally:
            with lock:
                stats["echo_open"] -= 1


class Banner(socketserver.BaseRequestHandler):
    def handle(self):
        with lock:
            stats["banner_conns"] += 1
        self.request.sendall(b"SSH-2.0-cordon-test\r\n")
        d = self.request.recv(1024)
        if d:
            self.request.sendall(b"you said: " + d)


class Stats(socketserver.BaseRequestHandler):
    def handle(self):
        with lock:
            self.request.sendall(json.dumps(stats).encode() + b"\n")


class TCP(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


ports = {}
ports["http"] = serve(ThreadingHTTP(("127.0.0.1", 0), Handler))
if "cert" in args:
    https = ThreadingHTTP(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args["cert"], args["key"])
    https.socket = ctx.wrap_socket(https.socket, server_side=True)
    ports["https"] = serve(https)
ports["echo"] = serve(TCP(("127.0.0.1", 0), Echo))
ports["banner"] = serve(TCP(("127.0.0.1", 0), Banner))
ports["stats"] = serve(TCP(("127.0.0.1", 0), Stats))

if "dns" in args:
    # A fake upstream resolver: counts every query it receives and answers NXDOMAIN.
    host, port = args["dns"].rsplit(":", 1)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((host, int(port)))

    def dns_loop():
        while True:
            data, peer = u.recvfrom(4096)
            with lock:
                stats["dns_queries"] += 1
            if len(data) >= 12:
                u.sendto(data[:2] + b"\x81\x83" + data[4:6] + b"\0" * 6 + data[12:], peer)

    threading.Thread(target=dns_loop, daemon=True).start()
    ports["dns"] = u.getsockname()[1]

print(json.dumps(ports), flush=True)
sys.stdin.read()
