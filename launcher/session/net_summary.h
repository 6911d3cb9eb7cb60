// The network part of a session's record in words: the exit summary's lines (top hosts, refusals,
// a proxy that died) and `cordon log ID --net` (by host, by method, by status, every refusal).
// Both read the session's events.jsonl (netproxy's net.* events).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/session/session.h"
#include "launcher/sidecars/net_sidecar.h"

namespace cordon::launcher {

struct NetStats {
  struct Host {
    uint64_t connections = 0, requests = 0, refused = 0, bytes_out = 0, bytes_in = 0;
  };
  struct Refusal {
    std::string time, what, reason, rule;  // what: "name:port", "udp 198.51.100.1:53", ...
    std::string client;                    // the proxy's client address, for attribution
  };
  // Client address -> the program a refused connection came from ("curl (pid 12)"), from the
  // net.attribution events written at the session's end.
  std::map<std::string, std::string> refused_by;
  std::map<std::string, Host> hosts;  // by name (or address when no name was involved)
  std::map<std::string, uint64_t> methods;
  std::map<std::string, uint64_t> statuses;
  std::vector<Refusal> refusals;  // in order, the first kMaxRefusals kept
  uint64_t refusal_count = 0;
  uint64_t dns_answered = 0, dns_refused = 0;
  uint64_t limits_hit = 0;
  std::vector<std::string> proxy_exits;  // net.proxy_exit reasons
  std::set<std::string> canaries_sent;   // canaries a net.exfil refused, by name
  bool truncated = false;                // the scan stopped at its byte bound
  bool any() const {
    return !hosts.empty() || refusal_count > 0 || dns_answered + dns_refused > 0 ||
           !proxy_exits.empty();
  }
};
inline constexpr size_t kMaxRefusals = 1000;

// The host a net.* event is about: the name the program asked for, else the address; or
// "(unknown)".
std::string host_of(const nlohmann::json& ev);

// Reads the net.* and limit.hit events of an open events.jsonl (at most 16 MiB of it).
NetStats collect_net_stats(int events_fd);

// "cordon: network: ..." lines for the exit summary: totals, the top hosts, the refusals.
std::string net_exit_lines(const NetStats& s);
// The `cordon log ID --net` report.
std::string net_report(const NetStats& s);

// `cordon run`, once the program ended: stops the proxy (its last connection events land before
// session.end), records a death mid-session as a net.proxy_exit event, and fills end.net_lines.
void finish_network(std::optional<NetproxyProcess>& proxy, const Session& session, SessionEnd& end);

}  // namespace cordon::launcher
