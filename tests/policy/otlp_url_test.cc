// parse_otlp_url: the forms a collector is named by, the default path and port, and refusals that
// say what is wrong.
#include "policy/otlp_url.h"

#include <gtest/gtest.h>

namespace cordon::policy {
namespace {

TEST(OtlpUrl, ABaseUrlGetsTheLogsPathAndTheSchemesPort) {
  auto u = parse_otlp_url("http://Collector.Example:4318");
  ASSERT_TRUE(u.ok()) << u.error().to_string();
  EXPECT_FALSE(u->tls);
  EXPECT_EQ(u->host, "collector.example");
  EXPECT_EQ(u->port, 4318);
  EXPECT_EQ(u->target, "/v1/logs");
  EXPECT_EQ(u->host_header(), "collector.example:4318");
  auto s = parse_otlp_url("HTTPS://otel.example/");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->tls);
  EXPECT_EQ(s->port, 443);
  EXPECT_EQ(s->target, "/v1/logs");
  EXPECT_EQ(s->host_header(), "otel.example");
}

TEST(OtlpUrl, APathIsUsedAsItIsAndIpv6NeedsBrackets) {
  auto u = parse_otlp_url("http://[::1]:9/ingest/logs?tenant=a");
  ASSERT_TRUE(u.ok()) << u.error().to_string();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9);
  EXPECT_EQ(u->target, "/ingest/logs?tenant=a");
  EXPECT_EQ(u->host_header(), "[::1]:9");
  EXPECT_EQ(parse_otlp_url("http://h?x=1")->target, "/v1/logs?x=1");
}

TEST(OtlpUrl, RefusalsNameTheProblem) {
  struct Case {
    const char* url;
    const char* part;
  } cases[] = {
      {"collector:4318", "no scheme"},
      {"file:///etc/passwd", "the scheme file:// is not one"},
      {"http://", "no host"},
      {"http://:4318", "no host"},
      {"http://a b", "printable ASCII without spaces"},
      {"http://h\r\nX-Injected: 1", "printable ASCII without spaces"},
      {"http://tok@h", "user info"},
      {"http://h:0", "not in 1-65535"},
      {"http://h:65536", "not in 1-65535"},
      {"http://h:12a", "is not a number"},
      {"http://h:", "an empty port"},
      {"http://[::1", "closing ]"},
      {"http://[nope]:1", "is not an IPv6 address"},
      {"http://h/#frag", "a fragment"},
      {"http://-h/", "is not a host name"},
      {"http://h..x/", "is not a host name"},
  };
  for (const auto& c : cases) {
    auto u = parse_otlp_url(c.url);
    ASSERT_FALSE(u.ok()) << c.url;
    EXPECT_NE(u.error().to_string().find(c.part), std::string::npos)
        << c.url << ": " << u.error().to_string();
    EXPECT_NE(u.error().hint.find("http://HOST[:PORT]"), std::string::npos);
  }
}

}  // namespace
}  // namespace cordon::policy
