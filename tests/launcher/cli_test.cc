// The `cordon` command line: policy subcommands, --help, and errors for bad flags and values.
#include <gtest/gtest.h>

#include <fstream>

#include "policy/loader.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::build_path;
using cordon::testing::run_program;
using cordon::testing::TempDir;

std::string cordon_bin() { return build_path("launcher/cordon"); }

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(PolicyCommand, DefaultPrintsTheEmbeddedPolicyWhichParsesBack) {
  auto r = run_program({cordon_bin(), "policy", "default"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find("\"network\""), std::string::npos);
  // What the user sees is exactly what cordon runs with when given no file.
  EXPECT_EQ(cordon::policy::parse_policy(r.out), cordon::policy::default_policy());
}

TEST(PolicyCommand, CheckAcceptsAGoodFile) {
  TempDir dir;
  write_file(dir / "p.json", R"({ // comments are fine
    "network": {"allow": ["api.openai.com:443"]}, "process": {"memory": "512M"}})");
  auto r = run_program({cordon_bin(), "policy", "check", dir / "p.json"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find("ok"), std::string::npos);
}

TEST(PolicyCommand, CheckNamesFieldPathValueAndSuggestion) {
  TempDir dir;
  write_file(dir / "typo.json", R"({"network": {"alow": ["x.com"]}})");
  auto r = run_program({cordon_bin(), "policy", "check", dir / "typo.json"});
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("network.alow"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("allow"), std::string::npos) << r.err;

  write_file(dir / "bad.json", R"({"network": {"allow": ["ok.com", "exa mple.com:443"]}})");
  r = run_program({cordon_bin(), "policy", "check", dir / "bad.json"});
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("network.allow[1]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exa mple.com:443"), std::string::npos) << r.err;

  write_file(dir / "size.json", R"({"process": {"memory": "12Q"}})");
  r = run_program({cordon_bin(), "policy", "check", dir / "size.json"});
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("process.memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("12Q"), std::string::npos) << r.err;
}

TEST(PolicyCommand, CheckReportsAMissingFileByName) {
  auto r = run_program({cordon_bin(), "policy", "check", "/nonexistent/cordon-policy.json"});
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("/nonexistent/cordon-policy.json"), std::string::npos) << r.err;
}

TEST(PolicyCommand, ExplainSaysWhatIsAllowed) {
  TempDir dir;
  write_file(dir / "p.json", R"({"network": {"allow": ["api.openai.com:443"]}})");
  auto r = run_program({cordon_bin(), "policy", "explain", dir / "p.json"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find("api.openai.com"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("network.allow[0]"), std::string::npos) << r.out;
}

TEST(Cli, HelpListsEverySubcommandAndRunOption) {
  auto r = run_program({cordon_bin(), "--help"});
  ASSERT_EQ(r.exit_code(), 0);
  for (const char* word : {"run", "policy", "ls", "log", "prune", "124", "125", "126", "127"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from:\n" << r.out;
  }
  r = run_program({cordon_bin(), "run", "--help"});
  ASSERT_EQ(r.exit_code(), 0);
  for (const char* flag :
       {"--policy", "--workspace", "--mode", "--memory", "--cpus", "--pids", "--nofile",
        "--timeout", "--env-keep", "--env-set", "--allow-host", "--quiet"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << " missing from:\n" << r.out;
  }
}

TEST(Cli, UnknownFlagIsAUsageErrorWithExit125) {
  auto r = run_program({cordon_bin(), "run", "--memroy", "1G", "--", "true"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("--memroy"), std::string::npos) << r.err;
  r = run_program({cordon_bin(), "frobnicate"});
  EXPECT_EQ(r.exit_code(), 125);
}

TEST(Cli, BadOverrideValueNamesFlagAndValueAndRunsNothing) {
  TempDir dir;
  std::string marker = dir / "ran";
  auto r = run_program({cordon_bin(), "run", "-q", "--mode", "rw", "-w", dir.path(), "--memory",
                        "12Q", "--", "touch", marker});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("--memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("12Q"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(marker).good()) << "the program ran despite a bad flag";

  r = run_program({cordon_bin(), "run", "-q", "--timeout", "soon", "--", "true"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("soon"), std::string::npos) << r.err;
}

TEST(Cli, RunWithoutACommandIsAUsageError) {
  auto r = run_program({cordon_bin(), "run"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("no command given"), std::string::npos) << r.err;
  r = run_program({cordon_bin(), "run", "-q", "--"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("no command given"), std::string::npos) << r.err;
}

}  // namespace
