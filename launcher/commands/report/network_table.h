// The report's network table: one row per host and port the session reached or tried, with the
// decision and rule, connections, requests, bytes each way and the first process; refusals first.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cordon::launcher::report {

class NetworkTable {
 public:
  // Counts the proxy's event i (other sources are ignored: the shim's net.* are the same
  // connections seen from inside). `lane`: the process it came from (0 = unknown).
  void add(const nlohmann::json& ev, size_t event_index, size_t lane);
  // The rows, refusals first, then by bytes; at most kMaxRows (the rest counted in "more").
  nlohmann::json to_json() const;

  static constexpr size_t kMaxRows = 2000;

 private:
  struct Row {
    std::string host, port;  // port: a number, or "dns"
    uint64_t connections = 0, requests = 0, refused = 0, dns = 0, bytes_out = 0, bytes_in = 0;
    std::vector<std::string> rules;  // distinct, first few
    std::string reason;              // the first refusal's
    size_t first_event = 0, lane = 0;
    bool lane_known = false;
  };
  Row* row(const std::string& host, const std::string& port, size_t event_index);

  std::map<std::pair<std::string, std::string>, Row> rows_;
  size_t more_ = 0;
};

}  // namespace cordon::launcher::report
