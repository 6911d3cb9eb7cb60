// The IP -> name map with loopback stand-ins.
#include "netproxy/name_map.h"

namespace cordon::netproxy {

namespace {
bool is_loopback(const policy::IpAddress& ip) {
  if (!ip.v6) {
    return ip.bytes[0] == 127;
  }
  for (int i = 0; i < 15; ++i) {
    if (ip.bytes[i] != 0) {
      return false;
    }
  }
  return ip.bytes[15] == 1;
}
}  // namespace

policy::IpAddress NameMap::remember(const std::string& name, const policy::IpAddress& real,
                                    Clock::time_point now) {
  policy::IpAddress seen = real;
  if (is_loopback(real)) {
    auto key = std::make_pair(name, real);
    auto it = stand_ins_.find(key);
    if (it != stand_ins_.end()) {
      seen = it->second;
    } else {
      if (!real.v6) {
        // 198.18.0.0/15: 131072 addresses; wraps around rather than growing without bound.
        uint32_t n = next_v4_++ % 131070 + 1;
        seen = policy::IpAddress::from_v4((198u << 24) | (18u << 16) | n);
      } else {
        uint8_t b[16] = {0xfd, 0x63, 0x6f, 0x72, 0x64, 0x6f, 0x6e, 0x00};
        uint32_t n = next_v6_++;
        b[12] = static_cast<uint8_t>(n >> 24);
        b[13] = static_cast<uint8_t>(n >> 16);
        b[14] = static_cast<uint8_t>(n >> 8);
        b[15] = static_cast<uint8_t>(n);
        seen = policy::IpAddress::from_v6_bytes(b);
      }
      if (stand_ins_.size() < kMaxAddresses) {
        stand_ins_.emplace(key, seen);
      }
    }
  }
  if (by_seen_.size() >= kMaxAddresses) {
    prune(now);
  }
  auto& entries = by_seen_[seen];
  for (auto& e : entries) {
    if (e.name == name && e.real == real) {
      e.expires = now + kKeep;
      return seen;
    }
  }
  if (entries.size() < 64) {
    entries.push_back({name, real, now + kKeep});
  }
  return seen;
}

std::vector<NameMap::Entry> NameMap::lookup(const policy::IpAddress& seen,
                                            Clock::time_point now) const {
  std::vector<Entry> out;
  auto it = by_seen_.find(seen);
  if (it == by_seen_.end()) {
    return out;
  }
  for (const auto& e : it->second) {
    if (e.expires > now) {
      out.push_back(e);
    }
  }
  return out;
}

void NameMap::prune(Clock::time_point now) {
  for (auto it = by_seen_.begin(); it != by_seen_.end();) {
    std::erase_if(it->second, [&](const Entry& e) { return e.expires <= now; });
    it = it->second.empty() ? by_seen_.erase(it) : std::next(it);
  }
  if (by_seen_.size() >= kMaxAddresses) {
    by_seen_.erase(by_seen_.begin());  // still full of live entries: drop one, stay bounded
  }
}

}  // namespace cordon::netproxy
