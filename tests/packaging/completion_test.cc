// Shell completion (launcher/commands/completion.cc, made at build time by
// packaging/CMakeLists.txt): the scripts the package installs are what the built cordon prints,
// complete every subcommand and option its --help names, and real bash and fish complete
// subcommands, options, values, the program of `cordon run` and session ids with them.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::build_path;
using cordon::testing::run_program;
using cordon::testing::RunSpec;
using cordon::testing::TempDir;
using Words = std::vector<std::string>;

const char* kOlder = "20261127-010203-abc123";
const char* kNewer = "20261127-020304-def456";

std::string cordon() { return build_path("launcher/cordon"); }
std::string script(const std::string& name) { return build_path("packaging/completion/" + name); }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Words lines(const std::string& text) {
  Words out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) {
      out.push_back(l.substr(0, l.find('\t')));  // fish: "candidate<TAB>description"
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool contains(const Words& w, const std::string& s) {
  return std::find(w.begin(), w.end(), s) != w.end();
}

// A sessions directory with two (empty) session records, as `cordon ls --ids` reads it.
struct Sessions {
  TempDir state;
  Sessions() {
    ::mkdir((state / "sessions").c_str(), 0700);
    ::mkdir((state / "sessions/" + kOlder).c_str(), 0700);
    ::mkdir((state / "sessions/" + kNewer).c_str(), 0700);
  }
  RunSpec spec(const std::string& cwd = "") const {
    RunSpec s;
    s.env = Words{"PATH=" + build_path("launcher") + ":/usr/bin:/bin",
                  "CORDON_STATE_DIR=" + state.path(), "HOME=" + state.path(), "LANG=C.UTF-8"};
    s.cwd = cwd.empty() ? state.path() : cwd;
    return s;
  }
};

// What bash completes for `words` (the last one is under the cursor): the installed script
// sourced, COMP_WORDS and COMP_CWORD set as bash sets them for a TAB, then its function called.
Words complete_bash(const Sessions& s, const Words& words, const std::string& cwd = "") {
  Words argv = {"bash",
                "--norc",
                "--noprofile",
                "-c",
                "source \"$1\" && shift && COMP_WORDS=(\"$@\") && "
                "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) && _cordon && "
                "printf '%s\\n' \"${COMPREPLY[@]}\"",
                "bash",
                script("cordon")};
  argv.insert(argv.end(), words.begin(), words.end());
  auto r = run_program(argv, s.spec(cwd));
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return lines(r.out);
}

bool have(const std::string& program) {
  return run_program({"sh", "-c", "command -v " + program}).exit_code() == 0;
}

// The subcommands a --help lists under "Subcommands:".
Words subcommands_in(const std::string& help) {
  Words subs;
  size_t at = help.find("Subcommands:");
  if (at == std::string::npos) {
    return subs;
  }
  std::istringstream in(help.substr(at));
  std::string line;
  std::getline(in, line);
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, std::regex(R"(^  ([a-z]+)\b.*)"))) {
      subs.push_back(m[1]);
    }
  }
  return subs;
}

TEST(Completion, InstalledScriptsAreWhatCordonPrints) {
  for (const auto& [shell, file] : std::vector<std::pair<std::string, std::string>>{
           {"bash", "cordon"}, {"zsh", "_cordon"}, {"fish", "cordon.fish"}}) {
    auto r = run_program({cordon(), "completion", shell});
    ASSERT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_GT(r.out.size(), 1000u) << shell;
    EXPECT_EQ(slurp(script(file)), r.out) << file << " is not what `cordon completion " << shell
                                          << "` prints now (rebuild target cordon-completion)";
  }
}

TEST(Completion, AnotherShellIsRefusedByName) {
  auto r = run_program({cordon(), "completion", "tcsh"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("tcsh: no such shell; use bash, zsh or fish"), std::string::npos) << r.err;
}

TEST(Completion, LsIdsPrintsTheIdsAloneOldestFirst) {
  Sessions s;
  auto r = run_program({cordon(), "ls", "--ids"}, s.spec());
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, std::string(kOlder) + "\n" + kNewer + "\n");
  // No sessions directory at all: nothing, and no complaint that a completion would print.
  TempDir empty;
  RunSpec spec = s.spec();
  spec.env->at(1) = "CORDON_STATE_DIR=" + empty.path();
  r = run_program({cordon(), "ls", "--ids"}, spec);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST(Completion, BashCompletesSubcommandsAndSessionIds) {
  Sessions s;
  EXPECT_EQ(complete_bash(s, {cordon(), "di"}), (Words{"diff", "discard"}));
  EXPECT_EQ(complete_bash(s, {cordon(), "diff", ""}), (Words{kOlder, kNewer, "last"}));
  EXPECT_EQ(complete_bash(s, {cordon(), "log", "--json", "20261127-02"}), (Words{kNewer}));
  EXPECT_EQ(complete_bash(s, {cordon(), "commit", "--include-protected", "l"}), (Words{"last"}));
  EXPECT_EQ(complete_bash(s, {cordon(), "policy", "ex"}), (Words{"explain"}));
  EXPECT_EQ(complete_bash(s, {cordon(), "log", "--j"}), (Words{"--json"}));
}

TEST(Completion, BashCompletesValuesPathsAndTheProgramOfRun) {
  Sessions s;
  TempDir dir;
  ::mkdir((dir / "subdir").c_str(), 0755);
  std::ofstream(dir / "subfile") << "x";
  // --workspace takes a directory; --policy a file.
  EXPECT_EQ(complete_bash(s, {cordon(), "run", "--workspace", dir / "sub"}),
            (Words{dir / "subdir"}));
  EXPECT_EQ(complete_bash(s, {cordon(), "run", "-p", dir / "sub"}),
            (Words{dir / "subdir", dir / "subfile"}));
  // After diff's ID, its PATHs are the files of the current directory.
  EXPECT_EQ(complete_bash(s, {cordon(), "diff", kNewer, "subf"}, dir.path()), (Words{"subfile"}));
  // The program of `cordon run`: after "--", and after options whose values are not programs.
  EXPECT_TRUE(contains(complete_bash(s, {cordon(), "run", "--quiet", "--", "ech"}), "echo"));
  Words program = complete_bash(s, {cordon(), "run", "--mode", "cow", "--memory", "1G", "ech"});
  EXPECT_TRUE(contains(program, "echo"));
  EXPECT_FALSE(contains(program, kNewer));
}

TEST(Completion, EverySubcommandAndOptionOfTheHelpCompletes) {
  Sessions s;
  auto help = [&](Words args) {
    args.insert(args.begin(), cordon());
    args.push_back("--help");
    auto r = run_program(args);
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    return r.out;
  };
  Words subs = subcommands_in(help({}));
  ASSERT_GE(subs.size(), 10u);
  std::set<std::string> sorted(subs.begin(), subs.end());
  EXPECT_EQ(complete_bash(s, {cordon(), ""}), Words(sorted.begin(), sorted.end()));
  std::vector<Words> commands;
  for (const auto& sub : subs) {
    commands.push_back({sub});
    for (const auto& nested : subcommands_in(help({sub}))) {
      commands.push_back({sub, nested});
    }
  }
  ASSERT_GT(commands.size(), subs.size()) << "policy's subcommands are missing";
  std::regex flag(R"((^|[ ,])(--[a-z][a-z-]*))");
  for (const auto& cmd : commands) {
    std::string text = help(cmd);
    Words words = {cordon()};
    words.insert(words.end(), cmd.begin(), cmd.end());
    words.push_back("-");
    Words offered = complete_bash(s, words);
    std::set<std::string> flags;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), flag);
         it != std::sregex_iterator(); ++it) {
      flags.insert((*it)[2]);
    }
    EXPECT_TRUE(flags.count("--help")) << text;
    for (const auto& f : flags) {
      EXPECT_TRUE(contains(offered, f))
          << "cordon " << cmd.back() << ": " << f << " is not completed";
    }
  }
}

TEST(Completion, FishCompletesSubcommandsAndSessionIds) {
  CORDON_REQUIRE(have("fish"), "fish (apt-get install fish)");
  Sessions s;
  auto r = run_program({"fish", "--no-config", "-n", script("cordon.fish")});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  auto fish = [&](const std::string& line) {
    auto r = run_program({"fish", "--no-config", "-c",
                          "source " + script("cordon.fish") + "; complete -C '" + line + "'"},
                         s.spec());
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    return lines(r.out);
  };
  EXPECT_EQ(fish("cordon di"), (Words{"diff", "discard"}));
  EXPECT_EQ(fish("cordon diff "), (Words{kOlder, kNewer, "last"}));
  EXPECT_EQ(fish("cordon log --json 20261127-02"), (Words{kNewer}));
  // After the ID, diff's PATHs are files (the sessions directory is the current one here).
  EXPECT_EQ(fish(std::string("cordon diff ") + kNewer + " sess"), (Words{"sessions/"}));
  EXPECT_EQ(fish("cordon policy ex"), (Words{"explain"}));
  EXPECT_TRUE(contains(fish("cordon run --"), "--workspace"));
}

TEST(Completion, ZshParsesItsScript) {
  CORDON_REQUIRE(have("zsh"), "zsh (apt-get install zsh)");
  auto r = run_program({"zsh", "-n", script("_cordon")});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.err, "");
}

}  // namespace
