// The explicit proxy end to end: curl, python3 and git through HTTP proxy / CONNECT / SOCKS5 to
// upstream servers on loopback reached by name (network.resolve), and every refusal with its event.
#include <gmock/gmock.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/netproxy/egress_sink.h"
#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class NetproxyExplicit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new TempDir();
    auto& d = *certs_;
    ASSERT_TRUE(make_test_files(d));
    up_ = new Upstreams({"root=" + d / "www", "cert=" + d / "srv.pem", "key=" + d / "srv.key"});
    ASSERT_TRUE(up_->ok());
  }
  static void TearDownTestSuite() {
    delete up_;
    delete certs_;
  }

  // The policy every test starts from; `extra` is spliced into "network".
  static std::string policy(const std::string& extra = "") {
    std::string http = std::to_string(up_->port("http"));
    std::string https = std::to_string(up_->port("https"));
    std::string echo = std::to_string(up_->port("echo"));
    return R"({"version": 1, "network": {
      "allow": ["api.test:)" +
           http + R"(", "api.test:)" + https + R"(", "echo.test:)" + echo +
           R"(", "meta.test", "other.test"],
      "resolve": {"api.test": "127.0.0.1", "echo.test": "127.0.0.1",
                  "meta.test": "169.254.169.254", "other.test": "127.0.0.1"})" +
           (extra.empty() ? "" : ", " + extra) + "}}";
  }

  RunResult curl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{"curl", "-sS", "--max-time", "20", "--noproxy", ""};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_program(argv);
  }
  std::string http_url(const std::string& path) {
    return "http://api.test:" + std::to_string(up_->port("http")) + path;
  }

  static TempDir* certs_;
  static Upstreams* up_;
  TempDir dir_;
};
TempDir* NetproxyExplicit::certs_ = nullptr;
Upstreams* NetproxyExplicit::up_ = nullptr;

TEST_F(NetproxyExplicit, HttpAbsoluteFormKeepAliveLogsEveryRequest) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  ASSERT_GT(proxy.port(), 0);
  // Two requests on one client connection: curl reuses it, the proxy reuses its upstream.
  auto r = curl({"-x", proxy.url(), http_url("/hello.txt"), http_url("/repo.git/HEAD")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\nref: refs/heads/master\n");
  auto http = wait_events(proxy.events(), "net.http", 2);
  ASSERT_EQ(http.size(), 2u);
  EXPECT_EQ(http[0]["method"], "GET");
  EXPECT_EQ(http[0]["url"], http_url("/hello.txt"));
  EXPECT_EQ(http[0]["status"], 200);
  EXPECT_EQ(http[0]["decision"], "allow");
  EXPECT_EQ(http[0]["rule"], "network.allow[0]");
  EXPECT_GT(http[0]["response_bytes"].get<int>(), 21);
  EXPECT_EQ(http[1]["url"], http_url("/repo.git/HEAD"));
  proxy.child().stop();
  // One upstream connection carried both requests.
  auto conns = events_of(proxy.events(), "net.connect");
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["name"], "api.test");
  EXPECT_EQ(conns[0]["address"], "127.0.0.1");
}

TEST_F(NetproxyExplicit, UpstreamSeesTheDecidedHostNotTheClientsHeader) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  auto r = curl({"-x", proxy.url(), "-H", "Host: evil.test", http_url("/echo-host")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "host=api.test:" + std::to_string(up_->port("http")) + "\n");
}

TEST_F(NetproxyExplicit, PostBodyIsStreamed) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  std::string body(300000, 'x');
  write_file(dir_ / "body", body);
  auto r = curl({"-x", proxy.url(), "--data-binary", "@" + dir_ / "body", http_url("/upload")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "got 300000 bytes\n");
  auto http = wait_events(proxy.events(), "net.http", 1);
  ASSERT_EQ(http.size(), 1u);
  EXPECT_EQ(http[0]["method"], "POST");
  EXPECT_GT(http[0]["request_bytes"].get<int>(), 300000);
}

// Bodies of known length are spliced, not parsed: several MiB on one kept-alive connection arrive
// byte for byte, each response logged with its exact size.
TEST_F(NetproxyExplicit, LargeBodiesOnOneConnectionArriveIntact) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  std::string big;
  for (int i = 0; i < 3 * 1024 * 1024 + 17; ++i) {
    big.push_back(static_cast<char>('a' + (static_cast<unsigned>(i) * 7919u) % 26));
  }
  write_file(*certs_ / "www/big.bin", big);
  write_file(*certs_ / "www/small.txt", "small\n");
  auto r =
      curl({"-x", proxy.url(), http_url("/big.bin"), http_url("/small.txt"), http_url("/big.bin")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  ASSERT_EQ(r.out.size(), 2 * big.size() + 6);
  EXPECT_TRUE(r.out == big + "small\n" + big);
  auto http = wait_events(proxy.events(), "net.http", 3);
  ASSERT_EQ(http.size(), 3u);
  EXPECT_GT(http[0]["response_bytes"].get<uint64_t>(), big.size());
  EXPECT_LT(http[0]["response_bytes"].get<uint64_t>(), big.size() + 1024);  // + the head
  EXPECT_EQ(http[2]["response_bytes"], http[0]["response_bytes"]);
  proxy.child().stop();
  EXPECT_EQ(events_of(proxy.events(), "net.connect").size(), 1u);  // one upstream connection
}

// A response without a length runs to the upstream's EOF: all of it arrives, then the client's
// connection ends too (nothing else could tell it where the body stops).
TEST_F(NetproxyExplicit, BodyDelimitedByEofIsRelayedWhole) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  auto r = curl({"-x", proxy.url(), http_url("/until-eof/1000000")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  ASSERT_EQ(r.out.size(), 1000000u);
  EXPECT_EQ(r.out.substr(0, 3), "AAA");
  EXPECT_EQ(r.out.substr(999997), std::string(3, static_cast<char>('A' + 15 % 26)));
  auto http = wait_events(proxy.events(), "net.http", 1);
  ASSERT_EQ(http.size(), 1u);
  EXPECT_EQ(http[0]["status"], 200);
}

// The request-body budget is exact on the HTTP path too: not one byte past it goes upstream.
TEST_F(NetproxyExplicit, BytesOutBudgetIsExactForHttpBodies) {
  ProxyUnderTest proxy(dir_, policy(R"("max_bytes_out": 5000)"), {"--listen", "127.0.0.1:0"});
  write_file(dir_ / "body", std::string(200000, 'x'));
  auto r = curl({"-x", proxy.url(), "--data-binary", "@" + dir_ / "body", http_url("/upload")});
  EXPECT_NE(r.exit_code(), 0);
  auto hits = wait_events(proxy.events(), "limit.hit", 1);
  ASSERT_EQ(hits.size(), 1u) << dump_events(proxy.events());
  EXPECT_EQ(hits[0]["cap"], "network.max_bytes_out");
  auto conns = wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["bytes_out"], 5000);
  EXPECT_EQ(conns[0]["end"], "network.max_bytes_out");
}

TEST_F(NetproxyExplicit, ConnectTunnelsTlsWithTestCa) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  auto r = curl({"-x", proxy.url(), "--cacert", certs_->path() + "/ca.pem",
                 "https://api.test:" + std::to_string(up_->port("https")) + "/hello.txt"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\n");
  auto conns = wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["mode"], "connect");
  EXPECT_EQ(conns[0]["port"], up_->port("https"));
  EXPECT_GT(conns[0]["bytes_out"].get<int>(), 100);  // at least a ClientHello
  EXPECT_GT(conns[0]["bytes_in"].get<int>(), 100);
}

TEST_F(NetproxyExplicit, NamedTunnelsRefuseSniOrHostOfAnotherName) {
  // other.test is allowed on every port and resolves to the same server as api.test: a client
  // that asks the proxy for other.test and then speaks to api.test inside the tunnel is fronting.
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  const std::string https = std::to_string(up_->port("https"));
  const std::string http = std::to_string(up_->port("http"));
  const std::string ca = certs_->path() + "/ca.pem";
  const std::string front = "api.test:" + https + ":other.test:" + https;
  // CONNECT other.test, SNI api.test.
  auto c = curl({"-x", proxy.url(), "--cacert", ca, "--connect-to", front,
                 "https://api.test:" + https + "/hello.txt"});
  EXPECT_NE(c.exit_code(), 0) << c.out;
  EXPECT_THAT(c.out, ::testing::Not(HasSubstr("hello through cordon")));
  // SOCKS5 by name other.test, SNI api.test.
  auto s = curl({"--socks5-hostname", "127.0.0.1:" + std::to_string(proxy.port()), "--cacert", ca,
                 "--connect-to", front, "https://api.test:" + https + "/hello.txt"});
  EXPECT_NE(s.exit_code(), 0) << s.out;
  EXPECT_THAT(s.out, ::testing::Not(HasSubstr("hello through cordon")));
  // Plain HTTP through a CONNECT tunnel to other.test with Host: api.test gets the readable 403.
  auto h = curl({"-p", "-x", proxy.url(), "-H", "Host: api.test", "-w", "%{http_code}",
                 "http://other.test:" + http + "/hello.txt"});
  EXPECT_THAT(h.out, HasSubstr("does not match other.test"));
  EXPECT_THAT(h.out, HasSubstr("403"));
  auto ev = wait_events(proxy.events(), "net.refused", 3);
  ASSERT_EQ(ev.size(), 3u);
  const char* modes[] = {"connect", "socks5", "connect"};
  const char* peeks[] = {"tls", "tls", "http"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ev[i]["rule"], "network (name mismatch)") << i;
    EXPECT_EQ(ev[i]["name"], "api.test") << i;
    EXPECT_EQ(ev[i]["resolved_name"], "other.test") << i;
    EXPECT_EQ(ev[i]["mode"], modes[i]) << i;
    EXPECT_EQ(ev[i]["peek"], peeks[i]) << i;
  }
  EXPECT_EQ(events_of(proxy.events(), "net.connect").size(), 0u);
  // Control: the same tunnel with a matching SNI is relayed, and its record carries the SNI.
  auto ok = curl({"-x", proxy.url(), "--cacert", ca, "https://api.test:" + https + "/hello.txt"});
  ASSERT_EQ(ok.exit_code(), 0) << ok.err;
  EXPECT_EQ(ok.out, "hello through cordon\n");
  auto conns = wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["sni"], "api.test");
}

TEST_F(NetproxyExplicit, Socks5HostnameWithCurl) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  auto r = curl(
      {"--socks5-hostname", "127.0.0.1:" + std::to_string(proxy.port()), http_url("/hello.txt")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\n");
  auto conns = wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["mode"], "socks5");
  EXPECT_EQ(conns[0]["name"], "api.test");
}

TEST_F(NetproxyExplicit, PythonUrllibThroughProxy) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  std::string code =
      "import urllib.request,sys\n"
      "o=urllib.request.build_opener(urllib.request.ProxyHandler({'http':sys.argv[1]}))\n"
      "print(o.open(sys.argv[2],timeout=20).read().decode(),end='')\n"
      "try:\n  o.open('http://evil.test/',timeout=20)\nexcept urllib.error.HTTPError as e:\n"
      "  print(e.code, e.read().decode(), end='')\n";
  auto r = run_program({"python3", "-c", code, proxy.url(), http_url("/hello.txt")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\n403 cordon: evil.test:80 is not in network.allow\n");
}

TEST_F(NetproxyExplicit, GitCloneOverDumbHttp) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  auto r = run_program({"git", "-c", "http.proxy=" + proxy.url(), "clone", "-q",
                        http_url("/repo.git"), dir_ / "clone"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::ifstream readme(dir_ / "clone/README");
  std::string text((std::istreambuf_iterator<char>(readme)), {});
  EXPECT_EQ(text, "cordon test repo\n");
  EXPECT_GE(wait_events(proxy.events(), "net.http", 3).size(), 3u);
}

TEST_F(NetproxyExplicit, RefusesNameNotAllowedWithReadable403) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  auto r = curl({"-x", proxy.url(), "-w", "%{http_code}", "http://evil.test/x"});
  EXPECT_EQ(r.out, "cordon: evil.test:80 is not in network.allow\n403");
  auto ev = wait_events(proxy.events(), "net.refused", 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["name"], "evil.test");
  EXPECT_EQ(ev[0]["decision"], "deny");
  EXPECT_EQ(ev[0]["rule"], "network.allow (no match)");
  EXPECT_EQ(ev[0]["url"], "http://evil.test/x");
  // CONNECT is refused with 403 too.
  auto c = curl({"-p", "-x", proxy.url(), "http://evil.test:443/"});
  EXPECT_NE(c.exit_code(), 0);
  EXPECT_THAT(c.err, HasSubstr("403"));
  EXPECT_EQ(wait_events(proxy.events(), "net.refused", 2).size(), 2u);
}

// network.rules on plain HTTP: GET allowed, POST denied on the same host with a 403 naming the
// rule, paths judged after decoding and normalising, a ruled host denied what no rule allows.
TEST_F(NetproxyExplicit, HttpRulesDecidePerRequest) {
  ProxyUnderTest proxy(dir_, policy(R"("rules": [
      {"host": "api.test", "methods": ["POST"], "paths": ["/upload"], "action": "deny"},
      {"host": "api.test", "methods": ["GET", "HEAD"], "paths": ["/hello.txt", "/repo.git/**"],
       "action": "allow"}])"),
                       {"--listen", "127.0.0.1:0"});
  ASSERT_GT(proxy.port(), 0);
  auto get = curl({"-x", proxy.url(), http_url("/hello.txt")});
  ASSERT_EQ(get.exit_code(), 0) << get.err;
  EXPECT_EQ(get.out, "hello through cordon\n");

  auto post = curl({"-x", proxy.url(), "-w", "%{http_code}", "--data", "x=1", http_url("/upload")});
  EXPECT_EQ(post.out, "cordon: POST api.test/upload is denied by network.rules[0]\n403");
  auto put = curl({"-x", proxy.url(), "-w", "%{http_code}", "-X", "PUT", http_url("/hello.txt")});
  EXPECT_EQ(put.out, "cordon: PUT api.test/hello.txt is denied by network.rules (no match)\n403");
  // "/repo.git/../upload" and its encoded and ";param" forms are "/upload": not under /repo.git.
  for (const char* trick : {"/repo.git/../upload", "/repo.git/%2e%2e/upload",
                            "/repo.git/..;x/upload", "/repo.git//%2E%2E/upload"}) {
    auto r = curl({"-x", proxy.url(), "--path-as-is", "-w", "%{http_code}", http_url(trick)});
    EXPECT_EQ(r.out, "cordon: GET api.test/upload is denied by network.rules (no match)\n403")
        << trick;
  }
  // An encoded '/' could be read either way by the server: refused, not guessed.
  auto slash = curl({"-x", proxy.url(), "-w", "%{http_code}", http_url("/repo.git%2fHEAD")});
  EXPECT_THAT(slash.out, HasSubstr("encodes a '/'"));
  EXPECT_THAT(slash.out, ::testing::EndsWith("400"));
  // Allowed through the glob, with the escape decoded before matching; a mixed-case host too.
  auto head = curl({"-x", proxy.url(),
                    "http://API.test:" + std::to_string(up_->port("http")) + "/repo.git/%48EAD"});
  ASSERT_EQ(head.exit_code(), 0) << head.err;
  EXPECT_EQ(head.out, "ref: refs/heads/master\n");

  auto refused = wait_events(proxy.events(), "net.refused", 7);
  ASSERT_EQ(refused.size(), 7u);
  EXPECT_EQ(refused[0]["rule"], "network.rules[0]");
  EXPECT_EQ(refused[0]["method"], "POST");
  EXPECT_EQ(refused[0]["name"], "api.test");
  EXPECT_EQ(refused[1]["rule"], "network.rules (no match)");
  EXPECT_EQ(refused[6]["rule"], "network.rules (path)");
  proxy.child().stop();
  // Only the two allowed requests reached the upstream.
  auto http = events_of(proxy.events(), "net.http");
  ASSERT_EQ(http.size(), 2u);
  EXPECT_EQ(http[0]["url"], http_url("/hello.txt"));
  EXPECT_EQ(http[1]["status"], 200);
}

TEST_F(NetproxyExplicit, RefusesAllowedNameOnWrongPort) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  auto r = curl({"-x", proxy.url(), "-w", "%{http_code}", "http://api.test:1/"});
  EXPECT_EQ(r.out, "cordon: api.test:1 is not in network.allow\n403");
  auto ev = wait_events(proxy.events(), "net.refused", 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["port"], 1);
}

TEST_F(NetproxyExplicit, RefusesPrivateMetadataAndLoopbackAddresses) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  for (const std::string& url :
       std::vector<std::string>{"http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/",
                                "http://[::1]:" + std::to_string(up_->port("http")) + "/",
                                "http://127.0.0.1:" + std::to_string(up_->port("http")) + "/"}) {
    auto r = curl({"-x", proxy.url(), "-w", "%{http_code}", url});
    EXPECT_THAT(r.out, HasSubstr("403")) << url;
    EXPECT_THAT(r.out, HasSubstr("cordon: ")) << url;
  }
  auto ev = wait_events(proxy.events(), "net.refused", 4);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0]["address"], "169.254.169.254");
  EXPECT_EQ(ev[2]["address"], "::1");
  EXPECT_EQ(events_of(proxy.events(), "net.connect").size(), 0u);
}

TEST_F(NetproxyExplicit, RefusesNamePinnedToMetadataAddress) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  auto r = curl({"-x", proxy.url(), "-w", "%{http_code}", "http://meta.test/"});
  EXPECT_THAT(r.out, HasSubstr("cordon: meta.test:80 resolves to 169.254.169.254"));
  EXPECT_THAT(r.out, HasSubstr("403"));
  auto ev = wait_events(proxy.events(), "net.refused", 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["address"], "169.254.169.254");
  EXPECT_THAT(ev[0]["rule"].get<std::string>(), HasSubstr("metadata"));
}

TEST_F(NetproxyExplicit, RefusesDocumentationAddressesBeforeDialling) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  int fd = -1;
  EXPECT_EQ(socks5_connect(proxy.port(), 1, "198.51.100.7", 80, &fd), 2);
  close(fd);
  EXPECT_EQ(socks5_connect(proxy.port(), 1, "203.0.113.9", 443, &fd), 2);
  close(fd);
  EXPECT_EQ(socks5_connect(proxy.port(), 4, "2001:db8::1", 443, &fd), 2);
  close(fd);
  auto ev = wait_events(proxy.events(), "net.refused", 3);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[2]["address"], "2001:db8::1");
  EXPECT_EQ(ev[2]["rule"], "network.allow (no match)");
  EXPECT_EQ(events_of(proxy.events(), "net.connect").size(), 0u);
}

// The same with the leak catcher in place: the documentation addresses are routed into a sink
// namespace that counts every packet reaching them, and the counter must not move.
TEST_F(NetproxyExplicit, DocumentationAddressesNeverLeaveTheHost) {
  CORDON_REQUIRE_ROOT();
  EgressSink sink;
  ASSERT_TRUE(sink.ok());
  // First prove the sink sees traffic: a connection attempt straight from the test is counted.
  int probe = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(9);
  inet_pton(AF_INET, sink.v4a().c_str(), &a.sin_addr);
  connect(probe, reinterpret_cast<sockaddr*>(&a), sizeof a);
  long base = 0;
  for (int i = 0; i < 200 && base == 0; ++i) {
    usleep(10000);
    base = sink.packets();
  }
  close(probe);
  ASSERT_GT(base, 0) << "the sink does not see packets; the leak check would prove nothing";
  base = sink.packets();

  ProxyUnderTest proxy(dir_,
                       R"({"version": 1, "network": {"allow": ["api.test"],
      "resolve": {"doc.test": ")" +
                           sink.v4a() + R"("}}})",
                       {"--listen", "127.0.0.1:0"});
  int fd = -1;
  EXPECT_EQ(socks5_connect(proxy.port(), 1, sink.v4a(), 80, &fd), 2);
  close(fd);
  EXPECT_EQ(socks5_connect(proxy.port(), 1, sink.v4b(), 443, &fd), 2);
  close(fd);
  EXPECT_EQ(socks5_connect(proxy.port(), 4, sink.v6(), 443, &fd), 2);
  close(fd);
  EXPECT_EQ(socks5_connect(proxy.port(), 3, "doc.test", 80, &fd), 2);  // pinned, not allowed
  close(fd);
  auto h = curl({"-x", proxy.url(), "-w", "%{http_code}", "http://" + sink.v4a() + "/"});
  EXPECT_THAT(h.out, HasSubstr("403"));
  auto c = curl({"-p", "-x", proxy.url(), "http://[" + sink.v6() + "]:443/"});
  EXPECT_THAT(c.err, HasSubstr("403"));
  EXPECT_EQ(wait_events(proxy.events(), "net.refused", 6).size(), 6u);
  EXPECT_EQ(sink.packets(), base);
}

TEST_F(NetproxyExplicit, Socks5ReplyCodes) {
  ProxyUnderTest proxy(dir_, policy(R"("connect_timeout": "5s")"), {"--listen", "127.0.0.1:0"});
  int fd = -1;
  // 0x00: allowed, and the tunnel relays.
  ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
  ASSERT_TRUE(send_all(fd, "ping"));
  EXPECT_EQ(recv_n(fd, 4), "ping");
  close(fd);
  // 0x02: not allowed by the ruleset.
  EXPECT_EQ(socks5_connect(proxy.port(), 3, "evil.test", 80, &fd), 2);
  close(fd);
  // 0x05: allowed name, nothing listening (port 1 allowed for other.test via "other.test").
  EXPECT_EQ(socks5_connect(proxy.port(), 3, "other.test", 1, &fd), 5);
  close(fd);
  // 0x04 (a name the host resolver cannot resolve) is in dns_test.cc, where the host
  // resolver is a fake one on loopback: tests never query the machine's real resolver.
  // 0x07: BIND.
  EXPECT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd, 2), 7);
  close(fd);
  // 0x08: address type 0x09.
  EXPECT_EQ(socks5_connect(proxy.port(), 9, "", 80, &fd), 8);
  close(fd);
}

// An upstream that never completes the handshake (its accept queue is full, so the kernel drops
// the SYN) is given up after network.connect_timeout: SOCKS5 0x04 and an event saying so.
TEST_F(NetproxyExplicit, ConnectTimeout) {
  int lst = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lst, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(lst, 0), 0);
  socklen_t len = sizeof a;
  getsockname(lst, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  std::vector<int> fillers;
  for (int i = 0; i < 3; ++i) {  // fill the queue; extra SYNs are dropped, never refused
    int f = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    connect(f, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fillers.push_back(f);
  }
  usleep(100000);
  ProxyUnderTest proxy(dir_, R"({"version": 1, "network": {"allow": ["slow.test"],
      "resolve": {"slow.test": "127.0.0.1"}, "connect_timeout": "1s"}})",
                       {"--listen", "127.0.0.1:0"});
  int fd = -1;
  EXPECT_EQ(socks5_connect(proxy.port(), 3, "slow.test", port, &fd), 4);
  close(fd);
  auto ev = wait_events(proxy.events(), "net.refused", 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_THAT(ev[0]["reason"].get<std::string>(), HasSubstr("timed out after 1000 ms"));
  for (int f : fillers) close(f);
  close(lst);
}

TEST_F(NetproxyExplicit, Socks5HalfCloseIsPassedOn) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  int fd = -1;
  ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
  ASSERT_TRUE(send_all(fd, "last words"));
  shutdown(fd, SHUT_WR);  // the echo server sees EOF, answers, and closes
  bool eof = false;
  EXPECT_EQ(recv_n(fd, 100, 10000, &eof), "last words");
  EXPECT_TRUE(eof);
  close(fd);
  auto conns = wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["bytes_out"], 10);
  EXPECT_EQ(conns[0]["bytes_in"], 10);
  EXPECT_EQ(conns[0]["end"], "closed");
}

// A minimal TLS ClientHello (one record) naming `sni`.
std::string client_hello(const std::string& sni) {
  auto be16 = [](size_t v) {
    return std::string{static_cast<char>(v >> 8), static_cast<char>(v & 0xff)};
  };
  std::string ext = be16(0) + be16(sni.size() + 5) + be16(sni.size() + 3) + std::string(1, '\0') +
                    be16(sni.size()) + sni;
  std::string body = std::string("\x03\x03", 2) + std::string(32, '\x11') + std::string(1, '\0') +
                     std::string("\x00\x02\x13\x01\x01\x00", 6) + be16(ext.size()) + ext;
  std::string hs = std::string(1, '\x01') + std::string(1, '\0') + be16(body.size()) + body;
  return std::string("\x16\x03\x01", 3) + be16(hs.size()) + hs;
}

// A CONNECT tunnel through the explicit proxy; the fd, or -1 if the proxy did not answer 200.
int connect_tunnel(int proxy_port, const std::string& target) {
  int fd = tcp_connect("127.0.0.1", proxy_port);
  if (fd < 0 || !send_all(fd, "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n")) {
    return -1;
  }
  std::string got;
  for (int i = 0; i < 100 && got.find("\r\n\r\n") == std::string::npos; ++i) {
    got += recv_n(fd, 1, 100);
  }
  if (got.rfind("HTTP/1.1 200", 0) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A ClientHello sent slowly (its first bytes, a pause longer than the peek, then the rest) is
// still read whole before anything is relayed: fronting is refused as for one sent at once.
// Before, the pause made the flight "opaque" and it was relayed unchecked.
TEST_F(NetproxyExplicit, ASlowClientHelloIsStillCheckedForFronting) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  const std::string echo = "echo.test:" + std::to_string(up_->port("echo"));
  const std::string hello = client_hello("api.test");
  for (size_t first : {size_t{1}, size_t{30}}) {
    int fd = connect_tunnel(proxy.port(), echo);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, hello.substr(0, first)));
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    send_all(fd, hello.substr(first));
    bool eof = false;
    std::string back = recv_n(fd, hello.size(), 5000, &eof);
    close(fd);
    EXPECT_TRUE(back.empty()) << "the echo server got the ClientHello (first " << first << ")";
    EXPECT_TRUE(eof);
  }
  auto ev = wait_events(proxy.events(), "net.refused", 2);
  ASSERT_EQ(ev.size(), 2u) << dump_events(proxy.events());
  for (const auto& e : ev) {
    EXPECT_EQ(e["rule"], "network (name mismatch)");
    EXPECT_EQ(e["name"], "api.test");
    EXPECT_EQ(e["peek"], "tls");
  }
}

// A request head larger than the peek is refused unread, never relayed as an opaque stream.
TEST_F(NetproxyExplicit, AnOversizedRequestHeadInATunnelIsRefusedUnread) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  int fd = connect_tunnel(proxy.port(), "echo.test:" + std::to_string(up_->port("echo")));
  ASSERT_GE(fd, 0);
  const std::string head =
      "GET / HTTP/1.1\r\nHost: echo.test\r\nX-Pad: " + std::string(17 * 1024, 'a') + "\r\n\r\n";
  send_all(fd, head);
  bool eof = false;
  std::string back = recv_n(fd, head.size(), 5000, &eof);
  close(fd);
  EXPECT_TRUE(back.empty()) << back.size() << " bytes came back from the echo server";
  auto ev = wait_events(proxy.events(), "net.refused", 1);
  ASSERT_EQ(ev.size(), 1u) << dump_events(proxy.events());
  EXPECT_EQ(ev[0]["rule"], "network (first flight incomplete)");
  EXPECT_EQ(ev[0]["peek"], "incomplete");
  EXPECT_EQ(ev[0]["mode"], "connect");
}

// A stop (SIGTERM) loses no connection: a tunnel still open is recorded with its bytes and
// "stopped", and the proxy still exits 0 well within the launcher's 2 s grace.
TEST_F(NetproxyExplicit, StopRecordsATunnelStillOpenAsStopped) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  int fd = -1;
  ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
  ASSERT_TRUE(send_all(fd, "ping!"));
  ASSERT_EQ(recv_n(fd, 5), "ping!");
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(proxy.child().pid(), SIGTERM), 0);
  int st = proxy.child().wait(std::chrono::seconds(2));
  auto took = std::chrono::steady_clock::now() - t0;
  close(fd);
  ASSERT_NE(st, -1) << "the proxy did not exit within 2 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  auto conns = events_of(proxy.events(), "net.connect");
  ASSERT_EQ(conns.size(), 1u) << dump_events(proxy.events());
  EXPECT_EQ(conns[0]["end"], "stopped");
  EXPECT_EQ(conns[0]["bytes_out"], 5);
  EXPECT_EQ(conns[0]["bytes_in"], 5);
}

// The same for a plain-HTTP keep-alive connection between requests: its upstream leg lives in
// the request loop's frame, not in a tunnel, and is recorded when that frame is destroyed.
TEST_F(NetproxyExplicit, StopRecordsAKeepAliveHttpUpstreamAsStopped) {
  ProxyUnderTest proxy(dir_, policy(), {"--listen", "127.0.0.1:0"});
  int fd = tcp_connect("127.0.0.1", proxy.port());
  ASSERT_GE(fd, 0);
  const std::string host = "api.test:" + std::to_string(up_->port("http"));
  ASSERT_TRUE(
      send_all(fd, "GET http://" + host + "/hello.txt HTTP/1.1\r\nHost: " + host + "\r\n\r\n"));
  std::string got;
  for (int i = 0; i < 50 && got.find("hello through cordon") == std::string::npos; ++i) {
    got += recv_n(fd, 4096, 100);
  }
  ASSERT_NE(got.find("hello through cordon"), std::string::npos) << got;
  ASSERT_EQ(kill(proxy.child().pid(), SIGTERM), 0);
  int st = proxy.child().wait(std::chrono::seconds(2));
  close(fd);
  ASSERT_NE(st, -1) << "the proxy did not exit within 2 s of SIGTERM";
  auto conns = events_of(proxy.events(), "net.connect");
  ASSERT_EQ(conns.size(), 1u) << dump_events(proxy.events());
  EXPECT_EQ(conns[0]["end"], "stopped");
  EXPECT_EQ(conns[0]["mode"], "http");
  EXPECT_GT(conns[0]["bytes_in"].get<int>(), 21);
}

// A connection the client has just closed when the stop comes is drained, not dropped: it is
// recorded as "closed" with every byte, however soon the SIGTERM follows the close.
TEST_F(NetproxyExplicit, StopRightAfterAClientClosesStillRecordsTheConnection) {
  for (int round = 0; round < 5; ++round) {
    TempDir dir;
    ProxyUnderTest proxy(dir, policy(), {"--listen", "127.0.0.1:0"});
    int fd = -1;
    ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
    ASSERT_TRUE(send_all(fd, "bye"));
    ASSERT_EQ(recv_n(fd, 3), "bye");
    close(fd);
    ASSERT_EQ(kill(proxy.child().pid(), SIGTERM), 0);
    ASSERT_NE(proxy.child().wait(std::chrono::seconds(2)), -1);
    auto conns = events_of(proxy.events(), "net.connect");
    ASSERT_EQ(conns.size(), 1u) << "round " << round << "\n" << dump_events(proxy.events());
    EXPECT_EQ(conns[0]["bytes_out"], 3);
    EXPECT_EQ(conns[0]["bytes_in"], 3);
  }
}

// Tunnels that carried data and went idle hold no pipe (the splice pipes are lent per chunk): the
// proxy's pipe descriptors stay at its small pool, not two per tunnel.
TEST_F(NetproxyExplicit, IdleTunnelsHoldNoPipes) {
  // cordon-netproxy makes itself undumpable: only root may list its fds.
  CORDON_REQUIRE(::geteuid() == 0, "root (to list the undumpable proxy's fds)");
  ProxyUnderTest proxy(dir_, policy(R"("max_connections_per_host": 64)"),
                       {"--listen", "127.0.0.1:0"});
  std::vector<int> fds;
  for (int i = 0; i < 40; ++i) {
    int fd = -1;
    ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
    ASSERT_TRUE(send_all(fd, "ping"));
    ASSERT_EQ(recv_n(fd, 4), "ping");
    fds.push_back(fd);
  }
  int pipes = 0, sockets = 0;
  std::string dir = "/proc/" + std::to_string(proxy.child().pid()) + "/fd";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(e.path(), ec).string();
    pipes += target.rfind("pipe:", 0) == 0 ? 1 : 0;
    sockets += target.rfind("socket:", 0) == 0 ? 1 : 0;
  }
  EXPECT_GE(sockets, 80);  // the 40 tunnels are open, both legs
  EXPECT_LE(pipes, 8) << "pipe fds held by idle tunnels";
  for (int fd : fds) {
    close(fd);
  }
}

TEST_F(NetproxyExplicit, MaxConnectionsNPlusOneRefused) {
  ProxyUnderTest proxy(dir_, policy(R"("max_connections": 3)"), {"--listen", "127.0.0.1:0"});
  std::vector<int> open;
  for (int i = 0; i < 3; ++i) {
    int fd = -1;
    ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0) << i;
    open.push_back(fd);
  }
  // The 4th is refused, over SOCKS5 and with a readable line over the HTTP proxy.
  int fd = -1;
  EXPECT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 2);
  close(fd);
  auto r = curl({"-x", proxy.url(), http_url("/hello.txt")});
  EXPECT_EQ(r.out, "cordon: connection cap network.max_connections (3) reached\n");
  auto hits = wait_events(proxy.events(), "limit.hit", 2);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0]["cap"], "network.max_connections");
  // Closing one frees a slot.
  close(open.back());
  open.pop_back();
  wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
  open.push_back(fd);
  for (int f : open) close(f);
}

TEST_F(NetproxyExplicit, MaxConnectionsPerHost) {
  ProxyUnderTest proxy(dir_, policy(R"("max_connections_per_host": 2)"),
                       {"--listen", "127.0.0.1:0"});
  std::vector<int> open;
  for (int i = 0; i < 2; ++i) {
    int fd = -1;
    ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
    open.push_back(fd);
  }
  auto r = curl({"-x", proxy.url(), "--proxytunnel",
                 "http://echo.test:" + std::to_string(up_->port("echo")) + "/"});
  EXPECT_NE(r.exit_code(), 0);
  // Another host is not affected.
  auto ok = curl({"-x", proxy.url(), http_url("/hello.txt")});
  EXPECT_EQ(ok.out, "hello through cordon\n");
  auto ref = wait_events(proxy.events(), "net.refused", 1);
  ASSERT_EQ(ref.size(), 1u);
  EXPECT_EQ(ref[0]["cap"], "network.max_connections_per_host");
  EXPECT_EQ(ref[0]["reason"],
            "cordon: connection cap for echo.test: network.max_connections_per_host (2) reached");
  for (int f : open) close(f);
}

TEST_F(NetproxyExplicit, ConnectionsPerMinute) {
  ProxyUnderTest proxy(dir_, policy(R"("connections_per_minute": 4)"), {"--listen", "127.0.0.1:0"});
  for (int i = 0; i < 4; ++i) {
    auto r = curl({"-x", proxy.url(), http_url("/hello.txt")});
    EXPECT_EQ(r.out, "hello through cordon\n") << i;
  }
  auto r = curl({"-x", proxy.url(), http_url("/hello.txt")});
  EXPECT_EQ(r.out, "cordon: rate cap network.connections_per_minute (4) reached\n");
}

TEST_F(NetproxyExplicit, BytesOutBudgetCutsTheConnection) {
  ProxyUnderTest proxy(dir_, policy(R"("max_bytes_out": 1000)"), {"--listen", "127.0.0.1:0"});
  auto before = up_->stats()["echo_bytes"].get<int>();
  int fd = -1;
  ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
  ASSERT_TRUE(send_all(fd, std::string(600, 'a')));
  EXPECT_EQ(recv_n(fd, 600).size(), 600u);
  send_all(fd, std::string(5000, 'b'));  // may fail part-way: the proxy cuts us
  bool eof = false;
  auto back = recv_n(fd, 10000, 10000, &eof);
  EXPECT_TRUE(eof);
  close(fd);
  auto hits = wait_events(proxy.events(), "limit.hit", 1);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0]["cap"], "network.max_bytes_out");
  auto conns = wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["bytes_out"], 1000);  // exactly the budget left the proxy
  EXPECT_EQ(conns[0]["end"], "network.max_bytes_out");
  // The proxy has sent its last bytes; the echo server counts them when it is next scheduled.
  int echoed = 0;
  for (int i = 0; i < 100; ++i) {
    echoed = up_->stats()["echo_bytes"].get<int>() - before;
    if (echoed >= 1000) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(echoed, 1000);
  // The budget is spent: new connections are refused with the cap's name.
  EXPECT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 2);
  close(fd);
}

TEST_F(NetproxyExplicit, BytesInBudgetCutsTheConnection) {
  ProxyUnderTest proxy(dir_, policy(R"("max_bytes_in": "1K")"), {"--listen", "127.0.0.1:0"});
  int fd = -1;
  ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
  ASSERT_TRUE(send_all(fd, std::string(600, 'a')));
  EXPECT_EQ(recv_n(fd, 600).size(), 600u);
  send_all(fd, std::string(5000, 'b'));
  bool eof = false;
  auto back = recv_n(fd, 10000, 10000, &eof);
  EXPECT_EQ(back, std::string(424, 'b'));  // 1024 - 600: exactly the rest of the budget
  EXPECT_TRUE(eof);
  close(fd);
  auto conns = wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["bytes_in"], 1024);
  EXPECT_EQ(conns[0]["end"], "network.max_bytes_in");
}

TEST_F(NetproxyExplicit, IdleTimeoutClosesTunnel) {
  ProxyUnderTest proxy(dir_, policy(R"("idle_timeout": "1s")"), {"--listen", "127.0.0.1:0"});
  int fd = -1;
  ASSERT_EQ(socks5_connect(proxy.port(), 3, "echo.test", up_->port("echo"), &fd), 0);
  ASSERT_TRUE(send_all(fd, "x"));
  EXPECT_EQ(recv_n(fd, 1), "x");
  bool eof = false;
  recv_n(fd, 1, 30000, &eof);  // silent: the proxy closes us
  EXPECT_TRUE(eof);
  close(fd);
  auto conns = wait_events(proxy.events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0]["end"], "idle_timeout");
}

TEST_F(NetproxyExplicit, BadPolicyExitsTwoWithFieldPath) {
  write_file(dir_ / "bad.json", R"({"version": 1, "network": {"allow": ["exa mple.com"]}})");
  auto r = run_program({proxy_binary(), "--policy", dir_ / "bad.json", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_THAT(r.err, HasSubstr("network.allow[0]"));
  auto missing = run_program({proxy_binary(), "--policy", dir_ / "nope.json"});
  EXPECT_EQ(missing.exit_code(), 2);
  EXPECT_THAT(missing.err, HasSubstr("nope.json"));
}

TEST_F(NetproxyExplicit, ReadyFdAndHelp) {
  auto help = run_program({proxy_binary(), "--help"});
  EXPECT_EQ(help.exit_code(), 0);
  for (const char* opt : {"--policy", "--listen", "--transparent-fd", "--dns-fd", "--dns-tcp-fd",
                          "--events", "--events-fd", "--session", "--ready-fd"}) {
    EXPECT_THAT(help.out, HasSubstr(opt));
  }
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  write_file(dir_ / "p.json", policy());
  Child c = Child::start(
      {proxy_binary(), "--policy", dir_ / "p.json", "--listen", "127.0.0.1:0", "--ready-fd", "5"},
      {{p[1], 5}});
  close(p[1]);
  pollfd pf{p[0], POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, 20000), 1);
  char b = 0;
  EXPECT_EQ(read(p[0], &b, 1), 1);
  close(p[0]);
}

}  // namespace
}  // namespace cordon::testing
