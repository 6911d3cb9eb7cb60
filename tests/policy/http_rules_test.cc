// network.rules: request-path normalisation against encoding tricks, whole-path globs, first
// match and the deny by default of a ruled host, and the loader's validation of rules.
#include "policy/http_rules.h"

#include <gtest/gtest.h>

#include "policy/loader.h"
#include "policy/serialize.h"

namespace cordon::policy {
namespace {

std::string norm(std::string_view target) {
  std::string why;
  auto n = normalize_http_path(target, &why);
  EXPECT_TRUE(n.has_value()) << target << ": " << why;
  return n.value_or("<refused>");
}

std::string refused(std::string_view target) {
  std::string why;
  auto n = normalize_http_path(target, &why);
  EXPECT_FALSE(n.has_value()) << target << " gave " << n.value_or("");
  EXPECT_FALSE(why.empty()) << target;
  return why;
}

TEST(HttpPath, NormalisesOnce) {
  EXPECT_EQ(norm("/"), "/");
  EXPECT_EQ(norm("/a/b?x=/c/../d#f"), "/a/b");
  EXPECT_EQ(norm("//repos///x//"), "/repos/x");
  EXPECT_EQ(norm("/a/./b/."), "/a/b");
  EXPECT_EQ(norm("/a/b/../../../../c"), "/c");  // never above the root
  EXPECT_EQ(norm("/public/%2e%2e/admin"), "/admin");
  EXPECT_EQ(norm("/public/%2E./admin"), "/admin");
  EXPECT_EQ(norm("/%61dmin"), "/admin");
  EXPECT_EQ(norm("/admin;jsessionid=1/x"), "/admin/x");
  EXPECT_EQ(norm("/public/..;x/admin"), "/admin");  // Tomcat's "..;" is ".."
  EXPECT_EQ(norm("/a%20b/C"), "/a b/C");            // case kept: paths are case-sensitive
  EXPECT_EQ(norm("/caf%C3%A9"), "/caf\xC3\xA9");
}

TEST(HttpPath, RefusesWhatServersReadDifferently) {
  EXPECT_NE(refused("/a%2fb").find("%2f"), std::string::npos);
  refused("/a%2Fb");
  refused("/a%5cb");
  refused("/admin%3bx/y");
  refused("/a\\..\\admin");
  refused("/a%252e%252e/admin");  // double encoding
  refused("/a%00b");
  refused("/a%0d%0aX: y");
  refused(std::string_view("/a\0b", 4));
  refused("/a%");
  refused("/a%4");
  refused("/a%zz");
  refused("a/b");
  refused("");
  refused("*");
  refused("http://h/a");  // the proxy hands origin-form paths
}

TEST(HttpPath, GlobsMatchTheWholePath) {
  EXPECT_TRUE(http_path_matches("/repos/*/*/issues/**", "/repos/o/r/issues"));
  EXPECT_TRUE(http_path_matches("/repos/*/*/issues/**", "/repos/o/r/issues/1/comments"));
  EXPECT_FALSE(http_path_matches("/repos/*/*/issues/**", "/repos/o/issues/1"));
  EXPECT_FALSE(http_path_matches("/repos/*/*/issues/**", "/repos/o/r/pulls"));
  EXPECT_TRUE(http_path_matches("/user", "/user"));
  EXPECT_FALSE(http_path_matches("/user", "/user/keys"));  // no implicit ancestor match
  EXPECT_FALSE(http_path_matches("/user", "/"));
  EXPECT_TRUE(http_path_matches("/**", "/"));
  EXPECT_TRUE(http_path_matches("/**", "/any/thing"));
  EXPECT_TRUE(http_path_matches("/v1/*.json", "/v1/a.json"));
  EXPECT_FALSE(http_path_matches("/v1/*.json", "/v1/a/b.json"));
  EXPECT_TRUE(http_path_matches("/**/raw", "/a/b/raw"));
  EXPECT_FALSE(http_path_matches("/**/raw", "/a/b/raw/x"));
  EXPECT_FALSE(http_path_matches("/Admin", "/admin"));
}

std::vector<HttpRule> rules_of(std::string_view json) {
  LoadOptions o;
  o.home = "/home/alice";
  return parse_policy(json, o).network.rules;
}

TEST(HttpRules, FirstMatchWinsAndARuledHostIsDeniedByDefault) {
  auto rules = rules_of(R"({"network": {"allow": ["*"], "rules": [
      {"host": "api.github.com", "methods": ["GET"], "action": "allow"},
      {"host": "api.github.com", "methods": ["post"], "paths": ["/repos/*/*/issues/*/comments"],
       "action": "allow"},
      {"host": "*.github.com", "methods": ["POST"], "action": "deny"},
      {"host": "uploads.github.com", "action": "allow"}]}})");
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[1].methods, std::vector<std::string>{"POST"});

  auto d = decide_http(rules, "api.github.com", 443, "GET", "/repos/x/y/issues");
  EXPECT_TRUE(d.ruled);
  EXPECT_TRUE(d.allow);
  EXPECT_EQ(d.rule, "network.rules[0]");
  d = decide_http(rules, "api.github.com", 443, "POST", "/repos/x/y/issues/7/comments");
  EXPECT_TRUE(d.allow);
  EXPECT_EQ(d.rule, "network.rules[1]");
  d = decide_http(rules, "api.github.com", 443, "get", "/x");  // methods compare as upper case
  EXPECT_TRUE(d.allow);
  d = decide_http(rules, "api.github.com", 443, "POST", "/repos/x/y/issues");
  EXPECT_FALSE(d.allow);
  EXPECT_EQ(d.rule, "network.rules[2]");
  d = decide_http(rules, "api.github.com", 443, "PUT", "/repos/x/y/issues");
  EXPECT_TRUE(d.ruled);
  EXPECT_FALSE(d.allow);
  EXPECT_EQ(d.rule, "network.rules (no match)");
  d = decide_http(rules, "uploads.github.com", 443, "POST", "/");
  EXPECT_FALSE(d.allow);
  EXPECT_EQ(d.rule, "network.rules[2]");
  d = decide_http(rules, "uploads.github.com", 443, "PUT", "/");
  EXPECT_TRUE(d.allow);
  EXPECT_EQ(d.rule, "network.rules[3]");
  d = decide_http(rules, "example.com", 80, "DELETE", "/");
  EXPECT_FALSE(d.ruled);
  EXPECT_TRUE(d.allow);
}

TEST(HttpRules, PortsOfTheHostPatternCount) {
  auto rules = rules_of(R"({"network": {"rules": [
      {"host": "h.test:8080", "methods": ["GET"], "action": "allow"}]}})");
  EXPECT_TRUE(decide_http(rules, "h.test", 8080, "GET", "/").allow);
  EXPECT_FALSE(decide_http(rules, "h.test", 80, "POST", "/").ruled);
}

TEST(HttpRules, LoaderRefusesBadRulesNamingTheField) {
  auto error = [](std::string_view json) {
    try {
      rules_of(json);
    } catch (const PolicyError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << json << " was accepted";
    return std::string();
  };
  auto has = [](const std::string& s, std::string_view part) {
    return s.find(part) != std::string::npos;
  };
  std::string e = error(R"({"network": {"rules": [{"host": "a.test", "action": "permit"}]}})");
  EXPECT_TRUE(has(e, "network.rules[0].action")) << e;
  EXPECT_TRUE(has(e, "\"deny\"")) << e;
  e = error(R"({"network": {"rules": [{"host": "a.test"}]}})");
  EXPECT_TRUE(has(e, "network.rules[0]")) << e;
  EXPECT_TRUE(has(e, "missing \"action\"")) << e;
  e = error(R"({"network": {"rules": [{"action": "deny"}]}})");
  EXPECT_TRUE(has(e, "missing \"host\"")) << e;
  e = error(R"({"network": {"rules": [{"host": "a.test", "action": "deny", "path": ["/"]}]}})");
  EXPECT_TRUE(has(e, "did you mean `paths`")) << e;
  e = error(R"({"network": {"rules": [{"host": "a.test", "action": "deny", "paths": ["x"]}]}})");
  EXPECT_TRUE(has(e, "network.rules[0].paths[0]")) << e;
  e = error(R"({"network": {"rules": [{"host": "a.test", "action": "deny",
                 "paths": ["/a/%2e%2e/b"]}]}})");
  EXPECT_TRUE(has(e, "decoded")) << e;
  e = error(R"({"network": {"rules": [{"host": "a.test", "action": "deny",
                 "paths": ["/a/../b"]}]}})");
  EXPECT_TRUE(has(e, "\"..\"")) << e;
  e = error(R"({"network": {"rules": [{"host": "a.test", "action": "deny",
                 "methods": ["GET /"]}]}})");
  EXPECT_TRUE(has(e, "network.rules[0].methods[0]")) << e;
  e = error(R"({"network": {"rules": [{"host": "a..test", "action": "deny"}]}})");
  EXPECT_TRUE(has(e, "network.rules[0].host")) << e;
  e = error(R"({"rules": []})");
  EXPECT_TRUE(has(e, "network.rules")) << e;
}

TEST(HttpRules, SerializeAndExplain) {
  LoadOptions o;
  o.home = "/home/alice";
  Policy p = parse_policy(R"({"network": {"allow": ["api.github.com"], "rules": [
      {"host": "api.github.com", "methods": ["GET"], "paths": ["/repos/**"], "action": "allow"}]}})",
                          o);
  EXPECT_EQ(parse_policy(to_json(p).dump(), o), p);
  std::string text = explain(p);
  EXPECT_NE(text.find("HTTP allow GET to api.github.com on /repos/** (network.rules[0])"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("refused with 403"), std::string::npos) << text;
}

}  // namespace
}  // namespace cordon::policy
