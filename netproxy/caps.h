// Connection caps and byte budgets of network.*: admission of new connections and the session's
// exfiltration budget. Single-threaded (the proxy runs on one io_context thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "policy/policy.h"

namespace cordon::netproxy {

using Clock = std::chrono::steady_clock;

// Which cap refused, for the event and the message the agent reads.
struct CapRefusal {
  std::string cap;  // "network.max_connections"
  uint64_t limit = 0;
  std::string message;  // "cordon: connection cap network.max_connections (64) reached"
};

class Caps;

// Holds one admitted connection; releasing it (destruction) frees the global and per-host slot.
class ConnSlot {
 public:
  ConnSlot() = default;
  ConnSlot(Caps* caps, std::string host) : caps_(caps), host_(std::move(host)) {}
  ConnSlot(ConnSlot&& o) noexcept
      : caps_(std::exchange(o.caps_, nullptr)), host_(std::move(o.host_)) {}
  ConnSlot& operator=(ConnSlot&& o) noexcept;
  ConnSlot(const ConnSlot&) = delete;
  ConnSlot& operator=(const ConnSlot&) = delete;
  ~ConnSlot() { release(); }
  void release();

 private:
  Caps* caps_ = nullptr;
  std::string host_;
};

class Caps {
 public:
  explicit Caps(const policy::NetworkPolicy& p) : p_(p) {}

  // Admits a new upstream connection to `host` (name, or IP text for raw-IP connections), or says
  // which cap refuses it. max_connections 0 admits nothing; max_connections_per_host and
  // connections_per_minute 0 mean "no limit" there; a spent byte budget refuses new connections.
  std::optional<CapRefusal> admit(const std::string& host, ConnSlot* slot,
                                  Clock::time_point now = Clock::now());

  // Byte budgets for the whole session. Each returns how many of `n` bytes may pass (n, or the
  // rest of the budget); a result < n means the connection must be cut after sending it.
  uint64_t take_out(uint64_t n) { return take(n, p_.max_bytes_out, &bytes_out_); }
  uint64_t take_in(uint64_t n) { return take(n, p_.max_bytes_in, &bytes_in_); }
  CapRefusal bytes_out_refusal() const;
  CapRefusal bytes_in_refusal() const;

  uint32_t active() const { return active_; }
  uint64_t bytes_out() const { return bytes_out_; }
  uint64_t bytes_in() const { return bytes_in_; }

 private:
  friend class ConnSlot;
  void release(const std::string& host);
  static uint64_t take(uint64_t n, uint64_t budget, uint64_t* used);

  const policy::NetworkPolicy& p_;
  uint32_t active_ = 0;
  std::map<std::string, uint32_t> per_host_;
  std::deque<Clock::time_point> recent_;  // starts within the last minute; at most the cap long
  uint64_t bytes_out_ = 0;
  uint64_t bytes_in_ = 0;
};

}  // namespace cordon::netproxy
