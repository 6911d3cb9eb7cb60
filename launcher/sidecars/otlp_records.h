// The record as OpenTelemetry logs: events.jsonl lines into an OTLP/HTTP JSON LogsData body.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cordon::launcher {

// One LogsData (resourceLogs -> scopeLogs -> logRecords) holding `lines` in order. Each record's
// body is the line as written (so a pipeline can parse it whole, chain included); its attributes
// lift the fields every line has: cordon.kind, cordon.session, cordon.source, cordon.decision,
// cordon.rule, process.pid, process.executable.path. A line that is not a JSON object (a torn
// one) still goes, as body only. `observed_ns` is when cordon read the lines.
std::string otlp_logs_body(const std::vector<std::string>& lines, std::string_view session,
                           std::string_view cordon_version, int64_t observed_ns);

}  // namespace cordon::launcher
