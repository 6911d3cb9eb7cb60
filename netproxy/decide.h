// How a refusal reads to the agent. The decisions themselves live in the policy model
// (policy::NetworkPolicy::decide_destination / decide_dns / check_resolved): one decision path
// for DNS, CONNECT, SOCKS5, HTTP and transparent connections.
#pragma once

#include <cstdint>
#include <string>

#include "policy/policy.h"

namespace cordon::netproxy {

// Whether a decider may overrule `d`: only a refusal for not being in network.allow. What the
// built-in protections refuse (special and metadata addresses, network.deny, a bad name) is
// never put to it.
inline bool decider_may_answer(const policy::NetDecision& d) {
  return !d.allow && d.rule == "network.allow (no match)";
}

// Refusal line the agent reads: "cordon: example.com:80 is not in network.allow".
std::string refusal_message(const std::string& host, uint16_t port, const policy::Decision& d);

}  // namespace cordon::netproxy
