// TLS inspection end to end: real clients (curl, python3, git) through the explicit proxy's
// CONNECT to a loopback HTTPS server whose test CA only the proxy trusts (SSL_CERT_FILE), and
// every boundary attacked: bad upstream certificates, pinned clients, L7 rules over HTTPS,
// smuggling pairs, oversized heads and broken handshakes.
#include <gmock/gmock.h>
#include <sys/stat.h>

#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class NetproxyInspect : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new TempDir();
    ASSERT_TRUE(make_test_files(*certs_));
    auto& d = *certs_;
    up_ = new Upstreams({"root=" + d / "www", "cert=" + d / "srv.pem", "key=" + d / "srv.key"});
    ASSERT_TRUE(up_->ok());
  }
  static void TearDownTestSuite() {
    delete up_;
    delete certs_;
  }

  static std::string https() { return std::to_string(up_->port("https")); }
  // api.test and wrong.test (not in the server's certificate) both reach the loopback server.
  static std::string policy(const std::string& extra) {
    return R"({"version": 1, "network": {
      "allow": ["api.test:)" +
           https() + R"(", "wrong.test:)" + https() + R"("],
      "resolve": {"api.test": "127.0.0.1", "wrong.test": "127.0.0.1"}, )" +
           extra + "}}";
  }
  // The proxy trusts the test CA the way cordon's environment would name it.
  std::unique_ptr<ProxyUnderTest> start(const std::string& extra, bool trust_test_ca = true) {
    std::vector<std::string> prefix{"env"};
    if (trust_test_ca) {
      prefix.push_back("SSL_CERT_FILE=" + *certs_ / "ca.pem");
    } else {
      prefix.push_back("SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt");
    }
    prefix.push_back("SSL_CERT_DIR=/nonexistent");
    auto p = std::make_unique<ProxyUnderTest>(
        dir_, policy(extra),
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--ca-dir", dir_.path()},
        std::vector<std::pair<int, int>>{}, prefix);
    EXPECT_GT(p->port(), 0);
    return p;
  }
  std::string url(const std::string& host, const std::string& path) {
    return "https://" + host + ":" + https() + path;
  }
  // curl through the proxy, trusting only the session CA.
  RunResult curl(const ProxyUnderTest& p, std::vector<std::string> args) {
    std::vector<std::string> argv{"curl", "-sS", "--max-time", "20",       "--noproxy",
                                  "",     "-x",  p.url(),      "--cacert", dir_ / "ca.pem"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_program(argv);
  }
  // A raw TLS client (python3): CONNECT host:port through the proxy, TLS trusting the session
  // CA, sends `payload` and prints what came back until EOF (or 10 s).
  RunResult raw_tls(const ProxyUnderTest& p, const std::string& host, const std::string& payload,
                    const std::string& pre_tls = "") {
    static const char* kScript = R"PY(
import socket, ssl, sys
port, host, hport, ca, payload, pre = sys.argv[1:7]
s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
s.sendall(("CONNECT %s:%s HTTP/1.1\r\nHost: %s:%s\r\n\r\n" % (host, hport, host, hport)).encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
if pre:
    s.sendall(pre.encode().decode("unicode_escape").encode("latin-1"))
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d: break
            out += d
    except Exception as e:
        out += (" [%s]" % type(e).__name__).encode()
    sys.stdout.buffer.write(out); sys.exit(0)
c = ssl.create_default_context(cafile=ca)
t = c.wrap_socket(s, server_hostname=host)
t.sendall(payload.encode().decode("unicode_escape").encode("latin-1"))
out = b""
try:
    while True:
        d = t.recv(65536)
        if not d: break
        out += d
except Exception as e:
    out += (" [%s]" % type(e).__name__).encode()
sys.stdout.buffer.write(out)
)PY";
    return run_program({"python3", "-c", kScript, std::to_string(p.port()), host, https(),
                        dir_ / "ca.pem", payload, pre_tls});
  }

  static TempDir* certs_;
  static Upstreams* up_;
  TempDir dir_;
};
TempDir* NetproxyInspect::certs_ = nullptr;
Upstreams* NetproxyInspect::up_ = nullptr;

TEST(NetproxyInspectPolicy, MissingCaIsAnErrorNamingTheFix) {
  TempDir d;
  write_file(d / "p.json",
             R"({"version": 1, "network": {"allow": ["api.test:443"], "inspect": ["api.test"]}})");
  auto r = run_program({proxy_binary(), "--policy", d / "p.json", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr("no CA was given"));
  EXPECT_THAT(r.err, HasSubstr("--ca-dir"));
}

TEST_F(NetproxyInspect, CurlGetIsInspectedLoggedAndSignedBySessionCa) {
  auto p = start(R"("inspect": ["api.test"])");
  // Two requests on one connection: keep-alive through both TLS legs.
  auto r = curl(*p, {"-v", url("api.test", "/hello.txt"), url("api.test", "/repo.git/HEAD")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\nref: refs/heads/master\n");
  EXPECT_THAT(r.err, HasSubstr("cordon session CA"));
  EXPECT_THAT(r.err, HasSubstr("ALPN: server accepted http/1.1"));
  struct stat st {};
  ASSERT_EQ(stat((dir_ / "ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto http = wait_events(p->events(), "net.http", 2);
  ASSERT_EQ(http.size(), 2u) << dump_events(p->events());
  EXPECT_EQ(http[0]["method"], "GET");
  EXPECT_EQ(http[0]["url"], url("api.test", "/hello.txt"));
  EXPECT_EQ(http[0]["name"], "api.test");
  EXPECT_EQ(http[0]["status"], 200);
  EXPECT_EQ(http[0]["mode"], "inspect");
  EXPECT_TRUE(http[0].contains("duration_ms"));
  EXPECT_GT(http[0]["response_bytes"].get<int>(), 21);
  EXPECT_GT(http[0]["request_bytes"].get<int>(), 20);
  EXPECT_EQ(http[1]["url"], url("api.test", "/repo.git/HEAD"));
  // One connection for both requests, recorded once the proxy has seen curl close it (which can
  // trail curl's exit), and no other after the proxy stops.
  auto conns = wait_events(p->events(), "net.connect", 1);
  ASSERT_EQ(conns.size(), 1u) << dump_events(p->events());
  p->child().stop();
  EXPECT_EQ(events_of(p->events(), "net.connect").size(), 1u) << dump_events(p->events());
}

TEST_F(NetproxyInspect, NotInspectedHostIsATunnelWithTheServersOwnCertificate) {
  auto p = start(R"("inspect": ["other.test"])");
  auto r = run_program({"curl", "-sS", "-v", "--max-time", "20", "--noproxy", "", "-x", p->url(),
                        "--cacert", *certs_ / "ca.pem", url("api.test", "/hello.txt")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\n");
  EXPECT_THAT(r.err, HasSubstr("cordon test CA"));
  p->child().stop();
  EXPECT_TRUE(events_of(p->events(), "net.http").empty());
}

TEST_F(NetproxyInspect, RulesAllowGetAndDenyPostOnTheSameHttpsHost) {
  // No network.inspect: the hosts network.rules name are inspected.
  auto p = start(R"("rules": [{"host": "api.test", "methods": ["GET"], "action": "allow"}])");
  const int posts = up_->stats().value("posts", -1);
  auto get = curl(*p, {url("api.test", "/hello.txt")});
  ASSERT_EQ(get.exit_code(), 0) << get.err;
  EXPECT_EQ(get.out, "hello through cordon\n");
  auto post = curl(*p, {"-w", "%{http_code}", "-d", "secret=1", url("api.test", "/upload")});
  EXPECT_EQ(post.out, "cordon: POST api.test/upload is denied by network.rules (no match)\n403");
  EXPECT_EQ(up_->stats().value("posts", -1), posts);
  auto refused = wait_events(p->events(), "net.refused", 1);
  ASSERT_EQ(refused.size(), 1u) << dump_events(p->events());
  EXPECT_EQ(refused[0]["mode"], "inspect");
  EXPECT_EQ(refused[0]["method"], "POST");
  EXPECT_EQ(refused[0]["rule"], "network.rules (no match)");
}

TEST_F(NetproxyInspect, ChunkedAndExpectContinueBodiesArrive) {
  auto p = start(R"("inspect": ["api.test"])");
  std::string big(300000, 'x');
  write_file(dir_ / "body", big);
  auto r = curl(*p, {"-H", "Transfer-Encoding: chunked", "--data-binary", "@" + dir_ / "body",
                     url("api.test", "/upload")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "got 300000 bytes\n");
  r = curl(*p, {"-H", "Expect: 100-continue", "--data-binary", "@" + dir_ / "body",
                url("api.test", "/upload")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "got 300000 bytes\n");
}

TEST_F(NetproxyInspect, PythonAndGitWorkThroughInspection) {
  auto p = start(R"("inspect": ["api.test"])");
  std::string py =
      "import urllib.request,sys;print(urllib.request.urlopen(sys.argv[1],timeout=20).read()."
      "decode(),end='')";
  auto r = run_program({"env", "HTTPS_PROXY=" + p->url(), "SSL_CERT_FILE=" + dir_ / "ca.pem",
                        "python3", "-c", py, url("api.test", "/hello.txt")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\n");
  r = run_program({"env", "HTTPS_PROXY=" + p->url(), "GIT_SSL_CAINFO=" + dir_ / "ca.pem", "git",
                   "clone", "-q", url("api.test", "/repo.git"), dir_ / "clone"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::ifstream readme(dir_ / "clone/README");
  std::string line;
  std::getline(readme, line);
  EXPECT_EQ(line, "cordon test repo");
}

TEST_F(NetproxyInspect, UntrustedUpstreamCertificateIsRefusedWithItsReason) {
  // The proxy trusts only the system store, which does not hold the test CA.
  auto p = start(R"("inspect": ["api.test"])", false);
  auto r = curl(*p, {"-w", "%{http_code}", url("api.test", "/hello.txt")});
  EXPECT_THAT(r.out, HasSubstr("certificate verify failed: unable to get local issuer"));
  EXPECT_THAT(r.out, HasSubstr("502"));
  auto refused = wait_events(p->events(), "net.refused", 1);
  ASSERT_EQ(refused.size(), 1u) << dump_events(p->events());
  EXPECT_EQ(refused[0]["rule"], "network.inspect (upstream certificate)");
  EXPECT_TRUE(events_of(p->events(), "net.http").empty());
}

TEST_F(NetproxyInspect, UpstreamCertificateForAnotherNameIsRefused) {
  auto p = start(R"("inspect": ["wrong.test"])");
  auto r = curl(*p, {"-w", "%{http_code}", url("wrong.test", "/hello.txt")});
  EXPECT_THAT(r.out, HasSubstr("hostname mismatch"));
  EXPECT_THAT(r.out, HasSubstr("502"));
  EXPECT_TRUE(events_of(p->events(), "net.http").empty());
}

TEST_F(NetproxyInspect, PinnedClientFailsWhenInspectedAndWorksWhenExcluded) {
  auto pin = run_program({"sh", "-c",
                          "openssl pkey -in " + *certs_ / "srv.key" +
                              " -pubout -outform der | openssl dgst -sha256 -binary | base64"});
  ASSERT_EQ(pin.exit_code(), 0);
  std::string hash = pin.out.substr(0, pin.out.find('\n'));
  std::vector<std::string> args{"--pinnedpubkey", "sha256//" + hash, url("api.test", "/hello.txt")};
  {
    auto p = start(R"("inspect": ["*.test"])");
    auto r = curl(*p, args);
    EXPECT_EQ(r.exit_code(), 90) << r.out << r.err;  // CURLE_SSL_PINNEDPUBKEYNOTMATCH
    EXPECT_EQ(r.out, "");
  }
  TempDir d2;
  {
    auto p = start(R"("inspect": ["*.test"], "inspect_exclude": ["api.test"])");
    auto r = run_program({"curl", "-sS", "--max-time", "20", "--noproxy", "", "-x", p->url(),
                          "--cacert", *certs_ / "ca.pem", "--pinnedpubkey", "sha256//" + hash,
                          url("api.test", "/hello.txt")});
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_EQ(r.out, "hello through cordon\n");
  }
}

TEST_F(NetproxyInspect, SmugglingPairIsRefusedBeforeTheUpstream) {
  auto p = start(R"("inspect": ["api.test"])");
  const int posts = up_->stats().value("posts", -1);
  auto r = raw_tls(*p, "api.test",
                   "POST /upload HTTP/1.1\\r\\nHost: api.test:" + https() +
                       "\\r\\nContent-Length: 4\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n"
                       "\\r\\nGET /hello.txt HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n");
  EXPECT_THAT(r.out, HasSubstr("400 Bad Request"));
  EXPECT_THAT(r.out, HasSubstr("Content-Length with Transfer-Encoding"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("hello through cordon")));
  EXPECT_EQ(up_->stats().value("posts", -1), posts);
}

TEST_F(NetproxyInspect, AFoldedHeaderLineIsRefusedBeforeTheUpstream) {
  auto p = start(R"("inspect": ["api.test"])");
  const int posts = up_->stats().value("posts", -1);
  auto r = raw_tls(*p, "api.test",
                   "POST /upload HTTP/1.1\\r\\nHost: api.test:" + https() +
                       "\\r\\nX-Note: one\\r\\n two\\r\\nContent-Length: 2\\r\\n\\r\\nhi");
  EXPECT_THAT(r.out, HasSubstr("400 Bad Request"));
  EXPECT_THAT(r.out, HasSubstr("obs-fold"));
  auto refused = wait_events(p->events(), "net.refused", 1, [](const json& e) {
    return e.value("rule", "") == "network (obs-fold)";
  });
  ASSERT_EQ(refused.size(), 1u) << dump_events(p->events());
  EXPECT_EQ(refused[0].value("mode", ""), "inspect");
  EXPECT_EQ(refused[0].value("method", ""), "POST");
  EXPECT_EQ(up_->stats().value("posts", -1), posts);
}

TEST_F(NetproxyInspect, HostHeaderNamingAnotherServerIsRefused) {
  auto p = start(R"("inspect": ["api.test"])");
  auto r = raw_tls(*p, "api.test", "GET /hello.txt HTTP/1.1\\r\\nHost: evil.example\\r\\n\\r\\n");
  EXPECT_THAT(r.out, HasSubstr("400 Bad Request"));
  EXPECT_THAT(r.out, HasSubstr("does not name api.test"));
}

TEST_F(NetproxyInspect, OversizedHeadGets431AndMalformedHandshakeIsLogged) {
  auto p = start(R"("inspect": ["api.test"])");
  auto r =
      raw_tls(*p, "api.test",
              "GET /hello.txt HTTP/1.1\\r\\nHost: api.test\\r\\nX-Big: " + std::string(20000, 'a') +
                  "\\r\\n\\r\\n");
  EXPECT_THAT(r.out, HasSubstr("431"));
  // A ClientHello that is not one: the handshake fails, is logged, and the proxy serves on.
  r = raw_tls(*p, "api.test", "", "\\x16\\x03\\x01\\x00\\x05\\x01\\x00\\x00\\xff\\xff garbage");
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("HTTP/1.1")));
  auto refused = wait_events(p->events(), "net.refused", 1, [](const json& e) {
    return e.value("rule", "") == "network.inspect (client handshake)";
  });
  EXPECT_EQ(refused.size(), 1u) << dump_events(p->events());
  auto ok = curl(*p, {url("api.test", "/hello.txt")});
  EXPECT_EQ(ok.out, "hello through cordon\n");
}

}  // namespace
}  // namespace cordon::testing
