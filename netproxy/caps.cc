// Connection caps and byte budgets.
#include "netproxy/caps.h"

namespace cordon::netproxy {

namespace {
CapRefusal refusal(std::string cap, uint64_t limit, std::string what) {
  std::string msg = "cordon: " + what + " " + cap + " (" + std::to_string(limit) + ") reached";
  return {std::move(cap), limit, std::move(msg)};
}
}  // namespace

ConnSlot& ConnSlot::operator=(ConnSlot&& o) noexcept {
  if (this != &o) {
    release();
    caps_ = std::exchange(o.caps_, nullptr);
    host_ = std::move(o.host_);
  }
  return *this;
}

void ConnSlot::release() {
  if (caps_ != nullptr) {
    std::exchange(caps_, nullptr)->release(host_);
  }
}

std::optional<CapRefusal> Caps::admit(const std::string& host, ConnSlot* slot,
                                      Clock::time_point now) {
  if (active_ >= p_.max_connections) {
    return refusal("network.max_connections", p_.max_connections, "connection cap");
  }
  auto& per = per_host_[host];
  if (p_.max_connections_per_host != 0 && per >= p_.max_connections_per_host) {
    if (per == 0) {
      per_host_.erase(host);
    }
    return refusal("network.max_connections_per_host", p_.max_connections_per_host,
                   "connection cap for " + host + ":");
  }
  while (!recent_.empty() && now - recent_.front() >= std::chrono::minutes(1)) {
    recent_.pop_front();
  }
  if (p_.connections_per_minute != 0 && recent_.size() >= p_.connections_per_minute) {
    if (per == 0) {
      per_host_.erase(host);
    }
    return refusal("network.connections_per_minute", p_.connections_per_minute, "rate cap");
  }
  if (p_.max_bytes_out != 0 && bytes_out_ >= p_.max_bytes_out) {
    if (per == 0) {
      per_host_.erase(host);
    }
    return bytes_out_refusal();
  }
  if (p_.max_bytes_in != 0 && bytes_in_ >= p_.max_bytes_in) {
    if (per == 0) {
      per_host_.erase(host);
    }
    return bytes_in_refusal();
  }
  if (p_.connections_per_minute != 0) {
    recent_.push_back(now);
  }
  ++per;
  ++active_;
  *slot = ConnSlot(this, host);
  return std::nullopt;
}

void Caps::release(const std::string& host) {
  --active_;
  auto it = per_host_.find(host);
  if (it != per_host_.end() && --it->second == 0) {
    per_host_.erase(it);
  }
}

uint64_t Caps::take(uint64_t n, uint64_t budget, uint64_t* used) {
  if (budget == 0) {
    *used += n;
    return n;
  }
  uint64_t left = *used >= budget ? 0 : budget - *used;
  uint64_t ok = n < left ? n : left;
  *used += ok;
  return ok;
}

CapRefusal Caps::bytes_out_refusal() const {
  return refusal("network.max_bytes_out", p_.max_bytes_out, "byte budget");
}
CapRefusal Caps::bytes_in_refusal() const {
  return refusal("network.max_bytes_in", p_.max_bytes_in, "byte budget");
}

}  // namespace cordon::netproxy
