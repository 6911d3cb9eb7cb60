// `cordon run --decider CMD` and `--decider-socket PATH` for real: the example decider
// (docs/examples/decider.py) outside the sandbox answers for names network.allow does not
// cover, the program inside sees the answer (or the refusal with the decider's reason), and the
// sandbox has no way to the decider's socket.
#include <gmock/gmock.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class DeciderRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_test_files(files_));
    up_ = std::make_unique<Upstreams>(std::vector<std::string>{"root=" + files_ / "www"});
    ASSERT_TRUE(up_->ok());
    ::chmod(files_.path().c_str(), 0755);
  }
  std::string port() const { return std::to_string(up_->port("http")); }
  // api.test is allowed; asked.test and other.test are pinned to the host's loopback, allowed
  // by nothing: only the decider can let them through. `allow` false: no network.allow at all.
  std::string write_policy(bool allow = true) {
    std::string p = files_ / "policy.json";
    write_text(p, R"({"version": 1, "network": {)" +
                      (allow ? R"("allow": ["api.test:)" + port() + R"("], )" : std::string()) +
                      R"("resolve": {"api.test": "127.0.0.1", "asked.test": "127.0.0.1",
                                     "other.test": "127.0.0.1"}}})");
    return p;
  }
  std::string example(const std::string& rules) const {
    return "python3 " + source_path("docs/examples/decider.py") + " --log " + log() + " " + rules;
  }
  std::string log() const { return files_ / "questions.jsonl"; }
  std::vector<nlohmann::json> questions() const { return read_events(log()); }
  std::string url(const std::string& host) const {
    return "http://" + host + ":" + port() + "/hello.txt";
  }
  RunResult sh(const std::string& script, std::vector<std::string> flags) {
    RunSpec spec;
    spec.deadline = std::chrono::seconds(60);
    return f_.sh(script, flags, spec);
  }
  std::vector<nlohmann::json> events(const std::string& kind) {
    RunSpec spec;
    spec.env = f_.env();
    auto r = run_program({cordon_bin(), "log", "last", "--json"}, spec);
    std::vector<nlohmann::json> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      auto ev = nlohmann::json::parse(line, nullptr, false);
      if (ev.is_object() && ev.value("kind", "") == kind) {
        out.push_back(ev);
      }
    }
    return out;
  }

  TempDir files_;
  std::unique_ptr<Upstreams> up_;
  SandboxFixture f_;
};

TEST_F(DeciderRun, AnswersReachTheProgramInsideTheSandbox) {
  auto r = sh("curl -sS " + url("asked.test") + "; curl -sS " + url("asked.test") + "; curl -sS " +
                  url("other.test") + "; curl -sS " + url("api.test"),
              {"--policy", write_policy(), "--decider",
               example("--allow-session asked.test --deny other.test --reason 'not on the list'")});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "hello through cordon\nhello through cordon\ncordon: other.test:" + port() +
                       " is not in network.allow: not on the list\nhello through cordon\n");
  auto q = questions();
  ASSERT_EQ(q.size(), 2u);  // asked.test once (session), other.test; api.test never
  EXPECT_EQ(q[0]["host"], "asked.test");
  EXPECT_EQ(q[1]["host"], "other.test");
  // The request, read before the question (absolute-form through the proxy), and the process
  // connecting with its parents, as /proc showed them while the connection was held.
  EXPECT_EQ(q[0]["method"], "GET");
  EXPECT_EQ(q[0]["path"], "/hello.txt");
  // The proxy reads the process where the kernel lets it: rootless, as the owner of the
  // sandbox's user namespace. As root it runs as the sandbox's user and may not: no process.
  if (::geteuid() == 0) {
    EXPECT_FALSE(q[0].contains("process")) << q[0].dump();
    return;
  }
  EXPECT_THAT(q[0]["process"].value("exe", ""), HasSubstr("curl"));
  EXPECT_EQ(q[0]["process"]["argv"], nlohmann::json::array({"curl", "-sS", url("asked.test")}));
  EXPECT_GT(q[0]["process"]["pid"].get<int>(), 1);
  ASSERT_FALSE(q[0]["parents"].empty());
  EXPECT_THAT(q[0]["parents"][0].value("exe", ""), HasSubstr("sh"));
  auto refused = events("net.refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["decided_by"], "decider");
  EXPECT_EQ(refused[0]["decider_reason"], "not on the list");
  // One net.decider per question; the session answer's reuse is not a question.
  EXPECT_EQ(events("net.decider").size(), 2u);
  // Each question is joined with the process that made the connection.
  size_t by_curl = 0;
  for (const auto& a : events("net.attribution")) {
    if (a.value("of", "") == "net.decider" &&
        a.value("exe", "").find("curl") != std::string::npos) {
      ++by_curl;
    }
  }
  EXPECT_EQ(by_curl, 2u);
}

// A program that resolves the name itself and connects to the address (no proxy settings): the
// sandbox's DNS asks first (kind dns), then the connection is asked about on its own.
TEST_F(DeciderRun, NamesLookedUpInTheSandboxAreAskedAboutToo) {
  auto r = sh("grep options /etc/resolv.conf; curl -sS --noproxy '*' " + url("asked.test") +
                  "; curl -sS --noproxy '*' " + url("other.test") + " 2>&1; echo rc=$?",
              {"--policy", write_policy(), "--decider",
               example("--allow asked.test --deny other.test --reason 'not on the list'")});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  // A lookup may wait for the decider as long as glibc's resolver allows.
  EXPECT_THAT(r.out, HasSubstr("options timeout:30 attempts:1\n"));
  EXPECT_THAT(r.out, HasSubstr("hello through cordon\n"));
  EXPECT_THAT(r.out, HasSubstr("Could not resolve host: other.test"));
  EXPECT_THAT(r.out, HasSubstr("rc=6\n"));
  auto q = questions();
  std::vector<std::string> asked;
  for (const auto& e : q) {
    asked.push_back(e["kind"].get<std::string>() + " " + e["host"].get<std::string>());
  }
  EXPECT_THAT(asked, ::testing::Contains("dns asked.test"));
  EXPECT_THAT(asked, ::testing::Contains("connect asked.test"));
  EXPECT_THAT(asked, ::testing::Contains("dns other.test"));
  EXPECT_THAT(asked, Not(::testing::Contains("connect other.test")));
  for (const auto& e : q) {
    // The transparent plain-HTTP connection: its request head was read before the question, and
    // its process named where the proxy may read it (rootless). A lookup names neither.
    if (e["kind"] == "dns") {
      EXPECT_FALSE(e.contains("process")) << e.dump();
      continue;
    }
    if (::geteuid() != 0) {
      const nlohmann::json proc = e.contains("process") ? e["process"] : nlohmann::json::object();
      EXPECT_THAT(proc.is_object() ? proc.value("exe", "") : "", HasSubstr("curl")) << e.dump();
    }
    if (e["kind"] == "connect") {
      EXPECT_EQ(e["mode"], "transparent");
      EXPECT_EQ(e["method"], "GET");
      EXPECT_EQ(e["path"], "/hello.txt");
    }
  }
  bool dns_refused = false;
  for (const auto& e : events("net.dns")) {
    if (e.value("name", "") == "other.test" && e.value("decision", "") == "deny") {
      dns_refused = true;
      EXPECT_EQ(e["decided_by"], "decider");
      EXPECT_EQ(e["decider_reason"], "not on the list");
      EXPECT_EQ(e["rcode"], "NXDOMAIN");
    }
  }
  EXPECT_TRUE(dns_refused);
}

TEST_F(DeciderRun, ADeciderGivesNetworkEvenWithoutNetworkAllow) {
  auto r = sh("curl -sS " + url("asked.test"),
              {"--policy", write_policy(false), "--decider", example("--allow asked.test")});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "hello through cordon\n");
}

// The advisory mode has its proxy on the host's loopback: the decider answers for it the same way.
TEST_F(DeciderRun, NoNamespacesModeAsksTheDeciderToo) {
  RunSpec spec;
  spec.deadline = std::chrono::seconds(60);
  auto r = f_.run(
      {"--no-namespaces", "-q", "--policy", write_policy(false), "--decider",
       example("--allow asked.test --deny other.test --reason 'not on the list'")},
      {"/bin/sh", "-c", "curl -sS " + url("asked.test") + "; curl -sS " + url("other.test")}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "hello through cordon\ncordon: other.test:" + port() +
                       " is not in network.allow: not on the list\n");
  EXPECT_EQ(questions().size(), 2u);
}

TEST_F(DeciderRun, SilentDeciderTimesOut) {
  auto r = sh("curl -sS " + url("asked.test"),
              {"--policy", write_policy(), "--decider-timeout", "1s", "--decider",
               "python3 " + source_path("tests/netproxy/bad_decider.py") + " silent"});
  EXPECT_EQ(r.out, "cordon: asked.test:" + port() +
                       " is not in network.allow (the decider did not answer within 1 s)\n");
  auto refused = events("net.refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["decided_by"], "timeout");
}

// cordon connects to the decider's socket; the sandbox, where that path is not granted, cannot.
TEST_F(DeciderRun, DeciderSocketServesTheProxyButNotTheSandbox) {
  TempDir sock_dir;
  const std::string sock = sock_dir / "decider.sock";
  Child decider = Child::start({"python3", source_path("docs/examples/decider.py"), "--socket",
                                sock, "--allow", "asked.test"});
  ASSERT_EQ(decider.read_line(), sock);
  const std::string probe =
      "python3 -c 'import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n"
      "  s.connect(sys.argv[1]); print(\"connected\")\nexcept OSError as e: print(\"refused\", "
      "e.errno)' " +
      sock;
  auto r = sh(probe + "; curl -sS " + url("asked.test"),
              {"--policy", write_policy(), "--decider-socket", sock});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  // Not granted: not there at all.
  EXPECT_EQ(r.out, "refused 2\nhello through cordon\n");
  // Under a denied path the socket is out of reach even where its directory is granted and its
  // mode would let anyone connect (the sandbox may run as the decider's own user).
  ASSERT_EQ(::chmod(sock.c_str(), 0666), 0);
  std::string fs_policy = files_ / "fs-policy.json";
  write_text(fs_policy, R"({"version": 1, "filesystem": {"read": [")" + sock_dir.path() +
                            R"("], "deny": [")" + sock + R"("]}})");
  auto denied = sh(probe, {"--policy", fs_policy, "--decider-socket", sock});
  ASSERT_EQ(denied.exit_code(), 0) << denied.out << denied.err;
  EXPECT_THAT(denied.out, HasSubstr("refused "));
  EXPECT_THAT(denied.out, Not(HasSubstr("connected")));
}

TEST_F(DeciderRun, HelpDocumentsTheFlags) {
  auto out = f_.cordon_out({"run", "--help"});
  EXPECT_THAT(out, HasSubstr("--decider CMD"));
  EXPECT_THAT(out, HasSubstr("--decider-socket PATH"));
  EXPECT_THAT(out, HasSubstr("--decider-timeout DURATION"));
  EXPECT_THAT(f_.cordon_out({"run", "--decider-timeout", "soon", "--", "true"}),
              HasSubstr("not a positive duration"));
  EXPECT_THAT(f_.cordon_out({"run", "--decider-timeout", "5s", "--", "true"}),
              HasSubstr("there is no decider to wait for"));
  EXPECT_THAT(f_.cordon_out({"run", "--decider", "x", "--decider-socket", "/y", "--", "true"}),
              HasSubstr("excludes"));
}

}  // namespace
}  // namespace cordon::testing
