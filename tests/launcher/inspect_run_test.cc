// TLS inspection under `cordon run`: the session CA made in the session directory and trusted in
// the sandbox (its /etc/ssl/certs bundle and the usual variables) with no per-tool setting, real
// clients (curl, python3 urllib and requests, node fetch, git) to a loopback HTTPS server whose
// test CA cordon trusts through SSL_CERT_FILE, L7 rules and net.http events; and the boundary
// attacked: the CA key from inside, a pinned client, a bad upstream certificate.
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

// A loopback HTTPS server (the test CA's certificate for api.test and other.test) and a cordon
// whose environment trusts the test CA, so its proxy can verify the server.
class InspectRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_test_files(files_));
    up_ = std::make_unique<Upstreams>(std::vector<std::string>{
        "root=" + files_ / "www", "cert=" + files_ / "srv.pem", "key=" + files_ / "srv.key"});
    ASSERT_TRUE(up_->ok());
    ::chmod(files_.path().c_str(), 0755);
    f_.env().push_back("SSL_CERT_FILE=" + files_ / "ca.pem");
    f_.env().push_back("SSL_CERT_DIR=/nonexistent");
  }
  std::string port() const { return std::to_string(up_->port("https")); }
  std::string url(const std::string& host, const std::string& path) const {
    return "https://" + host + ":" + port() + path;
  }
  // api.test, other.test and wrong.test (not in the server's certificate) all reach the server.
  std::string policy(const std::string& extra) {
    std::string p = files_ / "policy.json";
    write_text(p, R"({"version": 1, "network": {"allow": ["api.test:)" + port() +
                      R"(", "other.test:)" + port() + R"(", "wrong.test:)" + port() +
                      R"("], "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1",
                      "wrong.test": "127.0.0.1"})" +
                      extra + "}}");
    return p;
  }
  RunResult sh(const std::string& policy_file, const std::string& script) {
    RunSpec spec;
    spec.deadline = std::chrono::seconds(90);
    return f_.sh(script, {"--policy", policy_file}, spec);
  }
  // Every file named `name` beneath the state directory.
  std::vector<std::string> state_files(const std::string& name) {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(f_.state_dir(), ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->path().filename() == name) {
        out.push_back(it->path());
      }
    }
    return out;
  }
  std::string pin_of_server_key() {
    auto r = run_program({"sh", "-c",
                          "openssl pkey -in " + files_ / "srv.key" +
                              " -pubout -outform der | openssl dgst -sha256 -binary | base64"});
    return r.out.substr(0, r.out.find('\n'));
  }

  TempDir files_;
  std::unique_ptr<Upstreams> up_;
  SandboxFixture f_;
};

constexpr const char* kRules =
    R"(, "rules": [{"host": "api.test", "methods": ["GET", "HEAD"], "action": "allow"},
                   {"host": "api.test", "methods": ["POST"], "action": "deny"}])";

TEST_F(InspectRun, ClientsTrustTheSessionCaWithNoSettingAndRulesHold) {
  auto p = policy(kRules);
  const std::string hello = url("api.test", "/hello.txt");
  auto r = sh(
      p, "curl -sS -v " + hello + " 2>/tmp/curl.err; grep -c 'issuer: O=cordon; CN=cordon session" +
             " CA' /tmp/curl.err; "
             "curl -sS -w ' %{http_code}\\n' -X POST -d x " +
             url("api.test", "/upload") +
             "; python3 -c 'import urllib.request,sys; "
             "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())' " +
             hello +
             "; python3 -c 'import requests,sys; "
             "sys.stdout.write(requests.get(sys.argv[1], timeout=20).text)' " +
             hello +
             "; node -e 'fetch(process.argv[1]).then(r => r.text()).then(t => "
             "process.stdout.write(\"node \" + t)).catch(e => { console.error(e.cause || e); "
             "process.exit(3) })' " +
             hello + " && git clone -q " + url("api.test", "/repo.git") +
             " /tmp/clone && cat /tmp/clone/README");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "hello through cordon\n"
            "1\n"
            "cordon: POST api.test/upload is denied by network.rules[1]\n 403\n"
            "hello through cordon\n"
            "hello through cordon\n"
            "node hello through cordon\n"
            "cordon test repo\n")
      << r.err;
  auto http = f_.last_events("net.http");
  auto count = [&](const std::string& method, const std::string& path, int status) {
    return std::count_if(http.begin(), http.end(), [&](const nlohmann::json& e) {
      return e.value("method", "") == method && e.value("url", "") == url("api.test", path) &&
             e.value("status", 0) == status && e.value("mode", "") == "inspect";
    });
  };
  EXPECT_EQ(count("GET", "/hello.txt", 200), 4) << f_.cordon_out({"log", "last", "--net"});
  EXPECT_GE(count("GET", "/repo.git/info/refs?service=git-upload-pack", 200) +
                count("GET", "/repo.git/info/refs", 200),
            1);
  auto net = f_.cordon_out({"log", "last", "--net"});
  EXPECT_THAT(net, HasSubstr("api.test ("));
  EXPECT_THAT(net, HasSubstr("403 (refused by cordon) 1"));
  EXPECT_THAT(net, HasSubstr("network.rules[1]"));
}

TEST_F(InspectRun, TheCaKeyStaysOutsideAndTheBundleAddsTheCaToTheHosts) {
  auto p = policy(R"(, "inspect": ["api.test"])");
  const std::string state = f_.state_dir();
  auto r = sh(p,
              "printenv SSL_CERT_FILE NODE_EXTRA_CA_CERTS REQUESTS_CA_BUNDLE CURL_CA_BUNDLE "
              "GIT_SSL_CAINFO PIP_CERT CARGO_HTTP_CAINFO AWS_CA_BUNDLE DENO_CERT | sort | uniq -c "
              "| tr -s ' '; "
              "grep -c 'PRIVATE KEY' /etc/ssl/certs/ca-certificates.crt; "
              "echo ---; cat /etc/ssl/certs/ca-certificates.crt; echo ---; "
              "ls -R " +
                  state +
                  " 2>/dev/null | grep -c 'ca\\.key'; "
                  // The CA's key is PEM (PKCS#8 or SEC1); the ssh canary's decoy, an OpenSSH
                  // key in the sandbox's home, is the sandbox's own.
                  "grep -rlE 'BEGIN (EC )?PRIVATE KEY' /etc /tmp " +
                  state + " 2>/dev/null | head -3; true");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const size_t cut = r.out.find("---\n"), end = r.out.rfind("---\n");
  ASSERT_NE(cut, end) << r.out;
  const std::string bundle = r.out.substr(cut + 4, end - cut - 4);
  EXPECT_EQ(r.out.substr(0, cut) + r.out.substr(end + 4),
            " 9 /etc/ssl/certs/ca-certificates.crt\n0\n0\n")
      << r.out << r.err;
  auto keys = state_files("ca.key");
  ASSERT_EQ(keys.size(), 1u);
  struct stat st {};
  ASSERT_EQ(::stat(keys[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto certs = state_files("ca.pem");
  ASSERT_EQ(certs.size(), 1u);
  // The host's bundle (here the test CA, as SSL_CERT_FILE names it), then the session CA.
  EXPECT_EQ(bundle, read_text(files_ / "ca.pem") + read_text(certs[0]));
}

// A grant reaching the session directory does not show the key: rootless it belongs to the
// sandbox's own uid, so only the mask keeps it from being read.
TEST_F(InspectRun, TheCaKeyIsMaskedWhereAGrantReachesIt) {
  const std::string state = f_.state_dir();
  auto p = policy(R"(, "inspect": ["api.test"]}, "filesystem": {"read": [")" + state + R"("])");
  auto r = sh(p, "for f in $(find " + state + " -name ca.key); do cat $f; done | wc -c; find " +
                     state + " -name ca.key | wc -l");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  // Rootless the file is there and empty (the mask); as root the session directory is root's and
  // closed to the sandbox's user, so nothing is found at all.
  EXPECT_EQ(r.out, ::geteuid() == 0 ? "0\n0\n" : "0\n1\n") << r.err;
  auto keys = state_files("ca.key");
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_THAT(read_text(keys[0]), HasSubstr("PRIVATE KEY"));
}

TEST_F(InspectRun, PolicyCaIsUsedAndNoSessionCaIsMade) {
  ASSERT_EQ(run_program({"sh", "-c",
                         "cd " + files_.path() +
                             " && openssl req -x509 -newkey ec -pkeyopt "
                             "ec_paramgen_curve:prime256v1 -nodes -keyout my.key -out my.crt "
                             "-days 2 -subj '/CN=my inspection CA' 2>/dev/null"})
                .exit_code(),
            0);
  auto p = policy(R"(, "inspect": ["api.test"], "ca": {"cert": ")" + files_ / "my.crt" +
                  R"(", "key": ")" + files_ / "my.key" + R"("})");
  auto r = sh(p, "curl -sS -v " + url("api.test", "/hello.txt") +
                     " 2>/tmp/curl.err; grep -c 'issuer: CN=my inspection CA' /tmp/curl.err");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "hello through cordon\n1\n");
  EXPECT_TRUE(state_files("ca.key").empty());
}

TEST_F(InspectRun, PinnedClientFailsWhenInspectedAndWorksWhenExcluded) {
  const std::string pin = pin_of_server_key();
  ASSERT_FALSE(pin.empty());
  auto p = policy(R"(, "inspect": ["*.test"], "inspect_exclude": ["other.test"])");
  auto r = sh(p, "curl -sS --pinnedpubkey 'sha256//" + pin + "' " + url("api.test", "/hello.txt") +
                     "; echo \"pinned inspected: $?\"; curl -sS --pinnedpubkey 'sha256//" + pin +
                     "' " + url("other.test", "/hello.txt") + "; echo \"pinned excluded: $?\"");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "pinned inspected: 90\nhello through cordon\npinned excluded: 0\n") << r.err;
  EXPECT_THAT(r.err, HasSubstr("pinned"));
  auto http = f_.last_events("net.http");
  ASSERT_EQ(http.size(), 0u);  // neither reached a request: one failed, one was a tunnel
}

TEST_F(InspectRun, BadUpstreamCertificateIsARefusalWithItsReason) {
  auto p = policy(R"(, "inspect": ["wrong.test"])");
  auto r = sh(p, "curl -sS -w ' %{http_code}\\n' " + url("wrong.test", "/hello.txt"));
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("hostname mismatch"));
  EXPECT_THAT(r.out, HasSubstr(" 502\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("hello through cordon")));
  auto refused = f_.last_events("net.refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].value("rule", ""), "network.inspect (upstream certificate)");
}

}  // namespace
}  // namespace cordon::testing
