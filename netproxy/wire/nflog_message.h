// Parsing what the kernel's nfnetlink_log sends for each packet the capture ruleset dropped: a
// datagram of netlink messages, each an NFULNL_MSG_PACKET carrying the first bytes of the packet.
// Pure functions over hostile-or-not bytes (no I/O), fuzzed by
// tests/netproxy/wire/fuzz/fuzz_nflog.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "policy/host_pattern.h"

namespace cordon::netproxy::wire {

// One dropped packet, as far as its headers could be read.
struct DroppedPacket {
  std::string proto;     // udp | icmp | icmpv6 | tcp | other
  uint8_t protocol = 0;  // IP protocol number (IPv6: after the extension headers)
  policy::IpAddress src;
  policy::IpAddress dst;
  std::optional<uint16_t> port;  // destination port (udp, tcp, sctp, udplite; not fragments)
  std::optional<uint8_t> icmp_type;
  std::string prefix;  // the rule's log prefix ("cordon-drop"), trailing space removed
};

struct NflogBatch {
  std::vector<DroppedPacket> packets;
  // Packet messages whose payload was missing or not an IPv4/IPv6 header: counted, not dropped
  // silently (a summary still tells the user something was refused).
  uint32_t unreadable = 0;
  // The netlink framing itself was broken; the rest of the datagram skipped.
  bool malformed = false;
};

// Parses one recv() of an NFLOG netlink socket. Messages other than NFULNL_MSG_PACKET (acks,
// NLMSG_DONE, errors) are skipped.
NflogBatch parse_nflog(std::span<const uint8_t> datagram);

// Reads the IPv4/IPv6 header (and the ports or ICMP type behind it) of a packet's first bytes.
std::optional<DroppedPacket> parse_ip_packet(std::span<const uint8_t> packet);

}  // namespace cordon::netproxy::wire
