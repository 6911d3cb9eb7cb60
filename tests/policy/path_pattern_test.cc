// Path patterns: ~ expansion, normalization, globs within and across segments, ancestors.
#include "policy/path_pattern.h"

#include <gtest/gtest.h>

#include <functional>

namespace cordon::policy {
namespace {

constexpr std::string_view kHome = "/home/alice";

PathPattern must_parse(std::string_view text) {
  std::string why;
  auto p = PathPattern::parse(text, kHome, &why);
  EXPECT_TRUE(p.has_value()) << text << ": " << why;
  return p.value_or(PathPattern{});
}

std::string refusal(std::string_view text, std::string_view home = kHome) {
  std::string why;
  auto p = PathPattern::parse(text, home, &why);
  EXPECT_FALSE(p.has_value()) << text;
  EXPECT_FALSE(why.empty()) << text;
  return why;
}

using Segments = std::vector<std::string>;

std::string join(const Segments& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    s += (i ? "/" : "") + v[i];
  }
  return s;
}

// Every pattern of 1-4 segments from {a, b, *, **} against every path of 0-5 segments from
// {a, b}: the exhaustive small cases a brute-force definition can check. Returns the count.
size_t for_each_small_case(const std::function<void(const Segments&, const Segments&)>& check) {
  const Segments alphabet = {"a", "b", "*", "**"};
  size_t checked = 0;
  for (int plen = 1; plen <= 4; ++plen) {
    for (int pcode = 0; pcode < (1 << (2 * plen)); ++pcode) {
      Segments pat;
      for (int i = 0; i < plen; ++i) {
        pat.push_back(alphabet[static_cast<size_t>((pcode >> (2 * i)) & 3)]);
      }
      for (int slen = 0; slen <= 5; ++slen) {
        for (int scode = 0; scode < (1 << slen); ++scode) {
          Segments path;
          for (int i = 0; i < slen; ++i) {
            path.push_back((scode >> i) & 1 ? "b" : "a");
          }
          check(pat, path);
          ++checked;
        }
      }
    }
  }
  return checked;
}

TEST(PathPattern, ExpandsHomeAndNormalizes) {
  PathPattern p = must_parse("~/.ssh");
  EXPECT_TRUE(p.absolute);
  EXPECT_FALSE(p.has_glob);
  EXPECT_EQ(p.text, "~/.ssh");
  EXPECT_EQ(p.expanded, "/home/alice/.ssh");
  EXPECT_EQ(must_parse("~").expanded, "/home/alice");
  EXPECT_EQ(must_parse("//etc/./ssl//certs/").expanded, "/etc/ssl/certs");
  EXPECT_EQ(must_parse("/").expanded, "/");
  PathPattern rel = must_parse("./src//a.c");
  EXPECT_FALSE(rel.absolute);
  EXPECT_EQ(rel.expanded, "src/a.c");
  EXPECT_TRUE(must_parse("**/*.pem").has_glob);
  EXPECT_TRUE(must_parse("a?c").has_glob);
}

TEST(PathPattern, RefusesAmbiguousForms) {
  EXPECT_NE(refusal("").find("empty"), std::string::npos);
  EXPECT_NE(refusal(std::string_view("/etc/\0passwd", 12)).find("NUL"), std::string::npos);
  EXPECT_NE(refusal("~bob/.ssh").find("~user"), std::string::npos);
  EXPECT_NE(refusal("/a/../etc").find(".."), std::string::npos);
  refusal("..");
  refusal("a/..");
  EXPECT_NE(refusal("~/.ssh", "").find("home"), std::string::npos);
  refusal("~/.ssh", "relative/home");
  refusal(std::string(5000, 'a'));
}

TEST(PathPattern, MatchesItselfAndEverythingBeneath) {
  PathPattern p = must_parse("~/.ssh");
  EXPECT_TRUE(p.matches("/home/alice/.ssh"));
  EXPECT_TRUE(p.matches("/home/alice/.ssh/id_rsa"));
  EXPECT_TRUE(p.matches("/home/alice//.ssh/./keys/x"));
  EXPECT_FALSE(p.matches("/home/alice/.sshx"));
  EXPECT_FALSE(p.matches("/home/alice"));
  EXPECT_FALSE(p.matches("home/alice/.ssh"));  // relative paths never match absolute patterns
  // ".." in a queried path is resolved before matching, so it cannot step around a deny.
  EXPECT_TRUE(p.matches("/home/alice/x/../.ssh/id_rsa"));
  EXPECT_TRUE(p.matches("/../home/alice/.ssh"));
  // "~/" queries are matched against the pattern as written.
  EXPECT_TRUE(p.matches("~/.ssh/id_rsa"));
  EXPECT_FALSE(p.matches("~/.sshx"));
  EXPECT_FALSE(must_parse("/home/alice/.ssh").matches("~/.ssh"));
  EXPECT_TRUE(p.matches("~/x/../.ssh/config"));
  EXPECT_FALSE(p.matches("~/../alice/.ssh"));  // above "~" is unknown here: matches nothing
  EXPECT_FALSE(must_parse("**").matches("~/.."));
}

TEST(PathPattern, StarAndQuestionStayWithinOneSegment) {
  PathPattern p = must_parse("src/*.c");
  EXPECT_TRUE(p.matches("src/a.c"));
  EXPECT_TRUE(p.matches("src/.c"));
  EXPECT_FALSE(p.matches("src/sub/a.c"));
  EXPECT_FALSE(p.matches("src/a.h"));
  EXPECT_FALSE(p.matches("a.c"));
  PathPattern q = must_parse("a?c");
  EXPECT_TRUE(q.matches("abc"));
  EXPECT_FALSE(q.matches("a/c"));
  EXPECT_FALSE(q.matches("ac"));
  PathPattern mid = must_parse("/data/*/secret");
  EXPECT_TRUE(mid.matches("/data/x/secret"));
  EXPECT_TRUE(mid.matches("/data/x/secret/inner"));
  EXPECT_FALSE(mid.matches("/data/x/y/secret"));
  EXPECT_FALSE(mid.matches("/data/secret"));
}

TEST(PathPattern, DoubleStarSpansSegmentsIncludingNone) {
  PathPattern p = must_parse("**/*.pem");
  EXPECT_TRUE(p.matches("key.pem"));
  EXPECT_TRUE(p.matches("a/b/c/key.pem"));
  EXPECT_FALSE(p.matches("a/b/key.pem.txt"));
  EXPECT_FALSE(p.matches("/etc/key.pem"));  // relative: anchored at the workspace
  PathPattern env = must_parse("**/.env");
  EXPECT_TRUE(env.matches(".env"));
  EXPECT_TRUE(env.matches("app/.env"));
  EXPECT_TRUE(env.matches("app/.env/inner"));
  EXPECT_FALSE(env.matches("app/.envrc"));
  PathPattern hooks = must_parse(".git/hooks/**");
  EXPECT_TRUE(hooks.matches(".git/hooks"));
  EXPECT_TRUE(hooks.matches(".git/hooks/pre-commit"));
  EXPECT_FALSE(hooks.matches(".git/config"));
  EXPECT_FALSE(hooks.matches("sub/.git/hooks/x"));
  PathPattern mid = must_parse("a/**/z");
  EXPECT_TRUE(mid.matches("a/z"));
  EXPECT_TRUE(mid.matches("a/b/c/z"));
  EXPECT_TRUE(mid.matches("a/b/c/z/deeper"));
  EXPECT_FALSE(mid.matches("b/a/z"));
  PathPattern abs = must_parse("/srv/**/logs");
  EXPECT_TRUE(abs.matches("/srv/logs"));
  EXPECT_TRUE(abs.matches("/srv/x/y/logs/today"));
  EXPECT_FALSE(abs.matches("/srv/x/y/log"));
}

TEST(PathPattern, AgreesWithABruteForceMatcherOnSmallCases) {
  // Exhaustive check of the single-backtrack matcher against a plain recursive definition.
  std::function<bool(const std::vector<std::string>&, size_t, const std::vector<std::string>&,
                     size_t)>
      ref = [&](const std::vector<std::string>& pat, size_t pi,
                const std::vector<std::string>& path, size_t si) -> bool {
    if (pi == pat.size()) {
      return true;  // ancestor or the path itself
    }
    if (pat[pi] == "**") {
      for (size_t k = si; k <= path.size(); ++k) {
        if (ref(pat, pi + 1, path, k)) {
          return true;
        }
      }
      return false;
    }
    return si < path.size() && (pat[pi] == "*" || pat[pi] == path[si]) &&
           ref(pat, pi + 1, path, si + 1);
  };
  EXPECT_GT(for_each_small_case([&](const Segments& pat, const Segments& path) {
              ASSERT_EQ(must_parse(join(pat)).matches(join(path)), ref(pat, 0, path, 0))
                  << join(pat) << " vs " << join(path);
            }),
            10000u);
}

TEST(PathPattern, NamesBeneathOnlyWhenTheLastSegmentIsNamed) {
  PathPattern git = must_parse("**/.git/config");
  EXPECT_TRUE(git.names_beneath(".git"));
  EXPECT_TRUE(git.names_beneath("sub/deep/.git"));
  EXPECT_FALSE(git.names_beneath("src/main.c")) << "a \"**\" alone names nothing";
  EXPECT_FALSE(git.names_beneath(".git/config")) << "nothing is left beneath it";
  EXPECT_FALSE(git.names_beneath(".gitx"));
  EXPECT_FALSE(git.names_beneath(""));
  PathPattern wf = must_parse("**/.github/workflows/**");
  EXPECT_TRUE(wf.names_beneath(".github"));
  EXPECT_TRUE(wf.names_beneath("a/.github/workflows"));
  EXPECT_FALSE(wf.names_beneath("a/.github/workflows/x.yml")) << "swallowed by the last \"**\"";
  EXPECT_TRUE(wf.matches("a/.github/workflows/x.yml"));
  EXPECT_FALSE(wf.names_beneath("a/github"));
  PathPattern anchored = must_parse(".git/hooks/**");
  EXPECT_TRUE(anchored.names_beneath(".git"));
  EXPECT_FALSE(anchored.names_beneath("sub/.git"));
  PathPattern home = must_parse("~/.claude/**");
  EXPECT_TRUE(home.names_beneath("/home/alice/.claude"));
  EXPECT_FALSE(home.names_beneath(".claude")) << "relative paths never meet absolute patterns";
}

TEST(PathPattern, NamesBeneathAgreesWithABruteForceDefinition) {
  // Some alignment consumes every path segment, the last one by a non-"**" segment of the
  // pattern, and pattern segments are left over.
  std::function<bool(const std::vector<std::string>&, size_t, const std::vector<std::string>&,
                     size_t, bool)>
      ref = [&](const std::vector<std::string>& pat, size_t pi,
                const std::vector<std::string>& path, size_t si, bool named) -> bool {
    if (si == path.size()) {
      return named && pi < pat.size();
    }
    if (pi == pat.size()) {
      return false;
    }
    if (pat[pi] == "**") {
      return ref(pat, pi + 1, path, si, named) || ref(pat, pi, path, si + 1, false);
    }
    return (pat[pi] == "*" || pat[pi] == path[si]) && ref(pat, pi + 1, path, si + 1, true);
  };
  EXPECT_GT(
      for_each_small_case([&](const Segments& pat, const Segments& path) {
        ASSERT_EQ(must_parse(join(pat)).names_beneath(join(path)), ref(pat, 0, path, 0, false))
            << join(pat) << " vs " << join(path);
      }),
      10000u);
}

TEST(PathPattern, RelativeQueriesCannotLeaveTheWorkspace) {
  PathPattern all = must_parse("**");
  EXPECT_TRUE(all.matches("x"));
  EXPECT_TRUE(all.matches(""));
  EXPECT_FALSE(all.matches("../outside"));
  EXPECT_TRUE(must_parse(".env").matches("a/../.env"));
}

TEST(PathPattern, HostilePatternsStayFast) {
  // Many stars against a long non-matching segment: linear-ish, not exponential.
  std::string pat = "/" + std::string(200, '*') + "b";
  PathPattern p = must_parse(pat);
  EXPECT_FALSE(p.matches("/" + std::string(3000, 'a')));
  std::string deep;
  for (int i = 0; i < 200; ++i) {
    deep += "**/";
  }
  PathPattern d = must_parse(deep + "x");
  std::string path;
  for (int i = 0; i < 500; ++i) {
    path += "a/";
  }
  EXPECT_FALSE(d.matches(path + "y"));
  EXPECT_TRUE(d.matches(path + "x"));
}

TEST(PathPattern, MayMatchBeneathADirectoryWhetherOrNotThePathExists) {
  struct Case {
    const char* pattern;
    const char* dir;
    bool beneath;
  } cases[] = {
      {"~/.claude/settings.json", "/home/alice/.claude", true},
      {"~/.claude/hooks/**", "/home/alice/.claude", true},
      {"~/.claude/hooks/**", "/home/alice/.claude/hooks", true},  // the directory itself
      {"~/.claude", "/home/alice/.claude/projects", true},        // an ancestor: all of it
      {"~/.claude/settings.json", "/home/alice/.codex", false},
      {"~/.claude/settings.json", "/home/alice/.claude/hooks", false},
      {"/home/*/.claude/x", "/home/alice/.claude", true},
      {"/home/*/.claude/x", "/home/alice/.codex", false},
      {"/home/**/x.json", "/home/alice/.claude", true},
      {"/home/**/hooks/*", "/opt", false},
      {"/etc/x", "/", true},
      {"**/.env", "a/b", true},  // relative with relative
      {".git/hooks/**", "src", false},
      {".git/hooks/**", ".git", true},
      {"~/.ssh", "/home/alice/.claude", false},
      {"/home/alice/.claude/*.json", "/home/alice/.claude", true},
      {"/home/alice/.claude/*.json", "/home/alice/.claude/sub", false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(must_parse(c.pattern).may_match_beneath(c.dir), c.beneath)
        << c.pattern << " beneath " << c.dir;
  }
  // An absolute pattern says nothing about a relative path, nor the other way round.
  EXPECT_FALSE(must_parse("**/.env").may_match_beneath("/home/alice"));
  EXPECT_FALSE(must_parse("/a/b").may_match_beneath("a"));
}

}  // namespace
}  // namespace cordon::policy
