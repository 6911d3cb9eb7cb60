// The IP -> name map fed by the proxy's own DNS answers: which names the sandbox resolved to an
// address, so a transparently captured connection can be decided on the name, not the address.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "policy/host_pattern.h"

namespace cordon::netproxy {

class NameMap {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string name;
    policy::IpAddress real;  // the upstream address the name resolved to on the host side
    Clock::time_point expires;
  };

  // How long an answer keeps its mapping: programs cache DNS answers well past the TTL we gave
  // (JVMs, connection pools), so the map outlives the TTL; bounded in size instead.
  static constexpr std::chrono::minutes kKeep{60};
  static constexpr size_t kMaxAddresses = 65536;

  // Records that `name` resolved to `real` and returns the address to put in the DNS answer.
  // That is `real` itself, except for loopback: inside the sandbox 127.0.0.0/8 and ::1 are the
  // sandbox's own lo and would never reach the proxy, so such a name gets a stand-in address
  // from 198.18.0.0/15 (RFC 2544, never routed) or fd63:6f72:646f:6e00::/64, one per
  // (name, address), which the capture rules redirect like any other.
  policy::IpAddress remember(const std::string& name, const policy::IpAddress& real,
                             Clock::time_point now = Clock::now());

  // The names (and real addresses) behind an address the sandbox connected to; expired entries
  // are not returned.
  std::vector<Entry> lookup(const policy::IpAddress& seen,
                            Clock::time_point now = Clock::now()) const;

 private:
  void prune(Clock::time_point now);
  std::map<policy::IpAddress, std::vector<Entry>> by_seen_;
  std::map<std::pair<std::string, policy::IpAddress>, policy::IpAddress> stand_ins_;
  uint32_t next_v4_ = 1;
  uint32_t next_v6_ = 1;
};

}  // namespace cordon::netproxy
