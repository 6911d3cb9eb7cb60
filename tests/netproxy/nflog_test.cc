// NFLOG: datagram parsing on well-formed and hostile input, and the rate bound on drop events.
// (The real kernel path is in transparent_test.cc: packets dropped inside a namespace.)
#include "netproxy/nflog.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>

#include <cstring>
#include <vector>

namespace cordon::netproxy {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes udp4(const char* dst, uint16_t port) {
  Bytes p(28, 0);
  p[0] = 0x45;
  p[9] = 17;
  in_addr a{};
  inet_pton(AF_INET, "127.0.0.1", &a);
  std::memcpy(&p[12], &a, 4);
  inet_pton(AF_INET, dst, &a);
  std::memcpy(&p[16], &a, 4);
  p[22] = static_cast<uint8_t>(port >> 8);
  p[23] = static_cast<uint8_t>(port);
  return p;
}

Bytes icmp6(const char* dst, uint8_t type, bool with_hop_by_hop) {
  Bytes p(40, 0);
  p[0] = 0x60;
  p[6] = with_hop_by_hop ? 0 : 58;
  in6_addr a{};
  inet_pton(AF_INET6, dst, &a);
  std::memcpy(&p[24], &a, 16);
  if (with_hop_by_hop) {
    Bytes hbh(8, 0);
    hbh[0] = 58;  // next: icmpv6; length 0 = 8 bytes
    p.insert(p.end(), hbh.begin(), hbh.end());
  }
  p.push_back(type);
  p.push_back(0);
  return p;
}

void attr(Bytes& m, uint16_t type, const Bytes& value) {
  nlattr a{};
  a.nla_len = static_cast<uint16_t>(4 + value.size());
  a.nla_type = type;
  auto* ap = reinterpret_cast<uint8_t*>(&a);
  m.insert(m.end(), ap, ap + 4);
  m.insert(m.end(), value.begin(), value.end());
  m.resize(NLMSG_ALIGN(m.size()), 0);
}

// One NFULNL_MSG_PACKET netlink message with a prefix and the packet's first bytes.
Bytes packet_message(const Bytes& payload, const std::string& prefix = "cordon-drop ") {
  Bytes m(NLMSG_HDRLEN + 4, 0);
  nfgenmsg g{AF_INET, NFNETLINK_V0, htons(7)};
  std::memcpy(&m[NLMSG_HDRLEN], &g, sizeof g);
  Bytes text(prefix.begin(), prefix.end());
  text.push_back(0);  // the kernel sends the prefix NUL-terminated
  attr(m, NFULA_PREFIX, text);
  attr(m, NFULA_PAYLOAD, payload);
  nlmsghdr h{};
  h.nlmsg_len = static_cast<uint32_t>(m.size());
  h.nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
  std::memcpy(m.data(), &h, sizeof h);
  return m;
}

TEST(Nflog, ParsesUdpAndIcmpv6PacketMessagesInOneDatagram) {
  Bytes d = packet_message(udp4("198.51.100.7", 9999));
  Bytes second = packet_message(icmp6("2001:db8::1", 128, true));
  d.insert(d.end(), second.begin(), second.end());
  auto b = wire::parse_nflog(d);
  ASSERT_EQ(b.packets.size(), 2u);
  EXPECT_FALSE(b.malformed);
  EXPECT_EQ(b.unreadable, 0u);
  EXPECT_EQ(b.packets[0].proto, "udp");
  EXPECT_EQ(b.packets[0].dst.to_string(), "198.51.100.7");
  EXPECT_EQ(b.packets[0].src.to_string(), "127.0.0.1");
  EXPECT_EQ(b.packets[0].port, 9999);
  EXPECT_EQ(b.packets[0].prefix, "cordon-drop");
  EXPECT_EQ(b.packets[1].proto, "icmpv6");
  EXPECT_EQ(b.packets[1].dst.to_string(), "2001:db8::1");
  EXPECT_EQ(b.packets[1].icmp_type, 128);
  EXPECT_FALSE(b.packets[1].port);
}

TEST(Nflog, HostileFramingIsAValueNotACrash) {
  Bytes good = packet_message(udp4("203.0.113.5", 53));
  // Length beyond the datagram.
  Bytes longer = good;
  uint32_t big = 10000;
  std::memcpy(longer.data(), &big, 4);
  EXPECT_TRUE(wire::parse_nflog(longer).malformed);
  EXPECT_TRUE(wire::parse_nflog(longer).packets.empty());
  // Length shorter than a header: must not loop forever.
  Bytes tiny = good;
  uint32_t three = 3;
  std::memcpy(tiny.data(), &three, 4);
  EXPECT_TRUE(wire::parse_nflog(tiny).malformed);
  // Truncated payload: an IPv4 header claiming 60 bytes of header in 28 bytes.
  Bytes bad_ip = udp4("203.0.113.5", 53);
  bad_ip[0] = 0x4f;
  auto b = wire::parse_nflog(packet_message(bad_ip));
  EXPECT_TRUE(b.packets.empty());
  EXPECT_EQ(b.unreadable, 1u);
  // Every prefix of a good message parses without reading past its end (ASan checks it).
  for (size_t n = 0; n <= good.size(); ++n) {
    wire::parse_nflog(std::span<const uint8_t>(good.data(), n));
  }
  // A later IPv4 fragment has no ports.
  Bytes frag = udp4("203.0.113.5", 53);
  frag[7] = 0x10;
  auto f = wire::parse_ip_packet(frag);
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->port);
}

TEST(Nflog, LimiterLogsNPerSecondAndSummarisesTheRest) {
  DropEventLimiter lim(3);
  auto t0 = DropEventLimiter::Clock::now();
  wire::DroppedPacket p = *wire::parse_ip_packet(udp4("198.51.100.7", 9999));
  int logged = 0;
  for (int i = 0; i < 10; ++i) {
    logged += lim.admit(p, t0 + std::chrono::milliseconds(i)) ? 1 : 0;
  }
  EXPECT_EQ(logged, 3);
  EXPECT_FALSE(lim.flush(t0 + std::chrono::milliseconds(500)));  // window still open
  auto s = lim.flush(t0 + std::chrono::milliseconds(1001));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->suppressed, 7u);
  EXPECT_EQ(s->protos.at("udp"), 7u);
  ASSERT_EQ(s->destinations.size(), 1u);
  EXPECT_EQ(s->destinations[0], "198.51.100.7:9999");
  EXPECT_FALSE(lim.pending());
  // The next window admits again.
  EXPECT_TRUE(lim.admit(p, t0 + std::chrono::milliseconds(1002)));
  auto ev = drop_summary_event(*s, 3);
  EXPECT_EQ(ev["count"], 7);
  EXPECT_EQ(ev["reason"], kNflogReason);
  auto one = drop_event(p, "quic.test");
  EXPECT_EQ(one["proto"], "udp");
  EXPECT_EQ(one["port"], 9999);
  EXPECT_EQ(one["name"], "quic.test");
  EXPECT_EQ(one["rule"], kNflogRule);
}

}  // namespace
}  // namespace cordon::netproxy
