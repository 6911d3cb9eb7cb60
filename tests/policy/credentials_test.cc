// network.credentials in the policy: what the loader accepts and refuses (naming the field), that
// a credential's hosts are inspected, and that policy.json and explain carry names, never values.
#include <gtest/gtest.h>

#include "policy/loader.h"
#include "policy/serialize.h"

namespace cordon::policy {
namespace {

constexpr const char* kAllow = R"("allow": ["api.github.com", "*.example.com:8443"])";

Policy with_credentials(std::string_view credentials) {
  return parse_policy(std::string(R"({"network": {)") + kAllow + R"(, "credentials": )" +
                      std::string(credentials) + "}}");
}

std::string error_of(std::string_view credentials) {
  try {
    with_credentials(credentials);
  } catch (const PolicyError& e) {
    return e.what();
  }
  ADD_FAILURE() << credentials << " was accepted";
  return "";
}

TEST(Credentials, ReadsEnvHostsAndHeaderAndInspectsTheHosts) {
  Policy p = with_credentials(R"([{"env": "GITHUB_TOKEN", "hosts": ["api.github.com"],
                                   "header": "Authorization: Bearer {}"},
                                  {"env": "K2", "hosts": ["x.example.com:8443"]}])");
  ASSERT_EQ(p.network.credentials.size(), 2u);
  const Credential& c = p.network.credentials[0];
  EXPECT_EQ(c.env, "GITHUB_TOKEN");
  EXPECT_EQ(c.header, "Authorization: Bearer {}");
  EXPECT_TRUE(c.bound_to("api.github.com", 443));
  EXPECT_FALSE(c.bound_to("github.com", 443));
  EXPECT_FALSE(c.bound_to("evil.api.github.com", 443));
  EXPECT_TRUE(p.network.inspects("api.github.com", 443));
  EXPECT_TRUE(p.network.inspects("x.example.com", 8443));
  EXPECT_FALSE(p.network.inspects("y.example.com", 8443));
  EXPECT_TRUE(p.network.inspects_any());
}

TEST(Credentials, LoaderRefusesBadEntriesNamingTheField) {
  struct Case {
    const char* credentials;
    const char* error;
  };
  const Case cases[] = {
      {R"({"env": "X"})", "network.credentials: "},
      {R"([{"hosts": ["api.github.com"]}])", "network.credentials[0]: missing \"env\""},
      {R"([{"env": "1X", "hosts": ["api.github.com"]}])",
       "network.credentials[0].env: \"1X\" is not a variable name"},
      {R"([{"env": "A-B", "hosts": ["api.github.com"]}])", "is not a variable name"},
      {R"([{"env": "X"}])", "network.credentials[0]: missing \"hosts\""},
      {R"([{"env": "X", "hosts": []}])", "network.credentials[0].hosts: is empty"},
      {R"([{"env": "X", "hosts": ["*.example.com"]}])",
       "network.credentials[0].hosts[0]: \"*.example.com\" is not an exact host name"},
      {R"([{"env": "X", "hosts": ["github.com"]}])",
       "network.credentials[0].hosts[0]: \"github.com\" is not allowed by network.allow"},
      {R"([{"env": "X", "hosts": ["x.example.com:443"]}])",
       "\"x.example.com:443\" is not allowed by network.allow"},
      {R"([{"env": "X", "hosts": ["api.github.com"]}, {"env": "X", "hosts": ["api.github.com"]}])",
       "network.credentials[1].env: \"X\" is named by an earlier credential already"},
      {R"([{"env": "X", "hosts": ["api.github.com"], "header": "Authorization: Bearer"}])",
       "network.credentials[0].header: \"Authorization: Bearer\" is not a header line with {}"},
      {R"([{"env": "X", "hosts": ["api.github.com"], "header": "A\r\nB: {}"}])",
       "network.credentials[0].header"},
      {R"([{"env": "X", "hosts": ["api.github.com"], "header": "Bad Name: {}"}])",
       "network.credentials[0].header"},
      {R"([{"file": "~/.netrc", "hosts": ["api.github.com"]}])",
       "network.credentials[0].file: \"file\" is not supported yet"},
      {R"([{"env": "X", "extract": "t=.*", "hosts": ["api.github.com"]}])",
       "network.credentials[0].extract: \"extract\" is not supported yet"},
      {R"([{"env": "X", "host": ["api.github.com"]}])", "did you mean `hosts`"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.credentials);
    EXPECT_NE(e.find(c.error), std::string::npos) << c.credentials << "\n  gave: " << e;
  }
  try {
    parse_policy(R"({"network": {"allow": ["api.github.com"], "inspect_exclude":
                     ["api.github.com"], "credentials": [{"env": "X", "hosts":
                     ["api.github.com"]}]}})");
    ADD_FAILURE() << "a credential host in inspect_exclude was accepted";
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find("is in network.inspect_exclude"), std::string::npos)
        << e.what();
  }
}

TEST(Credentials, SerializedAndExplainedByNameOnly) {
  Policy p = with_credentials(R"([{"env": "GITHUB_TOKEN", "hosts": ["api.github.com"],
                                   "header": "Authorization: Bearer {}"}])");
  const std::string json = to_json(p).dump();
  EXPECT_EQ(parse_policy(json), p);
  EXPECT_NE(json.find("\"env\":\"GITHUB_TOKEN\""), std::string::npos) << json;
  EXPECT_EQ(json.find("value"), std::string::npos) << json;
  const std::string text = explain(p);
  EXPECT_NE(text.find("the sandbox sees GITHUB_TOKEN only as a random placeholder"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("refuses with 403 (a net.exfil event)"), std::string::npos) << text;
  EXPECT_NE(text.find("HTTPS to api.github.com is inspected"), std::string::npos) << text;
}

TEST(Credentials, PlainHttpIsOffUnlessTheEntrySaysSoAndExplainSaysWhich) {
  Policy p = with_credentials(R"([{"env": "A", "hosts": ["api.github.com"]},
                                  {"env": "B", "hosts": ["api.github.com"], "plain_http": true}])");
  ASSERT_EQ(p.network.credentials.size(), 2u);
  EXPECT_FALSE(p.network.credentials[0].plain_http);
  EXPECT_TRUE(p.network.credentials[1].plain_http);
  const std::string json = to_json(p).dump();
  EXPECT_EQ(parse_policy(json), p);
  EXPECT_EQ(json.find("plain_http"), json.rfind("plain_http")) << json;  // B's only
  const std::string text = explain(p);
  EXPECT_NE(text.find("over inspected HTTPS only (plain HTTP to them carries the placeholder"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("over inspected HTTPS and plain HTTP (plain_http"), std::string::npos)
      << text;
  EXPECT_NE(error_of(R"([{"env": "X", "hosts": ["api.github.com"], "plain_http": "yes"}])")
                .find("network.credentials[0].plain_http"),
            std::string::npos);
}

TEST(Credentials, ATopLevelCredentialsPointsToTheNetworkSection) {
  try {
    parse_policy(R"({"credentials": []})");
    ADD_FAILURE() << "a top-level credentials was accepted";
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find("network.credentials"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cordon::policy
