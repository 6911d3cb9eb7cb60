// Everything the report page shows, gathered from a session directory into one JSON value: the
// header, the policy in words, alerts, process lanes, events, the network table and the files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::launcher::report {

// The page stays under this size for any session (the events get what the rest leaves, see
// event_budget.h); kPageOverhead is the template, style and script.
inline constexpr size_t kPageBudget = (2 << 20) - (64 << 10);
inline constexpr size_t kPageOverhead = 64 << 10;
// events.jsonl is read up to this size (the rest is named in the page).
inline constexpr size_t kMaxEventsRead = 64 << 20;

struct SessionRecord {
  std::string id;
  nlohmann::json summary;              // summary.json, or null while running / after a crash
  std::string policy_text;             // policy.json as written
  std::vector<nlohmann::json> events;  // the parseable lines, in order
  size_t unparseable = 0;
  bool truncated = false;  // events.jsonl was longer than kMaxEventsRead
  nlohmann::json files;    // files_view()
};

// Parses events.jsonl's bytes into `rec` (hostile input: each line through store::parse_event).
void add_events(SessionRecord& rec, std::string_view jsonl);

// The page's data.
nlohmann::json build_model(const SessionRecord& rec);

}  // namespace cordon::launcher::report
