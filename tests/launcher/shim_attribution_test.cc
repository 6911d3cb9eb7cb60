// The attribution join: proxy connection records x shim net.connect records on the client address.
#include "launcher/shim_attribution.h"

#include <gtest/gtest.h>

namespace cordon::launcher {
namespace {

using nlohmann::json;

json shim_connect(const std::string& ts, const std::string& local, int pid, const char* exe) {
  return {{"ts", ts},
          {"source", "shim"},
          {"kind", "net.connect"},
          {"local", local},
          {"remote", "10.0.0.1:443"},
          {"pid", pid},
          {"ppid", 1},
          {"exe", exe},
          {"argv", json::array({exe, "x"})}};
}

json proxy(const std::string& ts, const char* kind, const std::string& client) {
  return {{"ts", ts},         {"source", "netproxy"}, {"kind", kind},       {"client", client},
          {"name", "a.test"}, {"port", 443},          {"decision", "allow"}};
}

TEST(ShimAttribution, EachProxyConnectionNamesTheProcessWithItsClientAddress) {
  std::vector<json> ev = {
      shim_connect("2026-11-22T10:00:00.100000Z", "10.0.2.1:40000", 7, "/usr/bin/curl"),
      shim_connect("2026-11-22T10:00:00.200000Z", "10.0.2.1:40001", 8, "/usr/bin/python3"),
      proxy("2026-11-22T10:00:01.000000Z", "net.connect", "10.0.2.1:40001"),
      proxy("2026-11-22T10:00:01.100000Z", "net.connect", "10.0.2.1:40000"),
  };
  auto out = attribute_connections(ev);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["pid"], 8);
  EXPECT_EQ(out[0]["exe"], "/usr/bin/python3");
  EXPECT_EQ(out[0]["client"], "10.0.2.1:40001");
  EXPECT_EQ(out[0]["name"], "a.test");
  EXPECT_EQ(out[1]["pid"], 7);
  EXPECT_EQ(out[1]["argv"], json({"/usr/bin/curl", "x"}));
  EXPECT_FALSE(out[1].contains("unattributed"));
}

TEST(ShimAttribution, AStaticBinaryIsUnattributedNotGuessed) {
  std::vector<json> ev = {
      shim_connect("2026-11-22T10:00:00.100000Z", "10.0.2.1:40000", 7, "/usr/bin/curl"),
      proxy("2026-11-22T10:00:01.000000Z", "net.refused", "10.0.2.1:40099"),
      proxy("2026-11-22T10:00:01.000000Z", "net.connect", ""),  // no client: not joinable
  };
  auto out = attribute_connections(ev);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["unattributed"], true);
  EXPECT_FALSE(out[0].contains("pid"));
  EXPECT_EQ(out[0]["of"], "net.refused");
}

TEST(ShimAttribution, AReusedPortBelongsToTheConnectionAtTheTime) {
  std::vector<json> ev = {
      shim_connect("2026-11-22T10:00:00.000000Z", "10.0.2.1:40000", 7, "/usr/bin/curl"),
      proxy("2026-11-22T10:00:00.500000Z", "net.connect", "10.0.2.1:40000"),
      shim_connect("2026-11-22T10:00:30.000000Z", "10.0.2.1:40000", 9, "/usr/bin/wget"),
      // A refusal the proxy logged before the collector wrote the shim's record.
      proxy("2026-11-22T10:00:29.999000Z", "net.refused", "10.0.2.1:40000"),
  };
  auto out = attribute_connections(ev);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["pid"], 7);
  EXPECT_EQ(out[1]["pid"], 9);
}

}  // namespace
}  // namespace cordon::launcher
