// The network namespace, child side: `lo` up always; with network on (network.allow not empty)
// also default routes into `lo`, the proxy's listening sockets and the capture ruleset, so every
// connection the program makes lands on cordon-netproxy and nothing else leaves.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/plan.h"

namespace cordon::launcher {

// Ports inside the sandbox's own network namespace. It is fresh and empty when these are bound,
// so fixed numbers never collide, and the plan can name the explicit proxy in the environment
// before the namespace exists. Outside the ephemeral range (32768-60999): the program's own
// port-0 binds never race them.
inline constexpr uint16_t kTransparentPort = 15001;    // REDIRECTed TCP, dual-stack [::]
inline constexpr uint16_t kDnsPort = 15053;            // DNS over UDP and TCP, dual-stack [::]
inline constexpr uint16_t kExplicitProxyPort = 15080;  // HTTP proxy + SOCKS5 on 127.0.0.1
inline constexpr uint16_t kNflogGroup = 1;             // the ruleset logs dropped packets here
// What the sandbox's /etc/resolv.conf names: any address does (UDP/TCP 53 are redirected to the
// proxy's DNS responder); a documentation address so a packet that ever escaped is recognisable.
inline constexpr const char* kSandboxNameserver = "198.51.100.53";

// Parent side, before the clone and off its critical path (while cordon-fs mounts): loads the
// capture plugin and libnftables into cordon, so the child's own load finds them in its copy of
// cordon's memory instead of mapping and relocating a dozen libraries. A failure is left for the
// child's load to report.
void preload_capture_plugin();

// Child side (needs CAP_NET_ADMIN in the namespace's user namespace).
Status bring_up_loopback_in_child();

// The sockets the proxy serves, made inside the sandbox's namespace. The proxy (host side) gets
// the only copies once cordon hands them over: if it dies, connections are refused.
struct CaptureSockets {
  UniqueFd transparent;     // listening TCP, kTransparentPort
  UniqueFd dns_udp;         // bound UDP, kDnsPort
  UniqueFd dns_tcp;         // listening TCP, kDnsPort
  UniqueFd explicit_proxy;  // listening TCP 127.0.0.1:kExplicitProxyPort (network.proxy_env)
  UniqueFd nflog;           // NFLOG socket for kNflogGroup, when this build can read NFLOG
};

// Child side, the one call contain.cc makes, right after bring_up_loopback_in_child: with network
// on, default routes via lo (with a source address) and the sockets, then the sockets to cordon
// (send_capture_sockets), then the capture ruleset (fails closed, naming the kernel feature) - so
// the proxy starts while the ruleset goes in; without network, nothing (the namespace keeps only
// lo and no route at all).
Status capture_network_in_child(bool network, bool explicit_proxy,
                                const std::vector<LoopbackService>& loopback, int report_fd);

// Child side, in a fresh network namespace of its own (cordon doctor): what a run with network
// does through libnftables, without the routes and the proxy's sockets: loads cordon-capture.so,
// opens the NFLOG socket and installs the capture ruleset. The namespace takes it away on exit.
Status try_capture_ruleset_in_child();

// Child side: the sockets to cordon over the report channel (MsgKind::NetSockets). The child's
// copies are closed by the caller dropping `s`.
Status send_capture_sockets(int report_fd, const CaptureSockets& s);

// Parent side: rebuilds CaptureSockets from a NetSockets message's roles and fds.
Result<CaptureSockets> capture_sockets_from_msg(const std::string& roles, UniqueFd first,
                                                std::vector<UniqueFd> rest);

}  // namespace cordon::launcher
