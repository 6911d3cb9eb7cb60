// libFuzzer target: otlp_logs_body on arbitrary record lines (shim records carry bytes the
// sandbox chose), checking that the body is always one JSON LogsData with one record per line,
// each carrying its line. Built only with -DCORDON_FUZZ=ON (clang); tests/run_fuzz.sh runs it.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/sidecars/otlp_records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Newline-separated lines, as the follower hands them over.
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  lines.push_back(cur);
  const std::string body = cordon::launcher::otlp_logs_body(lines, "s", "0", 1);
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) {
    __builtin_trap();
  }
  const auto& recs = j["resourceLogs"][0]["scopeLogs"][0]["logRecords"];
  if (!recs.is_array() || recs.size() != lines.size()) {
    __builtin_trap();
  }
  for (const auto& r : recs) {
    if (!r["body"]["stringValue"].is_string() || !r["timeUnixNano"].is_string()) {
      __builtin_trap();
    }
  }
  return 0;
}
