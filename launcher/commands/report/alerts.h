// The security-relevant events of a session, for the box at the top of the report: exfiltration
// attempts, canaries, refused private-range and metadata connections, fronting, limits reached,
// refused processes.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace cordon::launcher::report {

struct Alert {
  std::string
      category;      // exfil | canary | metadata | private | fronting | limit | process | record
  std::string text;  // one line, for people
};

// The alert `ev` raises, if any.
std::optional<Alert> alert_of(const nlohmann::json& ev);

// Alerts grouped by (category, text) with a count and the first event's index, at most
// kMaxAlerts groups (the rest counted in "more").
class AlertBox {
 public:
  void add(const Alert& a, size_t event_index);
  nlohmann::json to_json() const;
  bool empty() const { return groups_.empty(); }

  static constexpr size_t kMaxAlerts = 200;

 private:
  struct Group {
    Alert alert;
    size_t count = 0, first = 0;
  };
  std::vector<Group> groups_;
  size_t more_ = 0;
};

}  // namespace cordon::launcher::report
