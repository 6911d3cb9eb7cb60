// --otlp / record.otlp: the record sent to an OpenTelemetry collector as OTLP/HTTP JSON logs by a
// RecordFollower in cordon (on the host, never through the sandbox's network), in batches, with
// a bounded backlog whose overflow and failed batches are counted, never waited for.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/result.h"
#include "launcher/sidecars/record_follower.h"
#include "policy/otlp_url.h"

namespace cordon::launcher {

// Lines read and not yet sent; past this, new lines are dropped (and counted).
inline constexpr size_t kOtlpQueueBytes = 4 << 20;
// A batch goes when it has this many records, or its oldest has waited kOtlpBatchDelay.
inline constexpr size_t kOtlpBatchLines = 512;
inline constexpr std::chrono::milliseconds kOtlpBatchDelay{200};
// One POST: connect, TLS, request and answer, all within this.
inline constexpr std::chrono::seconds kOtlpRequestTimeout{2};
// After a failed POST, the next waits this long (its lines meanwhile queue, then overflow).
inline constexpr std::chrono::seconds kOtlpRetryDelay{1};

// The collector, checked and resolved before the session starts.
struct OtlpTarget {
  std::string url;  // as given
  policy::OtlpUrl parsed;
  struct Resolved;
  std::shared_ptr<Resolved> resolved;  // addresses and, for https, the TLS context
};

// Parses `url`, resolves its host and, for https, loads the host's trust store. Errors name the
// URL and the fix.
Result<OtlpTarget> prepare_otlp(const std::string& url);

// Starts sending `events_path` (from its start) to the collector; `session` goes into the
// resource's attributes.
Result<std::unique_ptr<RecordFollower>> start_otlp_exporter(const std::string& events_path,
                                                            const std::string& session,
                                                            OtlpTarget target);

}  // namespace cordon::launcher
