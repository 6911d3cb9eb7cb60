// build_environment: keep list, case-insensitive deny globs over keep, set over everything, extra
// last, malformed entries dropped.
#include "launcher/sandbox/env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace cordon::launcher {
namespace {

// A synthetic host environment as a char** the way environ looks.
class HostEnv {
 public:
  explicit HostEnv(std::vector<std::string> entries) : entries_(std::move(entries)) {
    for (auto& e : entries_) {
      ptrs_.push_back(e.data());
    }
    ptrs_.push_back(nullptr);
  }
  char** get() { return ptrs_.data(); }

 private:
  std::vector<std::string> entries_;
  std::vector<char*> ptrs_;
};

bool has(const std::vector<std::string>& env, const std::string& kv) {
  return std::find(env.begin(), env.end(), kv) != env.end();
}

bool has_name(const std::vector<std::string>& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(),
                     [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
}

HostEnv secrets_host() {
  return HostEnv({"PATH=/usr/bin:/bin", "HOME=/home/u", "FOO_TOKEN=t0k3n",
                  "AWS_SECRET_ACCESS_KEY=aws", "GITHUB_TOKEN=ghp_x", "my_api_key=k", "TERM=xterm",
                  "EDITOR=vim", "LANG=C.UTF-8"});
}

TEST(Env, DefaultPolicyKeepsPathAndHomeAndDropsTheRest) {
  auto host = secrets_host();
  policy::EnvPolicy p;
  auto env = build_environment(p, host.get());
  EXPECT_TRUE(has(env, "PATH=/usr/bin:/bin"));
  EXPECT_TRUE(has(env, "HOME=/home/u"));
  EXPECT_TRUE(has(env, "TERM=xterm"));
  EXPECT_TRUE(has(env, "LANG=C.UTF-8"));
  EXPECT_FALSE(has_name(env, "EDITOR"));  // not in keep
  EXPECT_FALSE(has_name(env, "FOO_TOKEN"));
  EXPECT_EQ(env.size(), 4u);
}

TEST(Env, SecretsAreStrippedEvenWhenKept) {
  auto host = secrets_host();
  policy::EnvPolicy p;
  p.keep = {"PATH", "HOME", "FOO_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "my_api_key"};
  auto env = build_environment(p, host.get());
  EXPECT_FALSE(has_name(env, "FOO_TOKEN"));              // *TOKEN*
  EXPECT_FALSE(has_name(env, "AWS_SECRET_ACCESS_KEY"));  // AWS_* and *SECRET*
  EXPECT_FALSE(has_name(env, "GITHUB_TOKEN"));           // GITHUB_*
  EXPECT_FALSE(has_name(env, "my_api_key"));             // *API_KEY*, case-insensitive
  EXPECT_TRUE(has(env, "PATH=/usr/bin:/bin"));
  EXPECT_TRUE(has(env, "HOME=/home/u"));
  EXPECT_EQ(env.size(), 2u);
}

TEST(Env, SetOverridesKeepAndDenyAndExtraComesLast) {
  auto host = secrets_host();
  policy::EnvPolicy p;
  p.set = {{"HOME", "/sandbox"}, {"SERVICE_TOKEN", "given-on-purpose"}, {"NEW", "1"}};
  auto env = build_environment(p, host.get(),
                               {{"HTTP_PROXY", "http://127.0.0.1:3128"}, {"NEW", "from-extra"}});
  EXPECT_TRUE(has(env, "HOME=/sandbox"));
  EXPECT_FALSE(has(env, "HOME=/home/u"));
  EXPECT_TRUE(has(env, "SERVICE_TOKEN=given-on-purpose"));  // set wins over deny
  EXPECT_TRUE(has(env, "HTTP_PROXY=http://127.0.0.1:3128"));
  EXPECT_TRUE(has(env, "NEW=from-extra"));
  EXPECT_FALSE(has(env, "NEW=1"));
  // Each name appears once.
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& kv) { return kv.rfind("HOME=", 0) == 0; }),
            1);
}

TEST(Env, DenyGlobsAreCaseInsensitiveAndStarOnly) {
  HostEnv host({"XTOKEN=1", "token=2", "Tok=3", "A?B=4", "AB=5", "SECRET=6", "MY_SECRET_X=7"});
  policy::EnvPolicy p;
  p.keep = {"XTOKEN", "token", "Tok", "AB", "SECRET", "MY_SECRET_X"};
  p.deny = {"*token", "a?b", "secret", "MY_*_X"};
  auto env = build_environment(p, host.get());
  EXPECT_FALSE(has_name(env, "XTOKEN"));
  EXPECT_FALSE(has_name(env, "token"));
  EXPECT_TRUE(has(env, "Tok=3"));
  EXPECT_TRUE(has(env, "AB=5"));  // '?' is a literal, not a wildcard
  EXPECT_FALSE(has_name(env, "SECRET"));
  EXPECT_FALSE(has_name(env, "MY_SECRET_X"));
}

TEST(Env, MalformedHostEntriesAndBadNamesAreDropped) {
  HostEnv host({"NOEQUALS", "PATH=/bin", "BASH_FUNC_f%%=() { echo pwned; }", "=empty", "A-B=1",
                "PATH=/second"});
  policy::EnvPolicy p;
  p.keep = {"PATH", "NOEQUALS", "BASH_FUNC_f%%", "A-B", ""};
  p.set = {{"BAD NAME", "x"}, {"1ABC", "y"}};
  auto env = build_environment(p, host.get());
  ASSERT_EQ(env.size(), 1u);
  EXPECT_EQ(env[0], "PATH=/bin");  // the first occurrence, as getenv sees it
}

TEST(Env, ValuesAreCopiedVerbatim) {
  HostEnv host({"TERM=a=b=c", "LANG="});
  policy::EnvPolicy p;
  auto env = build_environment(p, host.get());
  EXPECT_TRUE(has(env, "TERM=a=b=c"));
  EXPECT_TRUE(has(env, "LANG="));
}

TEST(Env, NullHostEnvironmentGivesOnlySetAndExtra) {
  policy::EnvPolicy p;
  p.set = {{"A", "1"}};
  auto env = build_environment(p, nullptr, {{"B", "2"}});
  EXPECT_EQ(env, (std::vector<std::string>{"A=1", "B=2"}));
}

TEST(Env, PassBeatsDenyAndEveryConflictIsNoted) {
  auto host = secrets_host();
  policy::EnvPolicy p;
  p.keep.push_back("FOO_TOKEN");    // kept, but a deny pattern matches: noted
  p.keep.push_back("UNSET_TOKEN");  // kept and denied, but the host lacks it: nothing
  p.pass = {"GITHUB_TOKEN", "EDITOR", "MISSING_KEY"};
  EnvNotes notes;
  auto env = build_environment(p, host.get(), {}, &notes);
  EXPECT_TRUE(has(env, "GITHUB_TOKEN=ghp_x"));  // passed despite "*TOKEN*"
  EXPECT_TRUE(has(env, "EDITOR=vim"));          // passed, no deny involved
  EXPECT_FALSE(has_name(env, "FOO_TOKEN"));
  EXPECT_FALSE(has_name(env, "MISSING_KEY"));
  ASSERT_EQ(notes.kept_but_denied.size(), 1u);
  EXPECT_EQ(notes.kept_but_denied[0].name, "FOO_TOKEN");
  EXPECT_EQ(notes.kept_but_denied[0].rule, "process.env.deny[0]");
  EXPECT_EQ(notes.kept_but_denied[0].pattern, "*TOKEN*");
  ASSERT_EQ(notes.passed.size(), 2u);
  EXPECT_EQ(notes.passed[0].name, "GITHUB_TOKEN");
  EXPECT_EQ(notes.passed[0].rule, "process.env.deny[0]");
  EXPECT_EQ(notes.passed[1].name, "EDITOR");
  EXPECT_EQ(notes.passed[1].rule, "");
  EXPECT_EQ(notes.pass_missing, (std::vector<std::string>{"MISSING_KEY"}));
  auto lines = env_note_lines(notes);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "environment: FOO_TOKEN is not passed although kept: process.env.deny[0] "
            "(\"*TOKEN*\") wins over keep; to hand it to the program, --env-pass FOO_TOKEN "
            "(process.env.pass)");
  EXPECT_EQ(lines[1],
            "environment: passing GITHUB_TOKEN from the host (process.env.pass) although "
            "process.env.deny[0] (\"*TOKEN*\") matches it; its value is not recorded");
  for (const auto& l : lines) {
    EXPECT_EQ(l.find("ghp_x"), std::string::npos) << l;  // names only, never values
    EXPECT_EQ(l.find("t0k3n"), std::string::npos) << l;
  }
}

}  // namespace
}  // namespace cordon::launcher
