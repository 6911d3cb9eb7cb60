// Decisions on destinations: policy checks on the name, then on every address it resolves to.
// Pure functions (no I/O) so they can be tested directly; resolution lives in resolve.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/policy.h"

namespace cordon::netproxy {

// Refusal line the agent reads: "cordon: example.com:80 is not in network.allow".
std::string refusal_message(const std::string& host, uint16_t port, const policy::Decision& d);

// A name given by the sandbox (CONNECT, SOCKS5, Host, SNI, DNS).
policy::Decision decide_name(const policy::NetworkPolicy& p, const std::string& name,
                             uint16_t port);

// Checks one address `name` resolved to before it is dialled. `pinned`: the address comes from
// network.resolve for this name.
//  - an IP/CIDR deny rule matching the address wins;
//  - metadata addresses (169.254.169.254, fd00:ec2::254, ...) need an IP/CIDR allow rule naming
//    them, even when pinned: a pin to a metadata address is the SSRF this check exists for;
//  - a pinned address is otherwise allowed even in a special range (loopback, RFC 1918, ...),
//    because the policy's author typed it (rule "network.resolve.NAME");
//  - other special addresses need an IP/CIDR allow rule (decide_ip);
//  - anything else is allowed under the name's rule.
policy::Decision check_address(const policy::NetworkPolicy& p, const std::string& name,
                               const policy::IpAddress& ip, uint16_t port, bool pinned,
                               const policy::Decision& name_decision);

// For DNS, where the port is not known yet: is the name allowed on some port? Deny patterns count
// only if they cover every port.
policy::Decision decide_dns_name(const policy::NetworkPolicy& p, const std::string& name);

// The pins of network.resolve for `name` (normalised), empty when there are none.
const std::vector<policy::IpAddress>* pinned_addresses(const policy::NetworkPolicy& p,
                                                       const std::string& name);

}  // namespace cordon::netproxy
