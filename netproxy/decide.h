// How a refusal reads to the agent. The decisions themselves live in the policy model
// (policy::NetworkPolicy::decide_destination / decide_dns / check_resolved): one decision path
// for DNS, CONNECT, SOCKS5, HTTP and transparent connections.
#pragma once

#include <cstdint>
#include <string>

#include "policy/policy.h"

namespace cordon::netproxy {

// Refusal line the agent reads: "cordon: example.com:80 is not in network.allow".
std::string refusal_message(const std::string& host, uint16_t port, const policy::Decision& d);

}  // namespace cordon::netproxy
