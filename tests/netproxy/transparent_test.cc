// Transparent capture for real: a network namespace of the test's own with the capture ruleset
// (capture.h) installed, listening sockets created inside it and handed to cordon-netproxy running
// in the host namespace, and curl / python3 inside the namespace reaching loopback upstreams by
// name - or being refused, each refusal with its event.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <sched.h>

#include <atomic>
#include <filesystem>
#include <sstream>

#include "netproxy/capture.h"
#include "netproxy/nflog.h"
#include "tests/netproxy/egress_sink.h"
#include "tests/netproxy/fixture.h"
#include "tests/netproxy/recorder.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;

// Binds a dual-stack [::]:port socket (v4 arrives v4-mapped); returns the fd and sets *port.
int dual_stack(int type, int* port) {
  int fd = socket(AF_INET6, type | SOCK_CLOEXEC, 0);
  int zero = 0, one = 1;
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  a.sin6_port = htons(static_cast<uint16_t>(*port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  if (type == SOCK_STREAM) {
    listen(fd, 128);
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin6_port);
  return fd;
}

// A sandbox-like network namespace: lo up, default routes via lo, the capture ruleset, and
// cordon-netproxy (host namespace) serving the sockets made inside it. Everything is undone in
// the destructor (proxy stopped, namespace deleted).
class CaptureSandbox {
 public:
  CaptureSandbox(const TempDir& dir, const std::string& policy_json) {
    static std::atomic<int> counter{0};
    name_ = "cordon-np-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    ok_ = sh("ip netns add " + name_) && sh("ip -n " + name_ + " link set lo up") &&
          sh("ip -n " + name_ + " route add default dev lo src 127.0.0.1") &&
          sh("ip -n " + name_ + " -6 route add default dev lo src ::1");
    if (!ok_) return;
    // `ip netns exec` bind-mounts /etc/netns/NAME/resolv.conf over /etc/resolv.conf. The
    // nameserver is never reached: the ruleset redirects port 53 to the proxy.
    std::filesystem::create_directories("/etc/netns/" + name_);
    write_file("/etc/netns/" + name_ + "/resolv.conf",
               "nameserver 198.51.100.53\noptions timeout:2 attempts:1\n");
    int proxy_fd = -1, udp_fd = -1, tcp_fd = -1, explicit_fd = -1, nflog_fd = -1;
    ok_ = in_namespace([&] {
      proxy_port_ = 0;
      proxy_fd = dual_stack(SOCK_STREAM, &proxy_port_);
      dns_port_ = 0;
      tcp_fd = dual_stack(SOCK_STREAM, &dns_port_);
      udp_fd = dual_stack(SOCK_DGRAM, &dns_port_);
      // The explicit proxy inside the sandbox: 127.0.0.1:E, reached directly (loopback).
      explicit_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      if (explicit_fd < 0 || bind(explicit_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
          listen(explicit_fd, 64) != 0 ||
          getsockname(explicit_fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        return false;
      }
      explicit_port_ = ntohs(a.sin_port);
      if (proxy_fd < 0 || tcp_fd < 0 || udp_fd < 0) return false;
      netproxy::CaptureConfig cfg;
      cfg.proxy_port = static_cast<uint16_t>(proxy_port_);
      cfg.dns_port = static_cast<uint16_t>(dns_port_);
      cfg.nflog_group = 7;
      auto st = netproxy::install_capture_rules(cfg);
      if (!st.ok()) {
        ADD_FAILURE() << st.error().to_string();
        return false;
      }
      // The NFLOG socket belongs to the namespace it is made in, like the launcher's.
      auto nf = netproxy::open_nflog_socket(cfg.nflog_group);
      if (!nf.ok()) {
        ADD_FAILURE() << nf.error().to_string();
        return false;
      }
      nflog_fd = nf.value().release();
      return true;
    });
    if (!ok_) return;
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return;
    proxy_ = std::make_unique<ProxyUnderTest>(
        dir, policy_json,
        std::vector<std::string>{"--transparent-fd", "3", "--dns-fd", "4", "--dns-tcp-fd", "5",
                                 "--ready-fd", "6", "--listen-fd", "7", "--nflog-fd", "8"},
        std::vector<std::pair<int, int>>{{proxy_fd, 3},
                                         {udp_fd, 4},
                                         {tcp_fd, 5},
                                         {ready[1], 6},
                                         {explicit_fd, 7},
                                         {nflog_fd, 8}});
    // Only the proxy holds the sockets now: if it dies, connections are refused (fail closed).
    close(proxy_fd);
    close(udp_fd);
    close(tcp_fd);
    close(explicit_fd);
    close(nflog_fd);
    close(ready[1]);
    pollfd p{ready[0], POLLIN, 0};
    char b = 0;
    ok_ = poll(&p, 1, 20000) == 1 && read(ready[0], &b, 1) == 1;
    close(ready[0]);
  }
  ~CaptureSandbox() {
    proxy_.reset();
    sh("ip netns del " + name_);
    std::error_code ec;
    std::filesystem::remove_all("/etc/netns/" + name_, ec);
  }

  bool ok() const { return ok_; }
  int explicit_port() const { return explicit_port_; }
  ProxyUnderTest& proxy() { return *proxy_; }
  const std::string& events() const { return proxy_->events(); }

  // Runs argv inside the namespace.
  RunResult exec(std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", name_});
    return run_program(argv);
  }
  RunResult curl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{"curl", "-sS", "--noproxy", "*", "--max-time", "20"};
    argv.insert(argv.end(), args.begin(), args.end());
    return exec(argv);
  }

  // Runs f with the calling thread in the namespace (setns affects only this thread).
  template <typename F>
  bool in_namespace(F f) {
    int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int ns = open(("/run/netns/" + name_).c_str(), O_RDONLY | O_CLOEXEC);
    bool ok = self >= 0 && ns >= 0 && setns(ns, CLONE_NEWNET) == 0;
    if (ok) {
      ok = f();
      if (setns(self, CLONE_NEWNET) != 0) std::abort();  // never leave the thread astray
    }
    if (self >= 0) close(self);
    if (ns >= 0) close(ns);
    return ok;
  }

 private:
  static bool sh(const std::string& cmd) { return run_program({"sh", "-c", cmd}).exit_code() == 0; }
  std::string name_;
  bool ok_ = false;
  int proxy_port_ = 0, dns_port_ = 0, explicit_port_ = 0;
  std::unique_ptr<ProxyUnderTest> proxy_;
};

class NetproxyTransparent : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    files_ = new TempDir();
    ASSERT_TRUE(make_test_files(*files_));
    up_ = new Upstreams(
        {"root=" + *files_ / "www", "cert=" + *files_ / "srv.pem", "key=" + *files_ / "srv.key"});
    ASSERT_TRUE(up_->ok());
  }
  static void TearDownTestSuite() {
    delete up_;
    delete files_;
    up_ = nullptr;
    files_ = nullptr;
  }
  void SetUp() override {
    CORDON_REQUIRE_ROOT();
    std::string http = std::to_string(up_->port("http"));
    std::string https = std::to_string(up_->port("https"));
    std::string banner = std::to_string(up_->port("banner"));
    box_ = std::make_unique<CaptureSandbox>(dir_, R"({"version": 1, "network": {
          "allow": ["api.test:)" + http + R"(", "api.test:)" +
                                                      https + R"(",
                    "other.test:)" + http + R"(", "other.test:)" +
                                                      https + R"(",
                    "banner.test:)" + banner + R"(", "rules.test:)" +
                                                      http + R"("],
          "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1",
                      "banner.test": "127.0.0.1", "rules.test": "127.0.0.1"},
          "rules": [{"host": "rules.test", "methods": ["GET"], "paths": ["/hello.txt"],
                     "action": "allow"}]}})");
    ASSERT_TRUE(box_->ok());
  }
  void TearDown() override { box_.reset(); }

  std::string url(const std::string& scheme, const std::string& host, const std::string& path) {
    return scheme + "://" + host + ":" + std::to_string(up_->port(scheme)) + path;
  }

  static TempDir* files_;
  static Upstreams* up_;
  TempDir dir_;
  std::unique_ptr<CaptureSandbox> box_;
};
TempDir* NetproxyTransparent::files_ = nullptr;
Upstreams* NetproxyTransparent::up_ = nullptr;

TEST_F(NetproxyTransparent, CurlReachesUpstreamByNameOverHttpAndHttps) {
  auto r = box_->curl({url("http", "api.test", "/hello.txt")});
  ASSERT_EQ(r.exit_code(), 0) << r.err << dump_events(box_->events());
  EXPECT_EQ(r.out, "hello through cordon\n");
  auto s =
      box_->curl({"--cacert", files_->path() + "/ca.pem", url("https", "api.test", "/hello.txt")});
  ASSERT_EQ(s.exit_code(), 0) << s.err;
  EXPECT_EQ(s.out, "hello through cordon\n");
  auto dns = events_of(box_->events(), "net.dns", [](auto& e) { return e["name"] == "api.test"; });
  ASSERT_FALSE(dns.empty());
  EXPECT_EQ(dns[0]["decision"], "allow");
  auto conns = wait_events(box_->events(), "net.connect", 2);
  ASSERT_EQ(conns.size(), 2u);
  EXPECT_EQ(conns[0]["mode"], "transparent");
  EXPECT_EQ(conns[0]["name"], "api.test");
  EXPECT_EQ(conns[0]["address"], "127.0.0.1");
  EXPECT_EQ(conns[1]["sni"], "api.test");
  EXPECT_GT(conns[1]["bytes_in"].get<int>(), 100);
}

TEST_F(NetproxyTransparent, EveryKeptAliveRequestIsDecidedAndLogged) {
  auto r = box_->curl(
      {url("http", "api.test", "/hello.txt"), url("http", "api.test", "/repo.git/HEAD")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\nref: refs/heads/master\n");
  auto http = wait_events(box_->events(), "net.http", 2);
  ASSERT_EQ(http.size(), 2u) << dump_events(box_->events());
  EXPECT_EQ(http[0]["url"], url("http", "api.test", "/hello.txt"));
  EXPECT_EQ(http[0]["status"], 200);
  EXPECT_EQ(http[1]["url"], url("http", "api.test", "/repo.git/HEAD"));
  EXPECT_EQ(http[1]["mode"], "transparent");
  // A second request on the same connection naming another host is refused.
  std::string code =
      "import socket,sys\n"
      "s=socket.create_connection(('api.test',int(sys.argv[1])),timeout=20)\n"
      "s.sendall(b'GET /hello.txt HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n')\n"
      "b=b''\n"
      "while not b.endswith(b'cordon\\n'): b+=s.recv(1000)\n"
      "s.sendall(b'GET /hello.txt HTTP/1.1\\r\\nHost: other.test\\r\\n\\r\\n')\n"
      "b=b''\n"
      "while True:\n"
      "  d=s.recv(1000)\n"
      "  if not d: break\n"
      "  b+=d\n"
      "print(b.decode().split('\\r\\n')[0]); print(b.decode().split('\\r\\n\\r\\n')[1], end='')\n";
  auto p = box_->exec({"python3", "-c", code, std::to_string(up_->port("http"))});
  ASSERT_EQ(p.exit_code(), 0) << p.err;
  EXPECT_EQ(p.out,
            "HTTP/1.1 403 Forbidden\ncordon: Host \"other.test\" does not match api.test, "
            "the name this connection was decided for\n");
}

// network.rules hold for redirected plain HTTP as for the HTTP proxy: the refused request never
// reaches the upstream, and a host without rules is not affected.
TEST_F(NetproxyTransparent, HttpRulesDecideRedirectedRequests) {
  auto ok = box_->curl({url("http", "rules.test", "/hello.txt")});
  ASSERT_EQ(ok.exit_code(), 0) << ok.err << dump_events(box_->events());
  EXPECT_EQ(ok.out, "hello through cordon\n");
  auto post =
      box_->curl({"-w", "%{http_code}", "--data", "x", url("http", "rules.test", "/upload")});
  EXPECT_EQ(post.out, "cordon: POST rules.test/upload is denied by network.rules (no match)\n403");
  auto dots = box_->curl({"--path-as-is", "-w", "%{http_code}",
                          url("http", "rules.test", "/hello.txt/%2e%2e/repo.git/HEAD")});
  EXPECT_EQ(dots.out,
            "cordon: GET rules.test/repo.git/HEAD is denied by network.rules (no match)\n403");
  auto other = box_->curl({url("http", "api.test", "/repo.git/HEAD")});
  EXPECT_EQ(other.out, "ref: refs/heads/master\n");
  auto refused = wait_events(box_->events(), "net.refused", 2);
  ASSERT_EQ(refused.size(), 2u) << dump_events(box_->events());
  EXPECT_EQ(refused[0]["mode"], "transparent");
  EXPECT_EQ(refused[0]["rule"], "network.rules (no match)");
  EXPECT_EQ(refused[0]["method"], "POST");
  auto http = wait_events(box_->events(), "net.http", 2);
  ASSERT_EQ(http.size(), 2u) << dump_events(box_->events());
  EXPECT_EQ(http[0]["url"], url("http", "rules.test", "/hello.txt"));
  EXPECT_EQ(http[1]["url"], url("http", "api.test", "/repo.git/HEAD"));
}

// Proxy-aware clients inside the sandbox use the explicit listener the launcher made there
// (--listen-fd) and hand us names directly.
TEST_F(NetproxyTransparent, ExplicitProxyInsideTheSandbox) {
  std::string proxy = "http://127.0.0.1:" + std::to_string(box_->explicit_port());
  // (Not curl() above: its --noproxy '*' would override -x.)
  auto r = box_->exec(
      {"curl", "-sS", "--max-time", "20", "-x", proxy, url("http", "api.test", "/hello.txt")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\n");
  auto s = box_->exec({"curl", "-sS", "--max-time", "20", "--socks5-hostname",
                       "127.0.0.1:" + std::to_string(box_->explicit_port()), "--cacert",
                       files_->path() + "/ca.pem", url("https", "api.test", "/hello.txt")});
  ASSERT_EQ(s.exit_code(), 0) << s.err;
  EXPECT_EQ(s.out, "hello through cordon\n");
  auto conns = wait_events(box_->events(), "net.connect", 2);
  ASSERT_EQ(conns.size(), 2u);
  EXPECT_EQ(conns[0]["mode"], "http");
  EXPECT_EQ(conns[1]["mode"], "socks5");
  // Nothing went through our DNS: the names came straight from the clients.
  EXPECT_TRUE(events_of(box_->events(), "net.dns").empty());
}

TEST_F(NetproxyTransparent, GitCloneThroughCapture) {
  auto r = box_->exec({"git", "clone", "-q", url("http", "api.test", "/repo.git"), dir_ / "clone"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "clone/README"));
}

TEST_F(NetproxyTransparent, UnallowedNameIsNxdomainAndRawIpsAreRefused) {
  auto r = box_->curl({"http://evil.test/"});
  EXPECT_EQ(r.exit_code(), 6) << r.err;  // could not resolve host
  auto dns =
      wait_events(box_->events(), "net.dns", 1, [](auto& e) { return e["name"] == "evil.test"; });
  ASSERT_FALSE(dns.empty());
  EXPECT_EQ(dns[0]["rcode"], "NXDOMAIN");
  // The same server by its loopback address: inside the sandbox that is the sandbox's own lo,
  // never redirected, so nothing answers.
  auto lo = box_->curl({"http://127.0.0.1:" + std::to_string(up_->port("http")) + "/"});
  EXPECT_EQ(lo.exit_code(), 7) << lo.err;
  // Documentation addresses v4 and v6: the proxy refuses them before dialling anything; a
  // plaintext HTTP request gets the readable 403.
  auto v4 = box_->curl({"-w", "%{http_code}", "http://198.51.100.7/"});
  EXPECT_EQ(v4.out, "cordon: 198.51.100.7:80 is not in network.allow\n403");
  auto v6 = box_->curl({"-g", "-w", "%{http_code}", "http://[2001:db8::1]/"});
  EXPECT_EQ(v6.out, "cordon: [2001:db8::1]:80 is not in network.allow\n403");
  auto refused = wait_events(box_->events(), "net.refused", 2);
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_EQ(refused[0]["original_dst"], "198.51.100.7");
  EXPECT_EQ(refused[0]["peek"], "http");
  EXPECT_EQ(refused[1]["original_dst"], "2001:db8::1");
  EXPECT_EQ(events_of(box_->events(), "net.connect").size(), 0u);
}

// Raw-IP connections from the sandbox to documentation addresses routed into a counting sink:
// refused by the proxy, and not one packet reaches the sink.
TEST_F(NetproxyTransparent, RawIpConnectionsNeverLeave) {
  EgressSink sink;
  ASSERT_TRUE(sink.ok());
  for (const std::string& target : {"http://" + sink.v4a() + "/", "https://" + sink.v4b() + "/",
                                    "http://[" + sink.v6() + "]:8080/"}) {
    auto r = box_->curl({"-g", "--max-time", "10", target});
    EXPECT_TRUE(r.exit_code() != 0 || r.out.find("cordon: ") == 0) << target;
  }
  auto ev = wait_events(box_->events(), "net.refused", 3);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0]["original_dst"], sink.v4a());
  EXPECT_EQ(ev[1]["original_dst"], sink.v4b());
  EXPECT_EQ(ev[1]["peek"], "tls");
  EXPECT_EQ(ev[2]["original_dst"], sink.v6());
  EXPECT_EQ(sink.packets(), 0);
}

TEST_F(NetproxyTransparent, HostOrSniOfOneNameAtAnothersAddressIsRefused) {
  // HTTP: other.test's address, api.test in Host.
  auto r = box_->curl(
      {"-H", "Host: api.test", "-w", "%{http_code}", url("http", "other.test", "/hello.txt")});
  EXPECT_THAT(r.out, HasSubstr("does not match other.test"));
  EXPECT_THAT(r.out, HasSubstr("403"));
  // TLS: SNI api.test sent to other.test's address.
  auto t = box_->curl({"--cacert", files_->path() + "/ca.pem", "--connect-to",
                       "api.test:" + std::to_string(up_->port("https")) +
                           ":other.test:" + std::to_string(up_->port("https")),
                       url("https", "api.test", "/hello.txt")});
  EXPECT_NE(t.exit_code(), 0);
  auto ev = wait_events(box_->events(), "net.refused", 2);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["rule"], "network (name mismatch)");
  EXPECT_EQ(ev[0]["name"], "api.test");
  EXPECT_EQ(ev[0]["resolved_name"], "other.test");
  EXPECT_EQ(ev[1]["peek"], "tls");
  EXPECT_EQ(events_of(box_->events(), "net.connect").size(), 0u);
}

// Domain fronting on the transparent path, seen from the upstream: a first flight whose HTTP
// Host or TLS SNI names another host than the one the address was resolved from is refused before
// anything is dialled (the upstream never sees a connection, let alone a byte), and the refusal
// frees no slot it did not take: with max_connections_per_host 1 the next honest connection works.
constexpr const char* kFrontingPy = R"(import socket, ssl, sys, time
port = int(sys.argv[1])
def late(name):
    s = socket.create_connection((name, port), timeout=20)
    time.sleep(0.2)  # a slow first flight: the decision waits for it
    return s
def read_all(s):
    b = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            b += d
    except OSError:
        pass
    return b
s = late("echo.test")
s.sendall(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
print(read_all(s).split(b"\r\n")[0].decode())
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    ctx.wrap_socket(late("echo.test"), server_hostname="api.test")
    print("tls relayed")
except (OSError, ssl.SSLError):
    print("tls refused")
s = late("echo.test")
s.sendall(b"ping")
print("echo", s.recv(100).decode())
s.shutdown(socket.SHUT_WR)
read_all(s)
s.close()
)";

TEST_F(NetproxyTransparent, FrontedFirstFlightNeverReachesTheUpstream) {
  const std::string echo = std::to_string(up_->port("echo"));
  const std::string http = std::to_string(up_->port("http"));
  box_.reset();
  box_ = std::make_unique<CaptureSandbox>(
      dir_, R"({"version": 1, "network": {"allow": ["echo.test:)" + echo + R"(", "api.test:)" +
                http + R"("], "resolve": {"echo.test": "127.0.0.1", "api.test": "127.0.0.1"},
                "max_connections_per_host": 1}})");
  ASSERT_TRUE(box_->ok());
  const auto before = up_->stats();
  auto r = box_->exec({"python3", "-c", kFrontingPy, echo});
  ASSERT_EQ(r.exit_code(), 0) << r.err << dump_events(box_->events());
  EXPECT_EQ(r.out, "HTTP/1.1 403 Forbidden\ntls refused\necho ping\n")
      << dump_events(box_->events());
  // One upstream connection (the honest one), closed; its "ping" is all the echo server got.
  nlohmann::json after;
  for (int i = 0; i < 250; ++i) {
    after = up_->stats();
    if (after.value("echo_conns", 0) - before.value("echo_conns", 0) >= 1 &&
        after.value("echo_open", -1) == 0) {
      break;
    }
    usleep(20000);
  }
  EXPECT_EQ(after.value("echo_conns", 0) - before.value("echo_conns", 0), 1) << after.dump();
  EXPECT_EQ(after.value("echo_open", -1), 0) << after.dump();
  EXPECT_EQ(after.value("echo_bytes", 0) - before.value("echo_bytes", 0), 4) << after.dump();
  auto refused = wait_events(box_->events(), "net.refused", 2);
  ASSERT_EQ(refused.size(), 2u) << dump_events(box_->events());
  for (const auto& e : refused) {
    EXPECT_EQ(e["rule"], "network (name mismatch)");
    EXPECT_EQ(e["name"], "api.test");
    EXPECT_EQ(e["resolved_name"], "echo.test");
  }
  EXPECT_EQ(refused[0]["peek"], "http");
  EXPECT_EQ(refused[1]["peek"], "tls");
  auto conns = wait_events(box_->events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u) << dump_events(box_->events());
  EXPECT_EQ(conns[0]["name"], "echo.test");
  EXPECT_EQ(conns[0]["bytes_out"], 4);
  EXPECT_TRUE(events_of(box_->events(), "limit.hit").empty()) << dump_events(box_->events());
}

// Bytes that began a request head or a TLS record and do not parse are refused, never relayed
// as an opaque stream: a lenient server would answer them with the SNI, Host and rule checks
// skipped (two Host headers fronting another name, a blank line first, bare LF line ends, a
// zero-length handshake record before the ClientHello). An honest stream still passes.
constexpr const char* kMalformedPy = R"(import socket, sys
port = int(sys.argv[1])
def send(data):
    s = socket.create_connection(("echo.test", port), timeout=20)
    s.sendall(data)
    b = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            b += d
    except OSError:
        pass
    s.close()
    return b.split(b"\r\n")[0].decode() or "reset"
print(send(b"POST /up HTTP/1.1\r\nHost: echo.test\r\nHost: evil.test\r\n\r\nSECRET"))
print(send(b"\r\nPOST /up HTTP/1.1\r\nHost: evil.test\r\n\r\nSECRET"))
print(send(b"POST /up HTTP/1.1\nHost: evil.test\n\nSECRET"))
print(send(b"POST /up HTTP/1.1\r\nHost: echo.test:1:1\r\n\r\nSECRET"))
print(send(b"\x16\x03\x01\x00\x00" + b"\x16\x03\x01\x00\x05SECRET"))
s = socket.create_connection(("echo.test", port), timeout=20)
s.sendall(b"ping")
print("echo", s.recv(100).decode())
)";

TEST_F(NetproxyTransparent, MalformedFirstFlightsAreRefusedNotRelayed) {
  const std::string echo = std::to_string(up_->port("echo"));
  box_.reset();
  box_ = std::make_unique<CaptureSandbox>(
      dir_, R"({"version": 1, "network": {"allow": ["echo.test:)" + echo +
                R"("], "resolve": {"echo.test": "127.0.0.1"}}})");
  ASSERT_TRUE(box_->ok());
  const auto before = up_->stats();
  auto r = box_->exec({"python3", "-c", kMalformedPy, echo});
  ASSERT_EQ(r.exit_code(), 0) << r.err << dump_events(box_->events());
  EXPECT_EQ(r.out,
            "HTTP/1.1 400 Bad Request\nHTTP/1.1 400 Bad Request\nHTTP/1.1 400 Bad Request\n"
            "HTTP/1.1 400 Bad Request\nreset\necho ping\n")
      << dump_events(box_->events());
  nlohmann::json after;
  for (int i = 0; i < 250; ++i) {
    after = up_->stats();
    if (after.value("echo_open", -1) == 0 &&
        after.value("echo_conns", 0) - before.value("echo_conns", 0) >= 1) {
      break;
    }
    usleep(20000);
  }
  // Only the honest connection was dialled; its "ping" is all the echo server got.
  EXPECT_EQ(after.value("echo_conns", 0) - before.value("echo_conns", 0), 1) << after.dump();
  EXPECT_EQ(after.value("echo_bytes", 0) - before.value("echo_bytes", 0), 4) << after.dump();
  auto refused = wait_events(box_->events(), "net.refused", 5);
  ASSERT_EQ(refused.size(), 5u) << dump_events(box_->events());
  for (const auto& e : refused) {
    EXPECT_EQ(e["rule"], "network (first flight malformed)") << e.dump();
    EXPECT_EQ(e["peek"], "malformed") << e.dump();
    EXPECT_EQ(e["mode"], "transparent") << e.dump();
  }
}

// A request sent to a server names a path: a URL in its place names another host, which the
// server (or a proxy behind it) may go to instead of the one decided on. Refused with 400.
TEST_F(NetproxyTransparent, AUrlAsTheRequestTargetIsRefused) {
  auto r = box_->curl({"-s", "-o", "/dev/null", "-w", "%{http_code}", "--request-target",
                       "http://other.test/hello.txt", url("http", "api.test", "/hello.txt")});
  EXPECT_EQ(r.out, "400") << r.err << dump_events(box_->events());
  auto ok = box_->curl({url("http", "api.test", "/hello.txt")});
  EXPECT_EQ(ok.out, "hello through cordon\n") << ok.err;
  auto refused = wait_events(box_->events(), "net.refused", 1);
  ASSERT_EQ(refused.size(), 1u) << dump_events(box_->events());
  EXPECT_EQ(refused[0]["rule"], "network (request target)");
  EXPECT_EQ(refused[0]["name"], "api.test");
}

// A host with network.rules is reached only by HTTP or TLS: any other stream to it would pass
// with no rule applied, so it is refused before anything is dialled.
TEST_F(NetproxyTransparent, AnInspectedHostTakesNoOpaqueStream) {
  const std::string echo = std::to_string(up_->port("echo"));
  box_.reset();
  box_ = std::make_unique<CaptureSandbox>(
      dir_, R"({"version": 1, "network": {"allow": ["echo.test:)" + echo +
                R"("], "resolve": {"echo.test": "127.0.0.1"},
                "rules": [{"host": "echo.test", "methods": ["GET"], "paths": ["/ok"],
                           "action": "allow"}]}})");
  ASSERT_TRUE(box_->ok());
  const auto before = up_->stats();
  auto r = box_->exec({"python3", "-c", R"(import socket, sys
s = socket.create_connection(("echo.test", int(sys.argv[1])), timeout=20)
s.sendall(b"SEND SECRET")
try:
    print(repr(s.recv(100)))
except OSError as e:
    print("reset")
)",
                       echo});
  ASSERT_EQ(r.exit_code(), 0) << r.err << dump_events(box_->events());
  EXPECT_EQ(r.out, "reset\n") << dump_events(box_->events());
  auto refused = wait_events(box_->events(), "net.refused", 1);
  ASSERT_EQ(refused.size(), 1u) << dump_events(box_->events());
  EXPECT_EQ(refused[0]["rule"], "network.inspect (not TLS or HTTP)");
  EXPECT_EQ(refused[0]["peek"], "opaque");
  usleep(200000);
  EXPECT_EQ(up_->stats().value("echo_conns", 0) - before.value("echo_conns", 0), 0);
}

// Caps on the transparent path, exact: a connection a cap refuses, and a fronted one, are never
// dialled and not counted in connections_per_minute; the honest ones are, each once.
constexpr const char* kCapsPy = R"(import socket, sys, time
port = int(sys.argv[1])
def get(name, host):
    s = socket.create_connection((name, port), timeout=20)
    s.sendall(b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
    b = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        b += d
    return b.split(b"\r\n")[0].decode() + " " + b.split(b"\r\n\r\n", 1)[-1].decode().strip()
def ping(name):
    s = socket.create_connection((name, port), timeout=20)
    s.sendall(b"ping")
    got = s.recv(100).decode()
    return s, got
def close(s):
    s.shutdown(socket.SHUT_WR)
    while s.recv(100):
        pass
    s.close()
    time.sleep(0.1)  # the proxy frees the slot as the tunnel ends
held, got = ping("echo.test")          # 1st this minute
print("held", got)
print(get("echo.test", "echo.test"))   # max_connections_per_host 1: refused, not counted
close(held)
print(get("echo.test", "api.test"))    # fronting: refused, not counted
second, got = ping("echo.test")        # 2nd this minute
print("second", got)
close(second)
print(get("echo.test", "echo.test"))   # connections_per_minute 2: the rate cap
)";

// A plain-HTTP request refused on its head (network.rules, a folded header line, a Host of
// another name) is refused before the upstream is dialled: the server sees no connection at all.
TEST_F(NetproxyTransparent, ARefusedRequestSendsNoPacketTowardTheServer) {
  Recorder rec;
  ASSERT_GT(rec.port(), 0);
  const std::string port = std::to_string(rec.port());
  box_.reset();
  box_ = std::make_unique<CaptureSandbox>(
      dir_, R"({"version": 1, "network": {"allow": ["count.test:)" + port + R"(", "api.test:)" +
                port + R"("],
                "resolve": {"count.test": "127.0.0.1", "api.test": "127.0.0.1"},
                "rules": [{"host": "count.test", "methods": ["GET"], "paths": ["/ok"],
                           "action": "allow"}]}})");
  ASSERT_TRUE(box_->ok());
  const std::string base = "http://count.test:" + port;
  auto denied = box_->curl({"-w", " %{http_code}", base + "/denied"});
  EXPECT_EQ(denied.out,
            "cordon: GET count.test/denied is denied by network.rules (no match)\n 403");
  auto post = box_->curl({"-w", " %{http_code}", "--data", "x", base + "/ok"});
  EXPECT_THAT(post.out, HasSubstr(" 403"));
  const std::string raw =
      "import socket,sys\n"
      "s=socket.create_connection(('count.test',int(sys.argv[1])),timeout=20)\n"
      "s.sendall(sys.argv[2].encode())\n"
      "b=b''\n"
      "while True:\n"
      "  d=s.recv(1000)\n"
      "  if not d: break\n"
      "  b+=d\n"
      "print(b.decode().split('\\r\\n')[0])\n";
  auto folded = box_->exec({"python3", "-c", raw, port,
                            "GET /ok HTTP/1.1\r\nHost: count.test\r\nX-A: one\r\n two\r\n\r\n"});
  EXPECT_EQ(folded.out, "HTTP/1.1 400 Bad Request\n") << folded.err;
  auto fronted =
      box_->exec({"python3", "-c", raw, port, "GET /ok HTTP/1.1\r\nHost: api.test\r\n\r\n"});
  EXPECT_EQ(fronted.out, "HTTP/1.1 403 Forbidden\n") << fronted.err;
  // A head the sniffer cannot read is refused too, never relayed as opaque bytes past the rules.
  auto twice = box_->exec({"python3", "-c", raw, port,
                           "GET /denied HTTP/1.1\r\nHost: count.test\r\nHost: count.test\r\n\r\n"});
  EXPECT_EQ(twice.out, "HTTP/1.1 400 Bad Request\n") << twice.err;
  auto refused = wait_events(box_->events(), "net.refused", 5);
  ASSERT_EQ(refused.size(), 5u) << dump_events(box_->events());
  EXPECT_EQ(refused[2]["rule"], "network (obs-fold)");
  EXPECT_EQ(refused[2]["mode"], "transparent");
  EXPECT_EQ(refused[4]["rule"], "network (first flight malformed)");
  EXPECT_EQ(rec.accepted(), 0) << dump_events(box_->events());
  EXPECT_TRUE(events_of(box_->events(), "net.connect").empty()) << dump_events(box_->events());
  // The allowed request is dialled and answered: the count above can fail.
  auto ok = box_->curl({base + "/ok"});
  EXPECT_EQ(ok.out, "ok\n") << ok.err << dump_events(box_->events());
  EXPECT_EQ(rec.accepted(), 1);
  EXPECT_EQ(wait_events(box_->events(), "net.connect", 1).size(), 1u);
}

TEST_F(NetproxyTransparent, CapsAreExactAndRefusalsNeverDial) {
  const std::string echo = std::to_string(up_->port("echo"));
  box_.reset();
  box_ = std::make_unique<CaptureSandbox>(
      dir_, R"({"version": 1, "network": {"allow": ["echo.test:)" + echo + R"("],
                "resolve": {"echo.test": "127.0.0.1"}, "max_connections_per_host": 1,
                "connections_per_minute": 2}})");
  ASSERT_TRUE(box_->ok());
  const auto before = up_->stats();
  auto r = box_->exec({"python3", "-c", kCapsPy, echo});
  ASSERT_EQ(r.exit_code(), 0) << r.err << dump_events(box_->events());
  EXPECT_EQ(r.out,
            "held ping\n"
            "HTTP/1.1 403 Forbidden cordon: connection cap for echo.test: "
            "network.max_connections_per_host (1) reached\n"
            "HTTP/1.1 403 Forbidden cordon: Host \"api.test\" does not match echo.test, the name "
            "198.18.0.2 was resolved from (domain fronting)\n"
            "second ping\n"
            "HTTP/1.1 403 Forbidden cordon: rate cap network.connections_per_minute (2) reached\n")
      << dump_events(box_->events());
  nlohmann::json after;
  for (int i = 0; i < 250; ++i) {
    after = up_->stats();
    if (after.value("echo_conns", 0) - before.value("echo_conns", 0) >= 2 &&
        after.value("echo_open", -1) == 0) {
      break;
    }
    usleep(20000);
  }
  EXPECT_EQ(after.value("echo_conns", 0) - before.value("echo_conns", 0), 2) << after.dump();
  EXPECT_EQ(after.value("echo_open", -1), 0) << after.dump();
  EXPECT_EQ(after.value("echo_bytes", 0) - before.value("echo_bytes", 0), 8) << after.dump();
  auto limits = wait_events(box_->events(), "limit.hit", 2);
  ASSERT_EQ(limits.size(), 2u) << dump_events(box_->events());
  EXPECT_EQ(limits[0]["cap"], "network.max_connections_per_host");
  EXPECT_EQ(limits[1]["cap"], "network.connections_per_minute");
  EXPECT_EQ(events_of(box_->events(), "net.refused").size(), 3u) << dump_events(box_->events());
  EXPECT_EQ(wait_events(box_->events(), "net.connect", 2).size(), 2u)
      << dump_events(box_->events());
}

TEST_F(NetproxyTransparent, ServerSpeaksFirstAfterPeekDeadline) {
  std::string code =
      "import socket,sys\n"
      "s=socket.create_connection(('banner.test',int(sys.argv[1])),timeout=20)\n"
      "b=b''\n"
      "while not b.endswith(b'\\r\\n'): b+=s.recv(100)\n"
      "s.sendall(b'hi')\n"
      "print(b.decode().strip(), s.recv(100).decode())\n";
  auto r = box_->exec({"python3", "-c", code, std::to_string(up_->port("banner"))});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "SSH-2.0-cordon-test you said: hi\n");
  auto conns = wait_events(box_->events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["name"], "banner.test");
}

// The plaintext HTTP path's byte accounting and half-close: a client that sends its request and
// then half-closes still reads the whole response and the proxy's EOF after it, and the events
// count exactly the bytes that crossed each way.
TEST_F(NetproxyTransparent, HalfClosedHttpClientGetsTheWholeResponseAndBytesAreCounted) {
  std::string code =
      "import socket,sys\n"
      "req=b'GET /hello.txt HTTP/1.1\\r\\nHost: api.test\\r\\nConnection: close\\r\\n\\r\\n'\n"
      "s=socket.create_connection(('api.test',int(sys.argv[1])),timeout=20)\n"
      "s.sendall(req)\n"
      "s.shutdown(socket.SHUT_WR)\n"
      "b=b''\n"
      "while True:\n"
      "  d=s.recv(1000)\n"
      "  if not d: break\n"
      "  b+=d\n"
      "print(len(req), len(b)); print(b.decode().split('\\r\\n')[0]);"
      " print(b.decode().split('\\r\\n\\r\\n')[1], end='')\n";
  auto r = box_->exec({"python3", "-c", code, std::to_string(up_->port("http"))});
  ASSERT_EQ(r.exit_code(), 0) << r.err << dump_events(box_->events());
  std::istringstream out(r.out);
  size_t sent = 0, got = 0;
  out >> sent >> got;
  EXPECT_THAT(r.out, HasSubstr("\nHTTP/1.1 200 OK\nhello through cordon\n"));
  auto http = wait_events(box_->events(), "net.http", 1);
  ASSERT_EQ(http.size(), 1u) << dump_events(box_->events());
  EXPECT_EQ(http[0]["status"], 200);
  EXPECT_EQ(http[0]["request_bytes"].get<size_t>(), sent);
  EXPECT_EQ(http[0]["response_bytes"].get<size_t>(), got);
  auto conns = wait_events(box_->events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u) << dump_events(box_->events());
  EXPECT_EQ(conns[0]["bytes_out"].get<size_t>(), sent);
  EXPECT_EQ(conns[0]["bytes_in"].get<size_t>(), got);
  EXPECT_EQ(conns[0]["end"], "closed");
}

// Two requests in one flight (pipelined): the second head is already buffered when the first
// response is done; both are answered in order, each decided and logged.
TEST_F(NetproxyTransparent, PipelinedRequestsAreEachAnsweredAndLogged) {
  std::string code =
      "import socket,sys\n"
      "s=socket.create_connection(('api.test',int(sys.argv[1])),timeout=20)\n"
      "s.sendall(b'GET /hello.txt HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n'\n"
      "          b'GET /repo.git/HEAD HTTP/1.1\\r\\nHost: api.test\\r\\n'\n"
      "          b'Connection: close\\r\\n\\r\\n')\n"
      "b=b''\n"
      "while True:\n"
      "  d=s.recv(1000)\n"
      "  if not d: break\n"
      "  b+=d\n"
      "print(b.count(b'HTTP/1.1 200 OK'), b'hello through cordon' in b,"
      " b.endswith(b'ref: refs/heads/master\\n'))\n";
  auto r = box_->exec({"python3", "-c", code, std::to_string(up_->port("http"))});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "2 True True\n");
  auto http = wait_events(box_->events(), "net.http", 2);
  ASSERT_EQ(http.size(), 2u) << dump_events(box_->events());
  EXPECT_EQ(http[0]["url"], url("http", "api.test", "/hello.txt"));
  EXPECT_EQ(http[1]["url"], url("http", "api.test", "/repo.git/HEAD"));
}

// network.idle_timeout on the plaintext HTTP path: a client that goes silent after a response,
// and an upstream that never answers, each get the connection closed (the client reads EOF)
// instead of holding it forever.
TEST_F(NetproxyTransparent, IdleTimeoutClosesSilentHttpConnections) {
  // An upstream that completes the handshake (kernel backlog) and never says anything.
  int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(silent, 8), 0);
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string silent_port = std::to_string(ntohs(a.sin_port));
  const std::string http = std::to_string(up_->port("http"));
  TempDir dir;
  CaptureSandbox box(dir, R"({"version": 1, "network": {
      "allow": ["api.test:)" + http +
                              R"(", "mute.test:)" + silent_port + R"("],
      "resolve": {"api.test": "127.0.0.1", "mute.test": "127.0.0.1"},
      "idle_timeout": "1s"}})");
  ASSERT_TRUE(box.ok());
  // Prints "closed" when the proxy ends the connection within 20 s (the timeout is 1 s).
  std::string code =
      "import socket,sys,time\n"
      "host,port,first=sys.argv[1],int(sys.argv[2]),sys.argv[3]=='1'\n"
      "s=socket.create_connection((host,port),timeout=20)\n"
      "s.sendall(('GET /hello.txt HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % host).encode())\n"
      "b=b''\n"
      "if first:\n"
      "  while not b.endswith(b'cordon\\n'): b+=s.recv(1000)\n"
      "t=time.monotonic()\n"
      "try:\n"
      "  while s.recv(1000): pass\n"
      "  print('closed')\n"
      "except socket.timeout:\n"
      "  print('still open after', time.monotonic()-t)\n"
      "except ConnectionResetError:\n"
      "  print('closed')\n";
  auto idle_client = box.exec({"python3", "-c", code, "api.test", http, "1"});
  ASSERT_EQ(idle_client.exit_code(), 0) << idle_client.err;
  EXPECT_EQ(idle_client.out, "closed\n");
  auto mute_upstream = box.exec({"python3", "-c", code, "mute.test", silent_port, "0"});
  ASSERT_EQ(mute_upstream.exit_code(), 0) << mute_upstream.err;
  EXPECT_EQ(mute_upstream.out, "closed\n");
  auto conns = wait_events(box.events(), "net.connect", 2);
  ASSERT_EQ(conns.size(), 2u) << dump_events(box.events());
  EXPECT_EQ(conns[0]["name"], "api.test");
  EXPECT_GT(conns[0]["bytes_in"].get<int>(), 0);
  EXPECT_EQ(conns[1]["name"], "mute.test");
  EXPECT_EQ(conns[1]["bytes_in"], 0);
  EXPECT_GT(conns[1]["bytes_out"].get<int>(), 0);
  close(silent);
}

TEST_F(NetproxyTransparent, OtherTrafficDroppedLoopbackKept) {
  std::string code =
      "import socket\n"
      "u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
      "try:\n  u.sendto(b'x',('10.9.9.9',9999)); print('udp sent')\n"
      "except PermissionError: print('udp dropped')\n"
      "srv=socket.socket(); srv.bind(('127.0.0.1',0)); srv.listen(1)\n"
      "c=socket.create_connection(srv.getsockname(),timeout=5); a,_=srv.accept()\n"
      "c.sendall(b'local'); print(a.recv(10).decode())\n";
  auto r = box_->exec({"python3", "-c", code});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "udp dropped\nlocal\n");
  auto nft = box_->exec({"nft", "list", "table", "inet", "cordon"});
  EXPECT_THAT(nft.out, HasSubstr("log prefix \"cordon-drop \" group 7"));
  EXPECT_THAT(nft.out, HasSubstr("policy drop"));
  EXPECT_THAT(nft.out, HasSubstr("udp dport 53 redirect to :"));
}

// UDP and ICMP never reach the proxy: the ruleset drops them, and the NFLOG socket made inside the
// namespace turns each drop into a net.refused event.
TEST_F(NetproxyTransparent, DroppedUdpAndIcmpAreEvents) {
  std::string code =
      "import socket\n"
      "u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
      "try:\n  u.sendto(b'x',('198.51.100.9',5353)); print('udp sent')\n"
      "except PermissionError: print('udp dropped')\n";
  auto r = box_->exec({"python3", "-c", code});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "udp dropped\n");
  // ICMP echo requests over raw sockets, v4 then v6 (what ping sends; no ping binary needed).
  std::string icmp =
      "import socket\n"
      "for fam,proto,typ,dst in ((socket.AF_INET,socket.IPPROTO_ICMP,8,'198.51.100.10'),\n"
      "                          (socket.AF_INET6,socket.IPPROTO_ICMPV6,128,'2001:db8::10')):\n"
      "  s=socket.socket(fam,socket.SOCK_RAW,proto)\n"
      "  try: s.sendto(bytes([typ,0,0,0,0,1,0,1]),(dst,0)); print('sent')\n"
      "  except PermissionError: print('dropped')\n";
  auto ping = box_->exec({"python3", "-c", icmp});
  ASSERT_EQ(ping.exit_code(), 0) << ping.err;
  EXPECT_EQ(ping.out, "dropped\ndropped\n");
  auto is_drop = [](const nlohmann::json& e) { return e.value("mode", "") == "netfilter"; };
  auto ev = wait_events(box_->events(), "net.refused", 3, is_drop);
  ASSERT_GE(ev.size(), 3u) << dump_events(box_->events());
  EXPECT_EQ(ev[0]["proto"], "udp");
  EXPECT_EQ(ev[0]["address"], "198.51.100.9");
  EXPECT_EQ(ev[0]["port"], 5353);
  EXPECT_EQ(ev[0]["decision"], "deny");
  EXPECT_EQ(ev[0]["reason"], "dropped by the sandbox's netfilter rules");
  EXPECT_EQ(ev[0]["rule"], netproxy::kNflogRule);
  EXPECT_EQ(ev[1]["proto"], "icmp");
  EXPECT_EQ(ev[1]["address"], "198.51.100.10");
  EXPECT_EQ(ev[1]["icmp_type"], 8);  // echo request
  EXPECT_FALSE(ev[1].contains("port"));
  EXPECT_EQ(ev[2]["proto"], "icmpv6");
  EXPECT_EQ(ev[2]["address"], "2001:db8::10");
  EXPECT_EQ(ev[2]["icmp_type"], 128);  // echo request
}

// A UDP flood is logged a bounded number of times per second; the rest is counted in summaries,
// and every dropped packet is accounted for.
TEST_F(NetproxyTransparent, UdpFloodIsSummarisedNotLoggedPerPacket) {
  constexpr int kPackets = 3000;
  std::string code =
      "import socket\n"
      "u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
      "n=0\n"
      "for i in range(" +
      std::to_string(kPackets) +
      "):\n"
      "  try: u.sendto(b'x',('198.51.100.11',9000+i%4))\n"
      "  except PermissionError: n+=1\n"
      "print(n)\n";
  auto r = box_->exec({"python3", "-c", code});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  ASSERT_EQ(r.out, std::to_string(kPackets) + "\n");
  int individual = 0, summarised = 0, summaries = 0;
  bool overrun = false;
  // Summaries are written when their second ends: poll (bounded) until every packet is counted.
  for (int i = 0; i < 250 && individual + summarised < kPackets && !overrun; ++i) {
    individual = summarised = summaries = 0;
    for (auto& e : events_of(box_->events(), "net.refused",
                             [](auto& e) { return e.value("mode", "") == "netfilter"; })) {
      if (e.value("summary", false)) {
        ++summaries;
        summarised += e["count"].template get<int>();
        overrun = overrun || e.contains("overruns");
        EXPECT_EQ(e["reason"], "dropped by the sandbox's netfilter rules");
        EXPECT_GE(e["protos"]["udp"].template get<int>(), 1);
      } else {
        ++individual;
        EXPECT_EQ(e["address"], "198.51.100.11");
      }
    }
    usleep(40000);
  }
  EXPECT_GE(summaries, 1);
  EXPECT_LT(individual, kPackets / 2);
  if (overrun) {
    EXPECT_LE(individual + summarised, kPackets);  // the kernel dropped some log messages
  } else {
    EXPECT_EQ(individual + summarised, kPackets) << dump_events(box_->events());
  }
}

TEST_F(NetproxyTransparent, ProxyKilledMeansNoNetwork) {
  auto before = box_->curl({url("http", "api.test", "/hello.txt")});
  ASSERT_EQ(before.exit_code(), 0) << before.err;
  box_->proxy().child().stop();
  auto after = box_->curl({"--max-time", "8", url("http", "api.test", "/hello.txt")});
  EXPECT_NE(after.exit_code(), 0);
  EXPECT_TRUE(after.out.empty());
  // Raw IP too: the redirect lands on a port nobody listens on any more.
  auto raw = box_->curl({"--max-time", "8", "http://198.51.100.7/"});
  EXPECT_EQ(raw.exit_code(), 7) << raw.err;  // connection refused
}

}  // namespace
}  // namespace cordon::testing
