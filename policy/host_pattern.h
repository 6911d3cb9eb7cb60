// Host and address patterns of network.allow / network.deny, and the IP address type they use.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cordon::policy {

// An IPv4 or IPv6 address. IPv4 is stored as IPv4; IPv4-mapped IPv6 (::ffff:a.b.c.d) is decoded to
// IPv4 by parse() and from_v6_bytes(), so a mapped address can never slip past a v4 rule.
struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};  // v4 uses the first 4

  static std::optional<IpAddress> parse(std::string_view text);  // "1.2.3.4", "::1", "[::1]"
  static IpAddress from_v4(uint32_t host_order);
  static IpAddress from_v6_bytes(const uint8_t (&b)[16]);  // decodes v4-mapped
  std::string to_string() const;
  bool operator==(const IpAddress&) const = default;
  auto operator<=>(const IpAddress&) const = default;

  // Ranges that are never an upstream unless a policy names them: loopback, RFC 1918, CGNAT
  // (100.64/10), link-local, ULA, multicast, unspecified, broadcast, documentation-free; metadata.
  bool is_special() const;
  bool is_metadata() const;  // 169.254.169.254, fd00:ec2::254, 100.100.100.200, 168.63.129.16, ...
  bool is_loopback() const;  // 127.0.0.0/8, ::1
};

struct IpNet {
  IpAddress addr;
  int prefix = 0;  // 0..32 or 0..128
  bool contains(const IpAddress& ip) const;
  bool operator==(const IpNet&) const = default;
};

// One entry of network.allow / network.deny:
//   "example.com"      exact name, any port        "example.com:443"   exact name, one port
//   "*.example.com"    any subdomain (not the apex) "*"                 any name
//   "10.0.0.1", "[2001:db8::1]:443", "10.0.0.0/8", "2001:db8::/32", "host:8000-8100"
struct HostPattern {
  enum class Kind { Exact, Suffix, AnyName, Ip, Cidr };
  Kind kind = Kind::Exact;
  std::string name;  // Exact: lowercased name; Suffix: ".example.com" (with the leading dot)
  IpNet net;         // Ip (full-length prefix) and Cidr
  uint16_t port_lo = 0;
  uint16_t port_hi = 65535;
  std::string text;  // as written, for messages and explain

  // Parses one entry; std::nullopt with `why` filled on error (e.g. "port 70000 is out of range
  // 1-65535").
  static std::optional<HostPattern> parse(std::string_view text, std::string* why);

  bool matches_port(uint16_t port) const { return port >= port_lo && port <= port_hi; }
  // Name patterns match names only (case-insensitive, trailing dot ignored); IP patterns match
  // a name only when the name is an IP literal.
  bool matches_name(std::string_view host, uint16_t port) const;
  bool matches_ip(const IpAddress& ip, uint16_t port) const;
  bool is_ip() const { return kind == Kind::Ip || kind == Kind::Cidr; }
  // Names a service on the host's own loopback: the name "localhost", or an IP/CIDR lying wholly
  // in 127.0.0.0/8 or ::1. Inside the sandbox those addresses are the sandbox's own `lo`; an
  // allow entry naming them with a port makes cordon carry that port to the host's loopback.
  bool names_host_loopback() const;
  bool operator==(const HostPattern&) const = default;
};

// Lowercases and strips one trailing dot; returns "" if `host` is not a valid DNS name or IP
// literal.
std::string normalize_host(std::string_view host);

}  // namespace cordon::policy
