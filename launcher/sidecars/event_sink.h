// --events-to: a second copy of events.jsonl, line for line, written to a file descriptor, a file
// or stderr by a RecordFollower, so a slow or dead sink never holds up the sandbox or the record.
#pragma once

#include <memory>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/sidecars/record_follower.h"

namespace cordon::launcher {

// Where the copy goes, as opened before the session starts.
struct EventSinkTarget {
  std::string name;  // as given: "stderr", "3", "/var/log/cordon.jsonl"
  UniqueFd fd;       // cordon's own close-on-exec descriptor of it
};

// "stdout", "stderr", a file descriptor number open for writing, or a path (appended to, created
// 0600). An fd given by number is taken over: moved above the standard ones, close-on-exec, so the
// sandbox never inherits it.
Result<EventSinkTarget> open_event_sink(const std::string& spec);

// Bytes of lines read from events.jsonl and not yet written to the sink; past this, new lines
// are dropped (and counted) until the sink catches up.
inline constexpr size_t kEventSinkQueueBytes = 4 << 20;

// Starts copying `events_path` (from its start) into `target`, one write of whole lines at a time,
// each after poll() says the sink has room.
Result<std::unique_ptr<RecordFollower>> start_event_sink(const std::string& events_path,
                                                         EventSinkTarget target);

}  // namespace cordon::launcher
