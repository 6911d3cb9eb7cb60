// The sandbox-side netfilter ruleset (libnftables): every TCP connection to a non-loopback address
// is REDIRECTed to the proxy, DNS to the DNS responder, everything else dropped and NFLOGged.
// Called by the launcher inside the sandbox's network namespace, before the program starts.
//
// The namespace needs lo up and default routes via lo WITH a source address:
//   ip route add default dev lo src 127.0.0.1 ; ip -6 route add default dev lo src ::1
// Without `src`, packets to non-local addresses leave with source 0.0.0.0 / ::, the replies of
// the proxy go to "0.0.0.0" (which the kernel turns into 127.0.0.1) and no longer match the
// conntrack entry, so the REDIRECT is never undone and clients drop the answers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace cordon::netproxy {

// A service on the host's loopback the policy names (network.allow "localhost:11434"): inside
// the sandbox, connections to `net` on these ports are REDIRECTed to the proxy like any other,
// which dials the host's own loopback. Every other loopback port stays the sandbox's own.
struct LoopbackForward {
  std::string net;  // "127.0.0.1", "::1", "127.0.0.0/8"
  bool v6 = false;
  uint16_t port_lo = 0, port_hi = 0;
};

struct CaptureConfig {
  uint16_t proxy_port = 0;  // transparent listener (dual-stack [::]:P or 127.0.0.1:P + [::1]:P)
  std::vector<LoopbackForward> loopback;  // carried to the host's loopback (see above)
  uint16_t dns_port = 0;                  // UDP DNS responder
  uint16_t dns_tcp_port = 0;              // TCP DNS responder; 0 = same number as dns_port
  uint16_t nflog_group = 0;               // NFLOG group the dropped packets are logged to
  std::string table = "cordon";
};

// The ruleset text, for tests and `explain`.
std::string capture_ruleset(const CaptureConfig& cfg);

// Installs (replacing a previous copy of) table inet <cfg.table> in the current network namespace.
// Fails closed with nft's own error text; needs CAP_NET_ADMIN in the namespace's user namespace.
Status install_capture_rules(const CaptureConfig& cfg);

// Removes the table (for tests and teardown); no error if it is absent.
Status remove_capture_rules(const std::string& table = "cordon");

}  // namespace cordon::netproxy
