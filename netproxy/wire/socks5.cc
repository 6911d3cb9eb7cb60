// SOCKS5 parsing: version 5, no-auth, CONNECT; every length checked before it is used.
#include "netproxy/wire/socks5.h"

namespace cordon::netproxy::wire::socks5 {

Greeting parse_greeting(std::span<const uint8_t> d) {
  Greeting g;
  if (d.empty()) {
    return g;
  }
  if (d[0] != 0x05) {
    g.status = ParseStatus::NotThis;
    return g;
  }
  if (d.size() < 2) {
    return g;
  }
  size_t n = d[1];
  if (n == 0) {
    g.status = ParseStatus::NotThis;
    return g;
  }
  if (d.size() < 2 + n) {
    return g;
  }
  for (size_t i = 0; i < n; ++i) {
    if (d[2 + i] == 0x00) {
      g.no_auth = true;
    }
  }
  g.size = 2 + n;
  g.status = ParseStatus::Done;
  return g;
}

Request parse_request(std::span<const uint8_t> d) {
  Request r;
  if (d.size() < 4) {
    if (!d.empty() && d[0] != 0x05) {
      r.status = ParseStatus::NotThis;
    }
    return r;
  }
  if (d[0] != 0x05 || d[2] != 0x00) {
    r.status = ParseStatus::NotThis;
    return r;
  }
  r.command = d[1];
  size_t addr_len = 0;
  size_t off = 4;
  switch (d[3]) {
    case 0x01:
      addr_len = 4;
      break;
    case 0x04:
      addr_len = 16;
      break;
    case 0x03:
      if (d.size() < 5) {
        return r;
      }
      addr_len = d[4];
      off = 5;
      if (addr_len == 0) {
        r.status = ParseStatus::Done;
        r.size = off + 2;
        r.error = kHostUnreachable;
        if (d.size() < r.size) {
          r.status = ParseStatus::NeedMore;
        }
        return r;
      }
      break;
    default:
      // The length of an unknown address type is unknown: answer 0x08 and close (RFC 1928 6).
      r.status = ParseStatus::Done;
      r.size = 4;
      r.error = kAddressTypeNotSupported;
      return r;
  }
  if (d.size() < off + addr_len + 2) {
    return r;
  }
  auto a = d.subspan(off, addr_len);
  if (d[3] == 0x01) {
    r.ip = policy::IpAddress::from_v4((uint32_t{a[0]} << 24) | (uint32_t{a[1]} << 16) |
                                      (uint32_t{a[2]} << 8) | a[3]);
  } else if (d[3] == 0x04) {
    uint8_t b[16];
    for (size_t i = 0; i < 16; ++i) {
      b[i] = a[i];
    }
    r.ip = policy::IpAddress::from_v6_bytes(b);
  } else {
    r.host.assign(a.begin(), a.end());
    for (char c : r.host) {
      if (c == '\0') {
        r.error = kHostUnreachable;  // embedded NUL: never a valid name
      }
    }
  }
  r.port = static_cast<uint16_t>((d[off + addr_len] << 8) | d[off + addr_len + 1]);
  r.size = off + addr_len + 2;
  r.status = ParseStatus::Done;
  if (!r.error && r.command != 0x01) {
    r.error = kCommandNotSupported;  // BIND and UDP ASSOCIATE are not offered
  }
  return r;
}

std::vector<uint8_t> make_reply(Reply code, const std::optional<policy::IpAddress>& bound,
                                uint16_t bound_port) {
  std::vector<uint8_t> out{0x05, code, 0x00};
  if (bound && bound->v6) {
    out.push_back(0x04);
    out.insert(out.end(), bound->bytes.begin(), bound->bytes.end());
  } else {
    out.push_back(0x01);
    for (int i = 0; i < 4; ++i) {
      out.push_back(bound ? bound->bytes[i] : 0);
    }
  }
  out.push_back(static_cast<uint8_t>(bound_port >> 8));
  out.push_back(static_cast<uint8_t>(bound_port & 0xff));
  return out;
}

}  // namespace cordon::netproxy::wire::socks5
