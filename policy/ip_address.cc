// IpAddress / IpNet: parsing (inet_pton), v4-mapped decoding, and the special/metadata ranges.
#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>

#include "policy/host_pattern.h"
#include "policy/ip_ranges.h"

namespace cordon::policy {
namespace {

bool is_v4_mapped(const uint8_t* b) {
  for (int i = 0; i < 10; ++i) {
    if (b[i] != 0) {
      return false;
    }
  }
  return b[10] == 0xff && b[11] == 0xff;
}

constexpr IpAddress v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  IpAddress ip;
  ip.bytes[0] = a;
  ip.bytes[1] = b;
  ip.bytes[2] = c;
  ip.bytes[3] = d;
  return ip;
}

constexpr IpNet net4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, int prefix) {
  return IpNet{v4(a, b, c, d), prefix};
}

constexpr IpNet net6(std::initializer_list<uint8_t> head, int prefix) {
  IpNet n;
  n.addr.v6 = true;
  size_t i = 0;
  for (uint8_t x : head) {
    n.addr.bytes[i++] = x;
  }
  n.prefix = prefix;
  return n;
}

constexpr IpNet kSpecialV4[] = {
    net4(0, 0, 0, 0, 8),       // "this network"; 0.0.0.0 reaches the host's own services
    net4(10, 0, 0, 0, 8),      // RFC 1918
    net4(100, 64, 0, 0, 10),   // CGNAT, also Alibaba's metadata at 100.100.100.200
    net4(127, 0, 0, 0, 8),     // loopback
    net4(169, 254, 0, 0, 16),  // link-local, cloud metadata
    net4(172, 16, 0, 0, 12),   // RFC 1918
    net4(192, 0, 0, 0, 24),    // IETF protocol assignments (192.0.0.192 is OCI metadata)
    net4(192, 168, 0, 0, 16),  // RFC 1918
    net4(198, 18, 0, 0, 15),   // benchmarking, used by some sandboxes for fake DNS
    net4(224, 0, 0, 0, 4),     // multicast
    net4(240, 0, 0, 0, 4),     // reserved, includes 255.255.255.255
};

constexpr IpNet kSpecialV6[] = {
    net6({}, 128),                                                // :: unspecified
    net6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128),  // ::1 loopback
    net6({}, 96),            // ::a.b.c.d, deprecated v4-compatible: never an upstream
    net6({0xfc}, 7),         // unique local (fd00:ec2::254 is AWS metadata)
    net6({0xfe, 0x80}, 10),  // link-local
    net6({0xfe, 0xc0}, 10),  // deprecated site-local
    net6({0xff}, 8),         // multicast
};

// NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry a v4 address a gateway may forward to.
constexpr IpNet kNat64 = net6({0, 0x64, 0xff, 0x9b}, 96);
constexpr IpNet k6to4 = net6({0x20, 0x02}, 16);

bool special_v4(const IpAddress& ip) {
  for (const auto& n : kSpecialV4) {
    if (n.contains(ip)) {
      return true;
    }
  }
  return false;
}

// `inner` lies entirely inside `outer`.
bool net_inside(const IpNet& inner, const IpNet& outer) {
  return inner.addr.v6 == outer.addr.v6 && inner.prefix >= outer.prefix &&
         outer.contains(inner.addr);
}

// The IPv4 address embedded in the low 32 bits of a v6 address.
IpAddress low_v4(const IpAddress& ip) {
  return v4(ip.bytes[12], ip.bytes[13], ip.bytes[14], ip.bytes[15]);
}

}  // namespace

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
  bool bracketed = false;
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
    bracketed = true;
  }
  // inet_pton wants a NUL-terminated string; an embedded NUL would silently truncate the input.
  if (text.empty() || text.size() > 45 || text.find('\0') != std::string_view::npos) {
    return std::nullopt;
  }
  std::string s(text);
  uint8_t buf[16];
  if (!bracketed && ::inet_pton(AF_INET, s.c_str(), buf) == 1) {
    return v4(buf[0], buf[1], buf[2], buf[3]);
  }
  if (::inet_pton(AF_INET6, s.c_str(), buf) == 1) {
    return from_v6_bytes(buf);
  }
  return std::nullopt;
}

IpAddress IpAddress::from_v4(uint32_t host_order) {
  return v4(static_cast<uint8_t>(host_order >> 24), static_cast<uint8_t>(host_order >> 16),
            static_cast<uint8_t>(host_order >> 8), static_cast<uint8_t>(host_order));
}

IpAddress IpAddress::from_v6_bytes(const uint8_t (&b)[16]) {
  // ::ffff:a.b.c.d is the same socket destination as a.b.c.d on a dual-stack socket: decode it so
  // that a v4 deny rule (or the v4 special ranges) cannot be bypassed by the mapped spelling.
  if (is_v4_mapped(b)) {
    return v4(b[12], b[13], b[14], b[15]);
  }
  IpAddress ip;
  ip.v6 = true;
  std::memcpy(ip.bytes.data(), b, 16);
  return ip;
}

std::string IpAddress::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (!v6) {
    // Dotted quad written here rather than by inet_ntop (its sprintf): the proxy spells an
    // address on every connection's path (events, the original destination).
    char* p = buf;
    for (size_t i = 0; i < 4; ++i) {
      if (i > 0) {
        *p++ = '.';
      }
      p = std::to_chars(p, buf + sizeof buf, static_cast<unsigned>(bytes[i])).ptr;
    }
    return std::string(buf, p);
  }
  ::inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf);
  return buf;
}

bool IpAddress::is_special() const {
  if (!v6) {
    return special_v4(*this);
  }
  for (const auto& n : kSpecialV6) {
    if (n.contains(*this)) {
      return true;
    }
  }
  // Special when the v4 address a NAT64 or 6to4 gateway would forward to is.
  if (kNat64.contains(*this)) {
    return special_v4(low_v4(*this));
  }
  if (k6to4.contains(*this)) {
    return special_v4(v4(bytes[2], bytes[3], bytes[4], bytes[5]));
  }
  return false;
}

bool IpAddress::is_loopback() const {
  if (!v6) {
    return bytes[0] == 127;
  }
  for (size_t i = 0; i < 15; ++i) {
    if (bytes[i] != 0) {
      return false;
    }
  }
  return bytes[15] == 1;
}

bool IpAddress::is_metadata() const {
  static constexpr IpAddress kV4[] = {
      v4(169, 254, 169, 254),  // AWS, GCP, Azure, OpenStack, DigitalOcean, ...
      v4(169, 254, 170, 2),    // AWS ECS task credentials
      v4(100, 100, 100, 200),  // Alibaba Cloud
      v4(168, 63, 129, 16),    // Azure wire server
      v4(192, 0, 0, 192),      // Oracle Cloud
  };
  for (const auto& a : kV4) {
    if (*this == a) {
      return true;
    }
  }
  if (v6) {
    static constexpr IpNet kEc2 =  // fd00:ec2::254, AWS IMDS over IPv6
        net6({0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54}, 128);
    if (kEc2.contains(*this)) {
      return true;
    }
    if (kNat64.contains(*this)) {
      return low_v4(*this).is_metadata();
    }
  }
  return false;
}

bool net_within_special(const IpNet& net) {
  if (!net.addr.v6) {
    for (const auto& b : kSpecialV4) {
      if (net_inside(net, b)) {
        return true;
      }
    }
    return false;
  }
  for (const auto& b : kSpecialV6) {
    if (net_inside(net, b)) {
      return true;
    }
  }
  // A translated range is special when the v4 range it translates to is.
  if (net_inside(net, kNat64)) {
    return net_within_special(IpNet{low_v4(net.addr), net.prefix - 96});
  }
  if (net_inside(net, k6to4)) {
    IpAddress inner =
        v4(net.addr.bytes[2], net.addr.bytes[3], net.addr.bytes[4], net.addr.bytes[5]);
    return net_within_special(IpNet{inner, std::min(net.prefix - 16, 32)});
  }
  return false;
}

bool IpNet::contains(const IpAddress& ip) const {
  if (ip.v6 != addr.v6) {
    return false;
  }
  int full = prefix / 8;
  int rest = prefix % 8;
  if (std::memcmp(ip.bytes.data(), addr.bytes.data(), static_cast<size_t>(full)) != 0) {
    return false;
  }
  if (rest != 0) {
    uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
    if ((ip.bytes[static_cast<size_t>(full)] & mask) !=
        (addr.bytes[static_cast<size_t>(full)] & mask)) {
      return false;
    }
  }
  return true;
}

}  // namespace cordon::policy
