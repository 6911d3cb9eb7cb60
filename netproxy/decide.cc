// Refusal messages.
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

}  // namespace cordon::netproxy
