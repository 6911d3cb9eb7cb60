// cordon-policy(5) (packaging/man/md2man.py over docs/policy.md): every key the policy loader
// accepts, at every level, is named in the page. The keys come from the loader itself: a probe
// key it does not know makes it list the keys it accepts there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "policy/loader.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::build_path;
using cordon::testing::run_program;
using json = nlohmann::json;
using Path = std::vector<std::string>;

constexpr const char* kProbe = "zzzzzzzzzzzzzzzzzzzzzzzzzzzz";

// The keys the loader accepts in the object at `path` (as an array's element when `in_array`),
// from its "unknown key" error; nullopt when `path` holds no object of keys.
std::optional<std::vector<std::string>> accepted_at(const Path& path, bool in_array) {
  json leaf = {{kProbe, 1}};
  if (in_array) {
    leaf = json::array({leaf});
  }
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    leaf = json{{*it, leaf}};
  }
  if (path.empty() || path[0] != "version") {
    leaf["version"] = 1;
  }
  std::string message;
  try {
    cordon::policy::parse_policy(leaf.dump());
    return std::nullopt;  // a map of names (network.resolve, process.env.set): no schema keys
  } catch (const cordon::policy::PolicyError& e) {
    message = e.what();
  }
  std::smatch m;
  if (message.find(std::string("\"") + kProbe) == std::string::npos ||
      !std::regex_search(message, m, std::regex(R"(\(accepted here:([^)]*)\))"))) {
    return std::nullopt;
  }
  std::vector<std::string> keys;
  std::istringstream in(m[1].str());
  for (std::string k; in >> k;) {
    keys.push_back(k);
  }
  return keys;
}

// Every key path the loader accepts, found by descending into each key that holds an object.
void discover(const Path& path, std::set<std::string>& out) {
  auto keys = accepted_at(path, false);
  if (!keys) {
    keys = accepted_at(path, true);
  }
  if (!keys) {
    return;
  }
  for (const auto& k : *keys) {
    Path p = path;
    p.push_back(k);
    std::string dotted;
    for (const auto& part : p) {
      dotted += (dotted.empty() ? "" : ".") + part;
    }
    out.insert(dotted);
    discover(p, out);
  }
}

std::string page_text() {
  auto r = run_program({"gzip", "-dc", build_path("packaging/man/cordon-policy.5.gz")});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  std::string text = std::regex_replace(r.out, std::regex(R"(\\f[BIRP])"), "");
  return std::regex_replace(text, std::regex(R"(\\-)"), "-");
}

TEST(PolicyManPage, NamesEveryKeyTheLoaderAccepts) {
  CORDON_REQUIRE(::access(build_path("packaging/man/cordon-policy.5.gz").c_str(), F_OK) == 0,
                 "cordon-policy(5) (target cordon-policy-man, needs python3)");
  std::set<std::string> keys;
  discover({}, keys);
  // The probe reaches the nested sections too, not only the top.
  ASSERT_TRUE(keys.count("network.dns.types")) << keys.size();
  ASSERT_TRUE(keys.count("network.rules.action"));
  ASSERT_TRUE(keys.count("process.env.pass"));
  ASSERT_GE(keys.size(), 50u);
  std::string page = page_text();
  EXPECT_NE(page.find(".TH CORDON-POLICY 5"), std::string::npos);
  for (const auto& dotted : keys) {
    std::string key = dotted.substr(dotted.rfind('.') + 1);
    EXPECT_TRUE(std::regex_search(page, std::regex("(^|[^a-z_])" + key + "([^a-z_]|$)")))
        << "cordon-policy(5) does not name " << dotted;
  }
}

// The page is docs/policy.md: a sentence of the docs is in it, in the page's own section.
TEST(PolicyManPage, IsRenderedFromTheDocs) {
  CORDON_REQUIRE(::access(build_path("packaging/man/cordon-policy.5.gz").c_str(), F_OK) == 0,
                 "cordon-policy(5) (target cordon-policy-man, needs python3)");
  std::string page = page_text();
  EXPECT_NE(page.find(".SH DESCRIPTION\n.PP\nA policy is JSON with // and /* */ comments."),
            std::string::npos);
  EXPECT_NE(page.find(".SH AGENTS: HOST PATHS"), std::string::npos);
  auto r = run_program({"sh", "-c", "command -v man"});
  if (r.exit_code() == 0) {
    // man renders it without a warning from groff.
    auto m = run_program({"sh", "-c",
                          "MANWIDTH=80 man --warnings -l " +
                              build_path("packaging/man/cordon-policy.5.gz") + " 2>&1 >/dev/null"});
    EXPECT_EQ(m.out, "");
  }
}

}  // namespace
