// The record's bounds as the session met them: cap reached, drops by writer and family.
#include "launcher/session/record_summary.h"

#include <sys/stat.h>

#include <algorithm>

#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"
#include "record/chain.h"

namespace cordon::launcher {

namespace {

uint64_t num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

std::string str(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

uint64_t RecordStats::dropped_total() const {
  uint64_t n = 0;
  for (const auto& [source, families] : dropped) {
    for (const auto& [family, c] : families) {
      n += c.rate_limited + c.over_cap;
    }
  }
  return n;
}

nlohmann::json RecordStats::to_json(uint64_t max_bytes) const {
  nlohmann::json by = nlohmann::json::object();
  for (const auto& [source, families] : dropped) {
    for (const auto& [family, c] : families) {
      by[source][family] = {{"rate_limited", c.rate_limited}, {"over_cap", c.over_cap}};
    }
  }
  return {{"bytes", bytes},       {"max_bytes", max_bytes},
          {"limit_hit", cap_hit}, {"dropped", dropped_total()},
          {"dropped_by", by},     {"chain", {{"head", chain_head}, {"lines", chained_lines}}}};
}

std::string RecordStats::exit_line(uint64_t max_bytes) const {
  uint64_t n = dropped_total();
  if (n == 0 && !cap_hit) {
    return {};
  }
  std::string out = "cordon: record: " + std::to_string(n) + (n == 1 ? " event" : " events") +
                    " not written (counted in summary.json)";
  if (cap_hit) {
    out += "; events.jsonl reached its cap of " + text::size(max_bytes) + " (record.max_bytes)";
  } else {
    out += ": rate limit (record.events_per_second)";
  }
  return out + "\n";
}

RecordStats collect_record_stats(int events_fd) {
  RecordStats s;
  s.chain_head = record::kChainStart;
  struct stat st;
  if (::fstat(events_fd, &st) == 0) {
    s.bytes = static_cast<uint64_t>(st.st_size);
  }
  (void)store::for_each_line(events_fd, 0, [&](size_t, std::string_view line, bool complete) {
    if (!complete) {
      return;
    }
    if (auto hex = record::chain_field(line)) {
      ++s.chained_lines;
      s.chain_head = *hex;
    }
    // Nearly every line is something else: only these two kinds are parsed.
    if ((line.find("\"record.dropped\"") == std::string_view::npos &&
         line.find("\"limit\":\"record\"") == std::string_view::npos)) {
      return;
    }
    nlohmann::json ev = store::parse_event(line);
    if (!ev.is_object()) {
      return;
    }
    std::string kind = str(ev, "kind");
    if (kind == "limit.hit" && str(ev, "limit") == "record") {
      s.cap_hit = true;
    } else if (kind == "record.dropped") {
      // Counts are cumulative per writer and family: the largest is the latest.
      auto& c = s.dropped[str(ev, "source")][str(ev, "family")];
      c.rate_limited = std::max(c.rate_limited, num(ev, "rate_limited"));
      c.over_cap = std::max(c.over_cap, num(ev, "over_cap"));
    }
  });
  return s;
}

}  // namespace cordon::launcher
