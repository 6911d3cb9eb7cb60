// Destination decisions (the policy model's, as the proxy uses them): names, resolved addresses,
// pins, DNS names; refusal messages; and the IP -> name map.
#include "netproxy/decide.h"

#include <gtest/gtest.h>

#include "netproxy/name_map.h"
#include "policy/loader.h"

namespace cordon::netproxy {
namespace {

using policy::IpAddress;

policy::NetworkPolicy net(const std::string& json) {
  return policy::parse_policy(R"({"version":1,"network":)" + json + "}").network;
}

IpAddress ip(const char* s) { return *IpAddress::parse(s); }

TEST(Decide, ResolvedAddressesAreCheckedAfterTheName) {
  auto p = net(R"({"allow": ["api.test", "lan.test", "10.1.2.3"], "deny": ["10.9.0.0/16"],
                   "resolve": {"api.test": "127.0.0.1", "meta.test": "169.254.169.254"}})");
  const policy::NetDecision by_name{true, "network.allow[0]", &p.allow[0]};
  // A pinned loopback address is allowed: the policy's author typed it.
  EXPECT_TRUE(p.check_resolved("api.test", ip("127.0.0.1"), 80, true, by_name).allow);
  // The same address coming from the host resolver is not.
  EXPECT_FALSE(p.check_resolved("lan.test", ip("127.0.0.1"), 80, false, by_name).allow);
  EXPECT_FALSE(p.check_resolved("lan.test", ip("10.0.0.1"), 80, false, by_name).allow);
  // ...unless an IP rule names it.
  EXPECT_TRUE(p.check_resolved("lan.test", ip("10.1.2.3"), 80, false, by_name).allow);
  // Metadata needs an explicit IP rule even when pinned; deny CIDRs win over pins.
  auto m = p.check_resolved("meta.test", ip("169.254.169.254"), 80, true, by_name);
  EXPECT_FALSE(m.allow);
  EXPECT_NE(m.rule.find("metadata"), std::string::npos);
  EXPECT_EQ(p.check_resolved("x", ip("10.9.1.1"), 80, true, by_name).rule, "network.deny[0]");
  // IPv4-mapped IPv6 is decoded: no way around the v4 rules.
  EXPECT_FALSE(p.check_resolved("lan.test", ip("::ffff:10.0.0.1"), 80, false, by_name).allow);
  // A public address keeps the name's rule.
  EXPECT_EQ(p.check_resolved("lan.test", ip("8.8.8.8"), 80, false, by_name).rule,
            "network.allow[0]");
}

TEST(Decide, RefusalMessagesNameTheRule) {
  EXPECT_EQ(refusal_message("example.com", 80, {false, "network.allow (no match)"}),
            "cordon: example.com:80 is not in network.allow");
  EXPECT_EQ(refusal_message("example.com", 443, {false, "network.deny[1]"}),
            "cordon: example.com:443 is denied by network.deny[1]");
  EXPECT_EQ(refusal_message("::1", 80, {false, "network.allow (no match)"}),
            "cordon: [::1]:80 is not in network.allow");
}

TEST(Decide, DnsNameIgnoresPortsButHonoursFullDeny) {
  auto p = net(R"({"allow": ["api.test:443", "*.cdn.test"], "deny": ["bad.cdn.test",
                   "x.cdn.test:80"]})");
  EXPECT_TRUE(p.decide_dns("api.test").allow);
  EXPECT_TRUE(p.decide_dns("img.cdn.test").allow);
  EXPECT_TRUE(p.decide_dns("x.cdn.test").allow);  // denied on one port only
  EXPECT_EQ(p.decide_dns("bad.cdn.test").rule, "network.deny[0]");
  EXPECT_FALSE(p.decide_dns("evil.test").allow);
  EXPECT_FALSE(p.decide_dns("cdn.test").allow);
}

// The decision names its entry, so the proxy never parses rule text back: the DNS answer's
// addresses are checked for the allowing entry's port, and a destination names its entry too.
TEST(Decide, DecisionsCarryTheEntryThatDecided) {
  auto p = net(R"({"allow": ["api.test:8443", "*.cdn.test"], "deny": ["*:25"],
                   "resolve": {"api.test": "127.0.0.1"}})");
  auto dns = p.decide_dns("api.test");
  ASSERT_TRUE(dns.allow);
  ASSERT_EQ(dns.pattern, &p.allow[0]);
  EXPECT_EQ(dns.pattern->port_lo, 8443);
  auto d = p.decide_destination("img.cdn.test", 443);
  EXPECT_TRUE(d.allow);
  EXPECT_EQ(d.pattern, &p.allow[1]);
  EXPECT_EQ(d.decision(), p.decide_name("img.cdn.test", 443));
  auto smtp = p.decide_destination("img.cdn.test", 25);
  EXPECT_FALSE(smtp.allow);
  EXPECT_EQ(smtp.pattern, &p.deny[0]);
  // A raw address goes through the address rules (and "*" in deny covers addresses too).
  EXPECT_EQ(p.decide_destination("198.51.100.7", 25).rule, "network.deny[0]");
  EXPECT_EQ(p.decide_destination("198.51.100.7", 80).decision(),
            p.decide_ip(ip("198.51.100.7"), 80));
  EXPECT_EQ(p.decide_destination("bad name!", 80).rule, "network (not a valid host name)");
  // Pins.
  ASSERT_NE(p.pins("api.test"), nullptr);
  EXPECT_EQ(p.pins("api.test")->front(), ip("127.0.0.1"));
  EXPECT_EQ(p.pins("img.cdn.test"), nullptr);
  EXPECT_EQ(p.check_resolved("api.test", ip("127.0.0.1"), 8443, true, dns).rule,
            "network.resolve.api.test");
}

TEST(NameMap, LoopbackAnswersGetOneStandInPerName) {
  NameMap m;
  auto a = m.remember("a.test", ip("127.0.0.1"));
  auto b = m.remember("b.test", ip("127.0.0.1"));
  EXPECT_NE(a, b);
  EXPECT_EQ(a.to_string().rfind("198.18.", 0), 0u);
  EXPECT_EQ(m.remember("a.test", ip("127.0.0.1")), a);  // stable
  auto e = m.lookup(a);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].name, "a.test");
  EXPECT_EQ(e[0].real, ip("127.0.0.1"));
  auto v6 = m.remember("a.test", ip("::1"));
  EXPECT_EQ(v6.to_string().rfind("fd63:6f72:646f:6e00:", 0), 0u);
  // A public address maps to itself, and may carry several names.
  EXPECT_EQ(m.remember("x.test", ip("8.8.8.8")), ip("8.8.8.8"));
  m.remember("y.test", ip("8.8.8.8"));
  EXPECT_EQ(m.lookup(ip("8.8.8.8")).size(), 2u);
  // Entries expire.
  EXPECT_TRUE(
      m.lookup(a, NameMap::Clock::now() + NameMap::kKeep + std::chrono::seconds(1)).empty());
}

}  // namespace
}  // namespace cordon::netproxy
