// The AppArmor profile (packaging/apparmor/cordon) parsed by apparmor_parser without loading it
// into a kernel: in full where the parser knows ABI 4.0 (its `userns` rule); with Debian 12's
// AppArmor 3 parser, which predates the rule, everything but that rule, and the full profile is
// refused only for the ABI it names. The profile grants `userns` to /usr/bin/cordon, nothing else.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::run_program;
using cordon::testing::source_path;
using cordon::testing::TempDir;

const char* kParser = "/usr/sbin/apparmor_parser";

std::string profile_text() {
  std::ifstream f(source_path("packaging/apparmor/cordon"));
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool parser_knows_abi4() { return ::access("/etc/apparmor.d/abi/4.0", F_OK) == 0; }

cordon::testing::RunResult parse(const std::string& file) {
  // -Q: everything but the load into the kernel; -K: no cache.
  return run_program({kParser, "-Q", "-K", file});
}

// The profile as this parser can read it: itself where the parser knows ABI 4.0, else a copy in
// `dir` with the ABI this parser has and without the rule it cannot know.
std::string profile_for_this_parser(const TempDir& dir) {
  if (parser_knows_abi4()) {
    return source_path("packaging/apparmor/cordon");
  }
  std::string text =
      std::regex_replace(profile_text(), std::regex("abi <abi/4\\.0>,"), "abi <abi/3.0>,");
  text = std::regex_replace(text, std::regex("\n  userns,\n"), "\n");
  EXPECT_EQ(text.find("userns,"), std::string::npos);
  std::ofstream(dir / "cordon") << text;
  return dir / "cordon";
}

std::string errors_only(const std::string& err) {
  // The parser says once that it found no kernel interface; that is not about the profile.
  return std::regex_replace(err, std::regex("Cache read/write disabled: [^\n]*\n"), "");
}

TEST(AppArmorProfile, ParsesWithApparmorParser) {
  CORDON_REQUIRE(::access(kParser, X_OK) == 0, "apparmor_parser (apt-get install apparmor)");
  std::string file = source_path("packaging/apparmor/cordon");
  auto full = parse(file);
  if (parser_knows_abi4()) {
    EXPECT_EQ(full.exit_code(), 0) << full.err;
    EXPECT_EQ(errors_only(full.err), "");
    return;
  }
  // AppArmor 3: the full profile fails on the ABI it names and nothing before it.
  EXPECT_NE(full.exit_code(), 0);
  EXPECT_EQ(errors_only(full.err).find("error"), errors_only(full.err).rfind("error")) << full.err;
  EXPECT_NE(full.err.find("Could not open 'abi/4.0'"), std::string::npos) << full.err;
  // The rest parses cleanly.
  TempDir dir;
  auto rest = parse(profile_for_this_parser(dir));
  EXPECT_EQ(rest.exit_code(), 0) << rest.err;
  EXPECT_EQ(errors_only(rest.err), "");
}

TEST(AppArmorProfile, GrantsUsernsToUsrBinCordonAndNothingElse) {
  std::string text = profile_text();
  // Comments and blank lines aside, the profile is exactly the form Ubuntu uses for bwrap.
  std::string rules;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.find_first_not_of(' ') == std::string::npos ||
        line[line.find_first_not_of(' ')] == '#') {
      continue;
    }
    rules += line + "\n";
  }
  EXPECT_EQ(rules,
            "abi <abi/4.0>,\n"
            "include <tunables/global>\n"
            "profile cordon /usr/bin/cordon flags=(unconfined) {\n"
            "  userns,\n"
            "  include if exists <local/cordon>\n"
            "}\n");
}

TEST(AppArmorProfile, ParserListsTheProfileByName) {
  CORDON_REQUIRE(::access(kParser, X_OK) == 0, "apparmor_parser (apt-get install apparmor)");
  TempDir dir;
  auto r = run_program({kParser, "-N", profile_for_this_parser(dir)});
  EXPECT_EQ(r.out, "cordon\n") << r.err;
}

}  // namespace
