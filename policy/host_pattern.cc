// HostPattern parsing and matching, and host-name normalization.
#include "policy/host_pattern.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>

#include "policy/metadata_names.h"

namespace cordon::policy {
namespace {

bool fail(std::string* why, std::string msg) {
  if (why != nullptr) {
    *why = std::move(msg);
  }
  return false;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

bool all_digits(std::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (char c : s) {
    if (c < '0' || c > '9') {
      return false;
    }
  }
  return true;
}

// Checks a lowercased DNS name without a trailing dot. The last label may not look numeric:
// resolvers (inet_aton) read "127.1" or "0x7f.1" as addresses, so such a "name" could be an IP
// in disguise that no IP rule would ever see.
bool valid_name(std::string_view name, std::string* why) {
  if (name.empty()) {
    return fail(why, "the name is empty");
  }
  if (name.size() > 253) {
    return fail(why,
                "a name is at most 253 characters, this one has " + std::to_string(name.size()));
  }
  size_t start = 0;
  std::string_view last;
  while (true) {
    size_t dot = name.find('.', start);
    std::string_view label =
        name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty()) {
      return fail(why, "empty label (two dots in a row, or a leading dot)");
    }
    if (label.size() > 63) {
      return fail(why, "label \"" + std::string(label.substr(0, 20)) +
                           "...\" is longer than 63 characters");
    }
    for (char c : label) {
      auto u = static_cast<unsigned char>(c);
      if (u >= 0x80) {
        return fail(why, "non-ASCII names must be written in punycode (xn--...)");
      }
      if (c == ' ' || c == '\t') {
        return fail(why, "spaces are not allowed in a name");
      }
      if (c == '*') {
        return fail(why,
                    "'*' is only allowed as a whole leading label (\"*.example.com\") or alone");
      }
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) {
        return fail(why, std::string("character '") + (u < 0x20 ? '?' : c) +
                             "' is not allowed in a name (letters, digits, '-', '_')");
      }
    }
    last = label;
    if (dot == std::string_view::npos) {
      break;
    }
    start = dot + 1;
  }
  if (all_digits(last) || (last.size() > 2 && last[0] == '0' && last[1] == 'x')) {
    return fail(why, "it looks like an IP address but is not a valid one");
  }
  return true;
}

std::optional<uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5 || !all_digits(s)) {
    return std::nullopt;
  }
  unsigned v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  if (v < 1 || v > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(v);
}

bool parse_ports(std::string_view spec, HostPattern& p, std::string* why) {
  if (spec.empty()) {
    return fail(why, "missing port after ':'");
  }
  size_t dash = spec.find('-');
  std::string_view lo_s = spec.substr(0, dash);
  std::string_view hi_s = dash == std::string_view::npos ? spec : spec.substr(dash + 1);
  auto lo = parse_port(lo_s);
  if (!lo) {
    return fail(why, "port " + std::string(lo_s) + " is not a number in range 1-65535");
  }
  auto hi = parse_port(hi_s);
  if (!hi) {
    return fail(why, "port " + std::string(hi_s) + " is not a number in range 1-65535");
  }
  if (*lo > *hi) {
    return fail(why, "port range " + std::string(spec) + " is backwards (low-high)");
  }
  p.port_lo = *lo;
  p.port_hi = *hi;
  return true;
}

// "https://example.com/x" -> "example.com:443": what the user most likely meant.
std::string suggest_from_url(std::string_view text) {
  size_t sep = text.find("://");
  std::string scheme = to_lower(text.substr(0, sep));
  std::string_view rest = text.substr(sep + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    rest = rest.substr(at + 1);
  }
  std::string out(rest);
  bool has_port = !rest.empty() && rest.back() != ']' && rest.find(':') != std::string_view::npos;
  if (!has_port) {
    if (scheme == "https" || scheme == "wss") {
      out += ":443";
    } else if (scheme == "http" || scheme == "ws") {
      out += ":80";
    }
  }
  return out;
}

bool parse_cidr(std::string_view host, HostPattern& p, std::string* why) {
  size_t slash = host.find('/');
  std::string_view addr_s = host.substr(0, slash);
  std::string_view len_s = host.substr(slash + 1);
  auto addr = IpAddress::parse(addr_s);
  if (!addr) {
    return fail(why, "paths are not allowed; a '/' is only for CIDR ranges like \"10.0.0.0/8\"");
  }
  if (!all_digits(len_s) || len_s.size() > 3) {
    return fail(why, "prefix length \"" + std::string(len_s) + "\" is not a number");
  }
  int prefix = 0;
  std::from_chars(len_s.data(), len_s.data() + len_s.size(), prefix);
  bool written_v6 = addr_s.find(':') != std::string_view::npos;
  int max = written_v6 ? 128 : 32;
  if (prefix > max) {
    return fail(why, "prefix length /" + std::to_string(prefix) + " is out of range 0-" +
                         std::to_string(max));
  }
  if (written_v6 && !addr->v6) {
    // ::ffff:10.0.0.0/104 was decoded to 10.0.0.0: carry the prefix over to the v4 form.
    if (prefix < 96) {
      return fail(why, "a v4-mapped range needs a prefix of at least /96");
    }
    prefix -= 96;
  }
  IpNet net{*addr, prefix};
  // Host bits set ("10.0.0.1/8") usually mean a typo in the address or the length; refuse it
  // rather than guess which one.
  IpNet masked = net;
  for (int i = 0; i < 16; ++i) {
    int bits = std::min(8, std::max(0, prefix - i * 8));
    masked.addr.bytes[static_cast<size_t>(i)] &=
        static_cast<uint8_t>(bits == 0 ? 0 : 0xff << (8 - bits));
  }
  if (masked.addr != net.addr) {
    return fail(why, "host bits are set after the /" + std::to_string(prefix) +
                         " prefix; did you mean \"" + masked.addr.to_string() + "/" +
                         std::to_string(prefix) + "\"?");
  }
  p.kind = HostPattern::Kind::Cidr;
  p.net = net;
  return true;
}

}  // namespace

std::string normalize_host(std::string_view host) {
  if (host.find(':') != std::string_view::npos || (!host.empty() && host.front() == '[')) {
    auto ip = IpAddress::parse(host);
    return ip ? ip->to_string() : std::string();
  }
  std::string n = to_lower(host);
  if (!n.empty() && n.back() == '.') {
    n.pop_back();
  }
  if (auto ip = IpAddress::parse(n)) {
    return ip->to_string();
  }
  if (!valid_name(n, nullptr)) {
    return {};
  }
  return n;
}

std::optional<HostPattern> HostPattern::parse(std::string_view text, std::string* why) {
  HostPattern p;
  p.text = std::string(text);
  if (text.empty()) {
    fail(why, "the pattern is empty");
    return std::nullopt;
  }
  if (text.size() > 300) {
    fail(why, "the pattern is longer than any host name (253 characters)");
    return std::nullopt;
  }
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      fail(why, "spaces are not allowed in a name");
      return std::nullopt;
    }
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      fail(why, "control characters are not allowed");
      return std::nullopt;
    }
  }
  if (text.find("://") != std::string_view::npos) {
    fail(why, "a URL is not a host pattern; write \"" + suggest_from_url(text) + "\"");
    return std::nullopt;
  }

  std::string_view host = text;
  bool bracketed = false;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) {
      fail(why, "'[' without a closing ']'");
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    std::string_view after = text.substr(close + 1);
    bracketed = true;
    if (!after.empty()) {
      if (after.front() != ':') {
        fail(why, "expected \":port\" after ']'");
        return std::nullopt;
      }
      if (!parse_ports(after.substr(1), p, why)) {
        return std::nullopt;
      }
    }
  } else {
    size_t colons = 0;
    for (char c : text) {
      colons += c == ':' ? 1 : 0;
    }
    if (colons == 1) {
      size_t colon = text.find(':');
      host = text.substr(0, colon);
      if (!parse_ports(text.substr(colon + 1), p, why)) {
        return std::nullopt;
      }
      if (host.empty()) {
        fail(why, "a port needs a host; write \"*" + std::string(text) + "\" for any name");
        return std::nullopt;
      }
    }
    // Two or more colons: a bare IPv6 address or range, which cannot carry a port without [].
  }

  if (host.find('/') != std::string_view::npos) {
    if (!parse_cidr(host, p, why)) {
      return std::nullopt;
    }
    return p;
  }
  if (auto ip = IpAddress::parse(host)) {
    if (bracketed && !ip->v6 && host.find(':') == std::string_view::npos) {
      fail(why, "brackets are only for IPv6 addresses");
      return std::nullopt;
    }
    p.kind = Kind::Ip;
    p.net = IpNet{*ip, ip->v6 ? 128 : 32};
    return p;
  }
  if (bracketed || host.find(':') != std::string_view::npos) {
    fail(why, "\"" + std::string(host) + "\" is not a valid IPv6 address");
    return std::nullopt;
  }

  std::string name = to_lower(host);
  if (!name.empty() && name.back() == '.') {
    name.pop_back();
  }
  if (name == "*") {
    p.kind = Kind::AnyName;
    return p;
  }
  if (name.size() >= 2 && name[0] == '*' && name[1] == '.') {
    if (!valid_name(std::string_view(name).substr(2), why)) {
      return std::nullopt;
    }
    p.kind = Kind::Suffix;
    p.name = name.substr(1);  // keep the dot: ".example.com" cannot match "badexample.com"
    return p;
  }
  if (!valid_name(name, why)) {
    return std::nullopt;
  }
  p.kind = Kind::Exact;
  p.name = std::move(name);
  return p;
}

bool HostPattern::matches_name(std::string_view host, uint16_t port) const {
  if (!matches_port(port)) {
    return false;
  }
  std::string n = normalize_host(host);
  if (n.empty()) {
    return false;
  }
  // Name patterns never match an address literal: "*" must not allow "10.0.0.1".
  if (n.find(':') != std::string::npos || IpAddress::parse(n)) {
    auto ip = IpAddress::parse(n);
    return ip && is_ip() && matches_ip(*ip, port);
  }
  switch (kind) {
    case Kind::Exact:
      return n == name;
    case Kind::Suffix:
      return n.size() > name.size() && n.compare(n.size() - name.size(), name.size(), name) == 0;
    case Kind::AnyName:
      return true;
    case Kind::Ip:
    case Kind::Cidr:
      return false;
  }
  return false;
}

bool HostPattern::matches_ip(const IpAddress& ip, uint16_t port) const {
  return is_ip() && matches_port(port) && net.contains(ip);
}

bool HostPattern::names_host_loopback() const {
  if (kind == Kind::Exact) {
    return name == "localhost";
  }
  if (!is_ip()) {
    return false;
  }
  // Wholly inside: the first and the last address of the network are loopback.
  IpAddress first = net.addr, last = net.addr;
  int bits = net.addr.v6 ? 128 : 32;
  for (int i = net.prefix; i < bits; ++i) {
    auto bit = static_cast<uint8_t>(0x80u >> (i % 8));
    first.bytes[static_cast<size_t>(i / 8)] &= static_cast<uint8_t>(~bit);
    last.bytes[static_cast<size_t>(i / 8)] |= bit;
  }
  return first.is_loopback() && last.is_loopback();
}

bool is_metadata_name(std::string_view host) {
  static constexpr std::string_view kNames[] = {
      "metadata.google.internal",    // GCP (169.254.169.254)
      "metadata.goog",               // GCP
      "metadata",                    // GCP's short name, through the instance's search domain
      "instance-data",               // AWS (169.254.169.254)
      "instance-data.ec2.internal",  // AWS
      "metadata.tencentyun.com",     // Tencent Cloud
  };
  std::string n = normalize_host(host);
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

}  // namespace cordon::policy
