// Accumulates the proxy's net.connect, net.http, net.refused and net.dns events into table rows.
#include "launcher/commands/report/network_table.h"

#include <algorithm>

#include "launcher/commands/report/event_view.h"
#include "launcher/session/net_summary.h"
#include "launcher/session/session_text.h"

namespace cordon::launcher::report {
namespace {

constexpr size_t kMaxRules = 4;

uint64_t count(const nlohmann::json& ev, const char* key) {
  int64_t n = num(ev, key, 0);
  return n > 0 ? static_cast<uint64_t>(n) : 0;
}

}  // namespace

NetworkTable::Row* NetworkTable::row(const std::string& host, const std::string& port,
                                     size_t event_index) {
  auto key = std::make_pair(host, port);
  auto it = rows_.find(key);
  if (it != rows_.end()) {
    return &it->second;
  }
  if (rows_.size() >= kMaxRows) {
    ++more_;
    return nullptr;
  }
  Row& r = rows_[key];
  r.host = text::one_line(host, 300);
  r.port = port;
  r.first_event = event_index;
  return &r;
}

void NetworkTable::add(const nlohmann::json& ev, size_t event_index, size_t lane) {
  if (str(ev, "source") != "netproxy") {
    return;
  }
  const std::string kind = str(ev, "kind");
  if (kind != "net.connect" && kind != "net.http" && kind != "net.refused" && kind != "net.dns") {
    return;
  }
  std::string port = kind == "net.dns" ? "dns" : std::to_string(num(ev, "port", 0));
  if (std::string proto = str(ev, "proto"); !proto.empty() && proto != "tcp") {
    port = text::one_line(proto, 16) + " " + port;  // a packet netfilter dropped: udp, icmp
  }
  Row* r = row(host_of(ev), port, event_index);
  if (r == nullptr) {
    return;
  }
  if (!r->lane_known && lane != 0) {
    r->lane = lane;
    r->lane_known = true;
  }
  const bool deny = str(ev, "decision") == "deny";
  if (kind == "net.connect") {
    ++r->connections;
    r->bytes_out += count(ev, "bytes_out");
    r->bytes_in += count(ev, "bytes_in");
  } else if (kind == "net.http") {
    ++r->requests;
  } else if (kind == "net.dns") {
    ++r->dns;
  }
  if (kind == "net.refused" || deny) {
    ++r->refused;
    if (r->reason.empty()) {
      r->reason = text::one_line(str(ev, "reason"), 300);
    }
  }
  std::string rule = text::one_line(str(ev, "rule"), 200);
  if (!rule.empty() && r->rules.size() < kMaxRules &&
      std::find(r->rules.begin(), r->rules.end(), rule) == r->rules.end()) {
    r->rules.push_back(rule);
  }
}

nlohmann::json NetworkTable::to_json() const {
  std::vector<const Row*> order;
  for (const auto& [key, r] : rows_) {
    order.push_back(&r);
  }
  std::stable_sort(order.begin(), order.end(), [](const Row* a, const Row* b) {
    if ((a->refused > 0) != (b->refused > 0)) {
      return a->refused > 0;
    }
    return a->bytes_out + a->bytes_in > b->bytes_out + b->bytes_in;
  });
  nlohmann::json rows = nlohmann::json::array();
  for (const Row* r : order) {
    const char* decision = r->refused == 0                                      ? "allow"
                           : r->connections + r->requests + r->dns > r->refused ? "mixed"
                                                                                : "deny";
    rows.push_back({{"host", r->host},
                    {"port", r->port},
                    {"decision", decision},
                    {"rules", r->rules},
                    {"reason", r->reason},
                    {"connections", r->connections},
                    {"requests", r->requests},
                    {"refused", r->refused},
                    {"dns", r->dns},
                    {"bytes_out", r->bytes_out},
                    {"bytes_in", r->bytes_in},
                    {"lane", r->lane},
                    {"ev", r->first_event}});
  }
  return {{"rows", rows}, {"more", more_}};
}

}  // namespace cordon::launcher::report
