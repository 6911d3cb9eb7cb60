// Secrets in the environment, through a real `cordon run`: --env-pass hands a denied variable
// over, said at start and recorded by name; a kept variable a deny pattern stops is said and
// recorded instead of silently dropped; and no value of a passed or set secret reaches the disk
// (policy.json, events, summary, anything in the session) or a sidecar's argv.
#include <dirent.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

constexpr const char* kPassed = "sk-ant-PASSED-0123456789";
constexpr const char* kSet = "sk-openai-SET-9876543210";
constexpr const char* kKept = "ghp-KEPT-5555";

// Every file under `dir` whose bytes contain `needle`.
std::vector<std::string> files_containing(const std::string& dir, const std::string& needle) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) {
      break;
    }
    if (it->is_regular_file(ec) && read_text(it->path()).find(needle) != std::string::npos) {
      out.push_back(it->path());
    }
  }
  return out;
}

std::string state_dir(const SandboxFixture& f) {
  for (const auto& kv : const_cast<SandboxFixture&>(f).env()) {
    if (kv.rfind("CORDON_STATE_DIR=", 0) == 0) {
      return kv.substr(17);
    }
  }
  return {};
}

TEST(EnvSecrets, PassedAndSetSecretsReachTheProgramAndNothingOnDisk) {
  SandboxFixture f;
  f.make_workspace_owned();
  f.env().push_back(std::string("ANTHROPIC_API_KEY=") + kPassed);
  f.env().push_back(std::string("GH_TOKEN=") + kKept);
  // cow through cordon-fs where it can run: its argv and record are checked too.
  auto r = f.run({"--env-pass", "ANTHROPIC_API_KEY", "--env-keep", "GH_TOKEN", "--env-set",
                  std::string("OPENAI_API_KEY=") + kSet, "--env-set", "CI=1", "--env-pass",
                  "NOT_ON_THIS_HOST"},
                 {"sh", "-c",
                  "echo \"[$ANTHROPIC_API_KEY|$GH_TOKEN|$OPENAI_API_KEY|$CI]\"; "
                  "for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; "
                  "done"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find(std::string("[") + kPassed + "||" + kSet + "|1]"), std::string::npos)
      << r.out;
  // Said at start, by name.
  EXPECT_NE(r.err.find("cordon: environment: passing ANTHROPIC_API_KEY from the host "
                       "(process.env.pass) although process.env.deny[4] (\"*API_KEY*\")"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cordon: environment: GH_TOKEN is not passed although kept: "
                       "process.env.deny[0] (\"*TOKEN*\") wins over keep; to hand it to the "
                       "program, --env-pass GH_TOKEN"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("NOT_ON_THIS_HOST is to be passed (process.env.pass) but is not set here"),
            std::string::npos)
      << r.err;
  for (const char* v : {kPassed, kSet, kKept}) {
    EXPECT_EQ(r.err.find(v), std::string::npos) << v;
  }

  // Recorded by name: events, and policy.json with the names and no value.
  auto ev = run_program({cordon_bin(), "log", "last", "--json"}, {.env = f.env()});
  EXPECT_NE(ev.out.find("\"kind\":\"env.passed\""), std::string::npos) << ev.out;
  EXPECT_NE(ev.out.find("\"name\":\"ANTHROPIC_API_KEY\""), std::string::npos);
  EXPECT_NE(ev.out.find("\"overrides\":\"process.env.deny[4]\""), std::string::npos);
  EXPECT_NE(ev.out.find("\"kind\":\"env.refused\""), std::string::npos);
  EXPECT_NE(ev.out.find("\"name\":\"GH_TOKEN\""), std::string::npos);
  std::string sessions = state_dir(f) + "/sessions";
  std::vector<std::string> policies = files_containing(sessions, "\"pass\"");
  ASSERT_EQ(policies.size(), 1u);
  std::string pj = read_text(policies[0]);
  EXPECT_NE(pj.find("\"ANTHROPIC_API_KEY\""), std::string::npos) << pj;
  EXPECT_NE(pj.find("\"OPENAI_API_KEY\": \"(secret, not recorded)\""), std::string::npos) << pj;
  EXPECT_NE(pj.find("\"CI\": \"1\""), std::string::npos) << pj;

  // Nowhere on disk: the whole session directory (policy.json, events, summary, logs, layers).
  for (const char* v : {kPassed, kSet, kKept}) {
    EXPECT_EQ(files_containing(sessions, v), std::vector<std::string>{}) << v;
  }
  // No process of the sandbox carries a secret in its argv: the program's own listing of
  // /proc shows every process it can see, cordon's sidecars included where they live inside.
  size_t listed = r.out.find("]\n");
  ASSERT_NE(listed, std::string::npos);
  for (const char* v : {kPassed, kKept}) {
    EXPECT_EQ(r.out.find(v, listed), std::string::npos) << v;
  }
}

TEST(EnvSecrets, SidecarsGetNoSecretInArgvOrRecord) {
  SandboxFixture f;
  f.make_workspace_owned();
  f.env().push_back(std::string("ANTHROPIC_API_KEY=") + kPassed);
  // With network (cordon-netproxy) and the cow view (cordon-fs): while the program waits, the
  // host's process table is read for the sidecars' argv.
  std::vector<std::string> argv = {cordon_bin(),
                                   "run",
                                   "-q",
                                   "--workspace",
                                   f.ws(),
                                   "--env-pass",
                                   "ANTHROPIC_API_KEY",
                                   "--env-set",
                                   std::string("OPENAI_API_KEY=") + kSet,
                                   "--allow-host",
                                   "api.example.test:443",
                                   "--",
                                   "sh",
                                   "-c",
                                   "echo ready; sleep 3"};
  Background bg(argv, f.env(), f.ws());
  ASSERT_NE(bg.read_until("ready\n").find("ready"), std::string::npos);
  int sidecars = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    std::string cmdline = read_text(e.path().string() + "/cmdline");
    if (cmdline.find("cordon-netproxy") == std::string::npos &&
        cmdline.find("cordon-fs") == std::string::npos) {
      continue;
    }
    if (cmdline.find(f.ws()) == std::string::npos &&
        cmdline.find(state_dir(f)) == std::string::npos) {
      continue;  // another test's
    }
    ++sidecars;
    EXPECT_EQ(cmdline.find(kPassed), std::string::npos) << cmdline;
    EXPECT_EQ(cmdline.find(kSet), std::string::npos) << cmdline;
  }
  EXPECT_GE(sidecars, 1);
  EXPECT_EQ(bg.wait(), 0);
  for (const char* v : {kPassed, kSet}) {
    EXPECT_EQ(files_containing(state_dir(f), v), std::vector<std::string>{}) << v;
  }
}

}  // namespace
}  // namespace cordon::testing
