// The `cordon` command line: policy subcommands, --help, and errors for bad flags and values.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "policy/loader.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::build_path;
using cordon::testing::run_program;
using cordon::testing::RunSpec;
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

// cordon's own errors, from the policy loader, the session store and the subcommands alike, are
// one line that says "cordon: " or "cordon COMMAND: " once, at its start.
TEST(Cli, AnErrorIsOneLineWithTheCordonPrefixOnce) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string prefix;
    int exit_code;
  };
  const Case cases[] = {
      {{"run", "-q", "-p", dir / "absent.json", "--", "true"}, "cordon: ", 125},
      {{"run", "-q", "--nofile", "1", "--", "true"}, "cordon: --nofile: ", 125},
      {{"log", "nosuch"}, "cordon: ", 1},
      {{"diff", "nosuch"}, "cordon diff: ", 125},
      {{"commit", "nosuch"}, "cordon commit: ", 125},
      {{"completion", "tcsh"}, "cordon completion: ", 125},
      {{"prune", "--older-than", "soon"}, "cordon prune: ", 125},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {cordon_bin()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(c.args[0] + " " + c.args[1]);
    cordon::testing::RunSpec spec;
    spec.env = std::vector<std::string>{"PATH=/usr/bin:/bin", "HOME=" + dir.path(),
                                        "CORDON_STATE_DIR=" + (dir / "state")};
    auto r = run_program(argv, spec);
    EXPECT_EQ(r.exit_code(), c.exit_code) << r.err;
    EXPECT_EQ(r.err.rfind(c.prefix, 0), 0u) << r.err;
    EXPECT_GT(r.err.size(), c.prefix.size() + 1) << "no message after the prefix";
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    const std::string cmd_prefix = "cordon " + c.args[0] + ": ";
    for (const std::string& p : {std::string("cordon: "), cmd_prefix}) {
      size_t first = r.err.find(p);
      EXPECT_TRUE(first == std::string::npos || r.err.find(p, first + 1) == std::string::npos)
          << p << " twice: " << r.err;
    }
    EXPECT_FALSE(r.err.find("cordon: ") != std::string::npos &&
                 r.err.find(cmd_prefix) != std::string::npos)
        << "both prefixes: " << r.err;
  }
}

TEST(Cli, StateDirMustBeAnExistingDirectoryForEveryCommandThatUsesRecords) {
  TempDir dir;
  write_file(dir / "file", "x");
  const std::vector<std::vector<std::string>> commands = {{"run", "--mode", "ro", "--", "true"},
                                                          {"ls"},
                                                          {"log", "last"},
                                                          {"watch", "last"},
                                                          {"report", "last"},
                                                          {"diff", "last"},
                                                          {"commit", "last"},
                                                          {"snapshot", "last"},
                                                          {"rollback", "last"},
                                                          {"discard", "last"},
                                                          {"export", "last"},
                                                          {"import", "s.tar.zst"},
                                                          {"prune"},
                                                          {"policy", "suggest", "last"}};
  for (const std::string& bad : {dir / "missing", dir / "file"}) {
    for (std::vector<std::string> argv : commands) {
      // The option goes right after the subcommand's name(s), before any argument.
      argv.insert(argv.begin() + (argv[0] == "policy" ? 2 : 1), {"--state-dir", bad});
      argv.insert(argv.begin(), cordon_bin());
      auto r = run_program(argv);
      EXPECT_EQ(r.exit_code(), 125) << argv[1] << ": " << r.err;
      EXPECT_NE(r.err.find("cordon: --state-dir " + bad + ": "), std::string::npos)
          << argv[1] << ": " << r.err;
      EXPECT_NE(r.err.find("name an existing directory"), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "") << argv[1];
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "missing"));
}

TEST(Cli, StateDirHoldsTheRecordsAndEventsToStdoutCopiesThem) {
  TempDir flag_dir, env_dir;
  RunSpec spec;
  spec.env = std::vector<std::string>{
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + env_dir.path(),
      "CORDON_STATE_DIR=" + env_dir.path(), "LANG=C"};
  spec.cwd = flag_dir.path();
  // A relative DIR is made absolute for the sidecars, which run elsewhere.
  auto r = run_program({cordon_bin(), "run", "--state-dir", ".", "--events-to", "stdout", "--mode",
                        "ro", "-q", "--", "true"},
                       spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::vector<std::string> ids;
  for (const auto& e : std::filesystem::directory_iterator(flag_dir / "sessions")) {
    ids.push_back(e.path().filename());
  }
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(env_dir / "sessions"));
  // stdout holds the record line for line, session.start first and session.end last.
  std::ifstream events(flag_dir / ("sessions/" + ids[0] + "/events.jsonl"));
  std::string record((std::istreambuf_iterator<char>(events)), {});
  EXPECT_EQ(r.out, record);
  EXPECT_NE(r.out.rfind("{\"v\":1,", 0), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"kind\":\"session.end\""), std::string::npos) << r.out;
  // The other commands find it there, and only there.
  auto ls = run_program({cordon_bin(), "ls", "--state-dir", flag_dir.path()}, spec);
  EXPECT_EQ(ls.exit_code(), 0) << ls.err;
  EXPECT_NE(ls.out.find(ids[0]), std::string::npos) << ls.out;
  auto ls_env = run_program({cordon_bin(), "ls"}, spec);
  EXPECT_EQ(ls_env.out.find(ids[0]), std::string::npos) << ls_env.out;
}

// With --events-to stdout the program shares the stream, and can print lines that look like the
// record's, even with the session id (it can learn it, e.g. from its cgroup or mounts). The
// program never sees the record, so it cannot continue the hash chain: `log --verify --from`
// keeps the lines that do and names the rest, behind a log agent's prefix too.
TEST(Cli, ForgedRecordLinesInAMixedStreamAreNamed) {
  TempDir dir;
  RunSpec spec;
  spec.env =
      std::vector<std::string>{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               "HOME=" + dir.path(), "LANG=C"};
  spec.cwd = dir.path();
  auto r = run_program(
      {cordon_bin(), "run", "--state-dir", dir.path(), "--events-to", "stdout", "--mode", "ro",
       "-q", "--", "sh", "-c",
       R"(echo '{"v":1,"ts":"2026-01-01T00:00:00Z","session":"@ID@","source":"netproxy","kind":"net.connect","name":"pypi.org","chain":"0000000000000000000000000000000000000000000000000000000000000000"}'; echo plain output)"},
      spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::string id;
  for (const auto& e : std::filesystem::directory_iterator(dir / "sessions")) {
    id = e.path().filename();
  }
  ASSERT_FALSE(id.empty());
  ASSERT_NE(r.out.find("plain output"), std::string::npos) << r.out;
  // As a container runtime's log keeps it: a prefix before every line. The forged line gets the
  // session's id (the record's own session.start quotes the command, "@ID@" and all).
  std::string logged;
  std::istringstream lines(r.out);
  size_t forged_line = 0, n = 0;
  for (std::string line; std::getline(lines, line);) {
    ++n;
    if (line.rfind(R"({"v":1,"ts":"2026-01-01T00:00:00Z")", 0) == 0) {
      forged_line = n;
      line.replace(line.find("@ID@"), 4, id);
    }
    logged += "2026-11-28T01:02:03.456Z stdout F " + line + "\n";
  }
  ASSERT_GT(forged_line, 0u);
  std::ofstream(dir / "pod.log") << logged;
  auto v = run_program({cordon_bin(), "log", id, "--verify", "--from", dir / "pod.log"}, spec);
  EXPECT_EQ(v.exit_code(), 1) << v.out << v.err;
  EXPECT_NE(v.out.find("not in its chain (not written by cordon, or altered): " +
                       std::to_string(forged_line) + "\n"),
            std::string::npos)
      << v.out;
  EXPECT_NE(v.out.find("\"kind\":\"net.connect\""), std::string::npos) << v.out;

  // The record alone verifies, from standard input too; an unknown id is said.
  std::ifstream events(dir / ("sessions/" + id + "/events.jsonl"));
  std::string record((std::istreambuf_iterator<char>(events)), {});
  std::ofstream(dir / "record.log") << record;
  auto ok = run_program({cordon_bin(), "log", id, "--verify", "--from", dir / "record.log"}, spec);
  EXPECT_EQ(ok.exit_code(), 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("lines in the record's chain"), std::string::npos) << ok.out;
  auto none =
      run_program({cordon_bin(), "log", "nosuch", "--verify", "--from", dir / "record.log"}, spec);
  EXPECT_EQ(none.exit_code(), 2) << none.out << none.err;
  EXPECT_NE(none.err.find("no line of the session"), std::string::npos) << none.err;
  // An altered genuine line is named as well.
  std::string altered = record;
  const size_t at = altered.find("\"kind\":\"session.start\"");
  ASSERT_NE(at, std::string::npos);
  altered.replace(at, 22, "\"kind\":\"session.strt\"");
  std::ofstream(dir / "altered.log") << altered;
  auto bad =
      run_program({cordon_bin(), "log", id, "--verify", "--from", dir / "altered.log"}, spec);
  EXPECT_EQ(bad.exit_code(), 1) << bad.out << bad.err;
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
