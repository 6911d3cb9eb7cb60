// The attribution join: proxy connection records x shim net.connect records on the client address.
#include "launcher/session/shim_attribution.h"

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

// The collector writes "local" only from the socket a record came with; what a process merely
// claimed sits under "claimed" and must never win the join, even as the latest record.
TEST(ShimAttribution, AClaimedLocalAddressJoinsNothing) {
  json forged =
      shim_connect("2026-11-22T10:00:00.900000Z", "10.0.2.1:40000", 9, "/usr/bin/python3");
  forged.erase("local");
  forged["claimed"] = {{"local", "10.0.2.1:40000"}, {"exe", "/usr/bin/git"}, {"pid", 4242}};
  std::vector<json> ev = {
      shim_connect("2026-11-22T10:00:00.100000Z", "10.0.2.1:40000", 7, "/usr/bin/curl"),
      forged,
      proxy("2026-11-22T10:00:01.000000Z", "net.connect", "10.0.2.1:40000"),
  };
  auto out = attribute_connections(ev);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["pid"], 7);
  EXPECT_EQ(out[0]["exe"], "/usr/bin/curl");
  EXPECT_FALSE(out[0].contains("claimed"));
  // Alone, the claim attributes nothing: the connection is unattributed, not the forger's.
  out = attribute_connections(
      {forged, proxy("2026-11-22T10:00:01.000000Z", "net.connect", "10.0.2.1:40000")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].value("unattributed", false)) << out[0].dump();
  EXPECT_FALSE(out[0].contains("exe"));
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

TEST(ShimAttribution, FsRefusalsNameTheCommandOfTheSameProcessNotItsSuccessor) {
  auto start = [](const std::string& ts, int host_pid, const char* exe, json argv) {
    return json{{"ts", ts},
                {"source", "shim"},
                {"kind", "proc.start"},
                {"pid", 3},
                {"ppid", 2},
                {"exe", exe},
                {"argv", argv},
                {"cred", {{"pid", host_pid}, {"uid", 1000}, {"gid", 1000}}}};
  };
  auto refused = [](const std::string& ts, int host_pid, const char* exe) {
    return json{
        {"ts", ts},   {"source", "fusefs"}, {"kind", "fs.refused"}, {"pid", host_pid},
        {"exe", exe}, {"path", ".env"},     {"op", "lookup"},       {"rule", "filesystem.deny[0]"}};
  };
  std::vector<json> ev = {
      // The daemon's record may come first: the collector stamps its records on arrival.
      refused("2026-11-22T10:00:00.000000Z", 500, "/usr/bin/cat"),
      start("2026-11-22T10:00:00.001000Z", 500, "/usr/bin/cat", json::array({"cat", ".env"})),
      // The same host pid later exec'ed python3: its refusal gets python3's argv, and cat's
      // refusal above keeps cat's.
      start("2026-11-22T10:00:00.500000Z", 500, "/usr/bin/python3.11",
            json::array({"python3", "x.py"})),
      refused("2026-11-22T10:00:00.600000Z", 500, "/usr/bin/python3.11"),
      // A static binary: no shim record.
      refused("2026-11-22T10:00:01.000000Z", 777, "/work/static"),
  };
  auto out = attribute_fs_refusals(ev);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["argv"], json::array({"cat", ".env"}));
  EXPECT_EQ(out[0]["host_pid"], 500);
  EXPECT_EQ(out[0]["pid"], 3);
  EXPECT_EQ(out[1]["argv"], json::array({"python3", "x.py"}));
  EXPECT_EQ(out[2]["unattributed"], true);
  EXPECT_FALSE(out[2].contains("argv"));
}

}  // namespace
}  // namespace cordon::launcher
