// What the record's own bounds did in a session: whether events.jsonl reached its cap and how many
// events each writer dropped, read back from the limit.hit and record.dropped lines.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace cordon::launcher {

struct RecordStats {
  uint64_t bytes = 0;    // the file's size
  bool cap_hit = false;  // a limit.hit with "limit": "record"
  struct Counts {
    uint64_t rate_limited = 0, over_cap = 0;
  };
  // source -> kind family -> the latest (largest) counts that writer reported.
  std::map<std::string, std::map<std::string, Counts>> dropped;
  // The hash chain: how many lines carry a chain value, and the last one (the head).
  uint64_t chained_lines = 0;
  std::string chain_head;

  uint64_t dropped_total() const;
  // summary.json's "record".
  nlohmann::json to_json(uint64_t max_bytes) const;
  // "cordon: record: ..." for the exit summary, or "" when nothing was dropped.
  std::string exit_line(uint64_t max_bytes) const;
};

// Reads the whole of an open events.jsonl (parsing only the lines that can matter).
RecordStats collect_record_stats(int events_fd);

}  // namespace cordon::launcher
