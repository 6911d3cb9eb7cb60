// Packets the capture ruleset drops (UDP other than DNS, ICMP, raw IP) become `net.refused`
// events: the launcher opens an NFLOG socket inside the sandbox's network namespace, hands it to
// cordon-netproxy (--nflog-fd), which reads it on its io_context and logs each drop, rate-bounded.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "netproxy/wire/nflog_message.h"

namespace cordon::netproxy {

// Opens a NETLINK_NETFILTER socket bound to nfnetlink_log group `group` (CaptureConfig's
// nflog_group), copying the first 128 bytes of each packet. Call it INSIDE the sandbox's network
// namespace (a netlink socket belongs to the namespace it was created in) with CAP_NET_ADMIN
// there; the fd can then cross into the proxy. Only one socket per namespace can bind a group:
// EBUSY means another is bound already.
Result<UniqueFd> open_nflog_socket(uint16_t group);

// `rule` of drop events: the capture rule that dropped the packet (capture.cc, filter_output).
inline constexpr const char* kNflogRule = "capture (table inet cordon, chain filter_output: drop)";
inline constexpr const char* kNflogReason = "dropped by the sandbox's netfilter rules";

// What was not logged one by one during a window: the summary event's content.
struct DropSummary {
  uint64_t suppressed = 0;                 // packets counted but not logged individually
  std::map<std::string, uint64_t> protos;  // per proto
  std::vector<std::string> destinations;   // distinct "addr:port" / "addr", at most kMaxListed
  uint64_t unreadable = 0;                 // packet messages whose headers could not be read
  uint64_t overruns = 0;                   // ENOBUFS: the kernel dropped log messages (flood)
  static constexpr size_t kMaxListed = 8;
};

// Bounds the per-packet events: at most `per_second` in each one-second window; beyond that,
// packets are counted and summarised once the window ends (a UDP flood must not fill the disk).
class DropEventLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit DropEventLimiter(uint32_t per_second) : per_second_(per_second) {}

  // true: log this packet as its own event; false: it was counted into the pending summary.
  bool admit(const wire::DroppedPacket& p, Clock::time_point now);
  void count_unreadable(uint64_t n) { summary_.unreadable += n; }
  void count_overrun() { ++summary_.overruns; }
  // The summary of the window, once it has ended (or at once with `force`), if anything is in it.
  std::optional<DropSummary> flush(Clock::time_point now, bool force = false);
  bool pending() const { return summary_.suppressed + summary_.unreadable + summary_.overruns > 0; }
  Clock::time_point window_end() const { return window_end_; }

 private:
  uint32_t per_second_;
  uint32_t in_window_ = 0;
  Clock::time_point window_end_{};
  DropSummary summary_;
};

// Event fields for one dropped packet (`name`: what the sandbox resolved the address from, if
// anything) and for a summary.
nlohmann::json drop_event(const wire::DroppedPacket& p, const std::string& name);
nlohmann::json drop_summary_event(const DropSummary& s, uint32_t per_second);

}  // namespace cordon::netproxy
