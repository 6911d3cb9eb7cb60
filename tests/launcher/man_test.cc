// The manual pages made at build time (packaging/man/make-man.sh) against the built cordon's
// own --help: every subcommand has its page and is named in cordon(1); cordon-run(1) names
// every option of `cordon run`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <set>
#include <sstream>

#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::build_path;
using cordon::testing::run_program;

std::string help(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {build_path("launcher/cordon")};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--help");
  auto r = run_program(argv);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return r.out;
}

// The page's text with roff's font changes and escaped hyphens undone.
std::string page_text(const std::string& name) {
  std::string path = build_path("packaging/man/" + name + ".1.gz");
  auto r = run_program({"gzip", "-dc", path});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  std::string text = std::regex_replace(r.out, std::regex(R"(\\f[BIRP])"), "");
  return std::regex_replace(text, std::regex(R"(\\-)"), "-");
}

std::vector<std::string> subcommands() {
  std::string out = help({});
  std::vector<std::string> subs;
  std::istringstream in(out.substr(out.find("Subcommands:")));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(^  ([a-z]+)\b.*)"))) {
      subs.push_back(m[1]);
    }
  }
  return subs;
}

bool pages_built() { return ::access(build_path("packaging/man/stamp").c_str(), F_OK) == 0; }

TEST(ManPages, CordonNamesEverySubcommandAndEachHasItsPage) {
  CORDON_REQUIRE(pages_built(), "the manual pages (target cordon-man, needs help2man)");
  std::vector<std::string> subs = subcommands();
  ASSERT_GE(subs.size(), 8u);
  std::string top = page_text("cordon");
  for (const auto& s : subs) {
    EXPECT_NE(top.find("\n" + s), std::string::npos) << "cordon(1) does not name " << s;
    // Its own page: named so, and describing it with the first line of its --help.
    std::string page = page_text("cordon-" + s);
    EXPECT_NE(page.find("\ncordon-" + s + " - "), std::string::npos) << "cordon-" << s << "(1)";
    std::string summary = help({s}).substr(0, help({s}).find('\n'));
    EXPECT_NE(page.find(summary), std::string::npos) << "cordon-" << s << "(1) lacks: " << summary;
  }
}

TEST(ManPages, RunNamesEveryOptionOfItsHelp) {
  CORDON_REQUIRE(pages_built(), "the manual pages (target cordon-man, needs help2man)");
  std::string out = help({"run"});
  std::set<std::string> flags;
  std::regex flag(R"(--[a-z][a-z-]*)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), flag); it != std::sregex_iterator();
       ++it) {
    flags.insert(it->str());
  }
  ASSERT_GE(flags.size(), 10u) << out;
  std::string page = page_text("cordon-run");
  for (const auto& f : flags) {
    EXPECT_NE(page.find(f), std::string::npos) << "cordon-run(1) does not name " << f;
  }
}

}  // namespace
