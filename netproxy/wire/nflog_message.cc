// nfnetlink_log datagram and IP header parsing. Every length is checked against the bytes that
// are really there before it is used: the kernel is trusted to be well-formed, the code is not.
#include "netproxy/wire/nflog_message.h"

#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>

#include <cstring>

namespace cordon::netproxy::wire {

namespace {

// Network-order reads of packet header fields.
uint16_t load16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t load32(const uint8_t* p) { return (uint32_t{load16(p)} << 16) | load16(p + 2); }

// Host-order 16-bit read (netlink headers are in the host's byte order, not network order).
uint16_t host16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint32_t host32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr size_t align4(size_t n) { return (n + 3) & ~size_t{3}; }

std::string proto_name(uint8_t protocol) {
  switch (protocol) {
    case 1:
      return "icmp";
    case 6:
      return "tcp";
    case 17:
      return "udp";
    case 58:
      return "icmpv6";
    default:
      return "other";
  }
}

// Fills the port or ICMP type from the transport header at `l4` (may be short or empty).
void read_transport(DroppedPacket* p, std::span<const uint8_t> l4) {
  switch (p->protocol) {
    case 6:    // tcp
    case 17:   // udp
    case 132:  // sctp
    case 136:  // udplite
      if (l4.size() >= 4) {
        p->port = load16(l4.data() + 2);
      }
      break;
    case 1:
    case 58:
      if (!l4.empty()) {
        p->icmp_type = l4[0];
      }
      break;
    default:
      break;
  }
}

std::optional<DroppedPacket> parse_v4(std::span<const uint8_t> b) {
  if (b.size() < 20) {
    return std::nullopt;
  }
  size_t ihl = size_t{b[0] & 0x0fu} * 4;
  if (ihl < 20 || ihl > b.size()) {
    return std::nullopt;
  }
  DroppedPacket p;
  p.protocol = b[9];
  p.proto = proto_name(p.protocol);
  p.src = policy::IpAddress::from_v4(load32(b.data() + 12));
  p.dst = policy::IpAddress::from_v4(load32(b.data() + 16));
  // Only the first fragment carries the transport header.
  bool later_fragment = (load16(b.data() + 6) & 0x1fff) != 0;
  if (!later_fragment) {
    read_transport(&p, b.subspan(ihl));
  }
  return p;
}

std::optional<DroppedPacket> parse_v6(std::span<const uint8_t> b) {
  if (b.size() < 40) {
    return std::nullopt;
  }
  DroppedPacket p;
  uint8_t src[16], dst[16];
  std::memcpy(src, b.data() + 8, 16);
  std::memcpy(dst, b.data() + 24, 16);
  p.src = policy::IpAddress::from_v6_bytes(src);
  p.dst = policy::IpAddress::from_v6_bytes(dst);
  uint8_t next = b[6];
  size_t off = 40;
  bool transport = true;
  // Extension headers, bounded: hop-by-hop, routing, destination options, fragment.
  for (int i = 0; i < 8; ++i) {
    if (next == 0 || next == 43 || next == 60) {
      if (off + 2 > b.size()) {
        transport = false;
        break;
      }
      uint8_t following = b[off];
      off += (size_t{b[off + 1]} + 1) * 8;
      next = following;
    } else if (next == 44) {
      if (off + 8 > b.size()) {
        transport = false;
        break;
      }
      uint8_t following = b[off];
      if ((load16(b.data() + off + 2) & 0xfff8) != 0) {
        transport = false;  // not the first fragment: no transport header
      }
      off += 8;
      next = following;
    } else {
      break;
    }
  }
  p.protocol = next;
  p.proto = proto_name(next);
  if (transport && off <= b.size()) {
    read_transport(&p, b.subspan(off));
  }
  return p;
}

}  // namespace

std::optional<DroppedPacket> parse_ip_packet(std::span<const uint8_t> packet) {
  if (packet.empty()) {
    return std::nullopt;
  }
  switch (packet[0] >> 4) {
    case 4:
      return parse_v4(packet);
    case 6:
      return parse_v6(packet);
    default:
      return std::nullopt;
  }
}

NflogBatch parse_nflog(std::span<const uint8_t> d) {
  NflogBatch out;
  constexpr uint16_t kPacketType = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
  constexpr size_t kNlHdr = sizeof(nlmsghdr);
  constexpr size_t kGenHdr = sizeof(nfgenmsg);
  size_t off = 0;
  // Bounded by the datagram: every step advances by at least a header.
  while (off + kNlHdr <= d.size()) {
    const uint32_t len = host32(d.data() + off);
    const uint16_t type = host16(d.data() + off + 4);
    if (len < kNlHdr || len > d.size() - off) {
      out.malformed = true;
      break;
    }
    if (type == kPacketType && len >= kNlHdr + kGenHdr) {
      std::span<const uint8_t> attrs = d.subspan(off + kNlHdr + kGenHdr, len - kNlHdr - kGenHdr);
      std::span<const uint8_t> payload;
      std::string prefix;
      bool have_payload = false;
      size_t a = 0;
      while (a + 4 <= attrs.size()) {
        const uint16_t alen = host16(attrs.data() + a);
        const uint16_t atype = host16(attrs.data() + a + 2) & NLA_TYPE_MASK;
        if (alen < 4 || alen > attrs.size() - a) {
          out.malformed = true;
          break;
        }
        std::span<const uint8_t> value = attrs.subspan(a + 4, alen - 4u);
        if (atype == NFULA_PAYLOAD) {
          payload = value;
          have_payload = true;
        } else if (atype == NFULA_PREFIX) {
          // NUL-terminated by the kernel; stop at the first NUL or the attribute's end.
          size_t n = 0;
          while (n < value.size() && value[n] != 0) {
            ++n;
          }
          prefix.assign(reinterpret_cast<const char*>(value.data()), n);
          while (!prefix.empty() && prefix.back() == ' ') {
            prefix.pop_back();
          }
        }
        a += align4(alen);
      }
      auto pkt = have_payload ? parse_ip_packet(payload) : std::nullopt;
      if (pkt) {
        pkt->prefix = std::move(prefix);
        out.packets.push_back(std::move(*pkt));
      } else {
        ++out.unreadable;
      }
    }
    off += align4(len);
  }
  return out;
}

}  // namespace cordon::netproxy::wire
