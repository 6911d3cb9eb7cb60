// Destination decisions.
#include "netproxy/decide.h"

namespace cordon::netproxy {

std::string refusal_message(const std::string& host, uint16_t port, const policy::Decision& d) {
  // Built by appending: GCC 12 at -O3 misreports `"[" + std::string` (-Wrestrict, PR 105329).
  std::string hp;
  if (host.find(':') != std::string::npos) {
    hp.append("[").append(host).append("]");
  } else {
    hp = host;
  }
  hp.append(":").append(std::to_string(port));
  if (d.rule.rfind("network.deny", 0) == 0) {
    return "cordon: " + hp + " is denied by " + d.rule;
  }
  if (d.rule == "network.allow (no match)" || d.rule.empty()) {
    return "cordon: " + hp + " is not in network.allow";
  }
  return "cordon: " + hp + " is refused by " + d.rule;
}

policy::Decision decide_name(const policy::NetworkPolicy& p, const std::string& name,
                             uint16_t port) {
  return p.decide_name(name, port);
}

const std::vector<policy::IpAddress>* pinned_addresses(const policy::NetworkPolicy& p,
                                                       const std::string& name) {
  auto it = p.resolve.find(name);
  return it == p.resolve.end() ? nullptr : &it->second;
}

policy::Decision check_address(const policy::NetworkPolicy& p, const std::string& name,
                               const policy::IpAddress& ip, uint16_t port, bool pinned,
                               const policy::Decision& name_decision) {
  for (size_t i = 0; i < p.deny.size(); ++i) {
    if (p.deny[i].is_ip() && p.deny[i].matches_ip(ip, port)) {
      return {false, "network.deny[" + std::to_string(i) + "]"};
    }
  }
  if (ip.is_metadata()) {
    auto d = p.decide_ip(ip, port);
    if (!d.allow) {
      d.rule = "network (metadata address " + ip.to_string() + " not named in network.allow)";
    }
    return d;
  }
  if (pinned) {
    return {true, "network.resolve." + name};
  }
  if (ip.is_special()) {
    auto d = p.decide_ip(ip, port);
    if (!d.allow) {
      d.rule = "network (special address " + ip.to_string() + " not named in network.allow)";
    }
    return d;
  }
  return name_decision;
}

policy::Decision decide_dns_name(const policy::NetworkPolicy& p, const std::string& name) {
  for (size_t i = 0; i < p.deny.size(); ++i) {
    const auto& d = p.deny[i];
    if (!d.is_ip() && d.port_lo <= 1 && d.port_hi == 65535 && d.matches_name(name, 1)) {
      return {false, "network.deny[" + std::to_string(i) + "]"};
    }
  }
  for (size_t i = 0; i < p.allow.size(); ++i) {
    const auto& a = p.allow[i];
    if (!a.is_ip() && a.matches_name(name, a.port_lo == 0 ? 1 : a.port_lo)) {
      return {true, "network.allow[" + std::to_string(i) + "]"};
    }
  }
  return {false, "network.allow (no match)"};
}

}  // namespace cordon::netproxy
