// --events-to: a second copy of events.jsonl, line for line, written to a file descriptor, a file
// or stderr by a thread of cordon that follows the file, so a slow or dead sink never holds up
// the sandbox or the record.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::launcher {

// Where the copy goes, as opened before the session starts.
struct EventSinkTarget {
  std::string name;  // as given: "stderr", "3", "/var/log/cordon.jsonl"
  UniqueFd fd;       // cordon's own close-on-exec descriptor of it
};

// "stderr", a file descriptor number open for writing, or a path (appended to, created 0600).
// An fd given by number is taken over: moved above the standard ones, close-on-exec, so the
// sandbox never inherits it.
Result<EventSinkTarget> open_event_sink(const std::string& spec);

class EventSink {
 public:
  // What the sink got, for summary.json.
  struct Stats {
    uint64_t sent = 0;     // lines written whole
    uint64_t dropped = 0;  // lines not written: queue full, sink failed, or too slow at the end
    std::string error;     // why the sink stopped taking lines, if it did
  };
  // Bytes of lines read from events.jsonl and not yet written to the sink; past this, new lines
  // are dropped (and counted) until the sink catches up.
  static constexpr size_t kQueueBytes = 4 << 20;

  // Starts following `events_path` (from its start) into `target`.
  static Result<std::unique_ptr<EventSink>> start(const std::string& events_path,
                                                  EventSinkTarget target);
  ~EventSink();
  EventSink(const EventSink&) = delete;
  EventSink& operator=(const EventSink&) = delete;

  // After the record's last line: copies what is left, waiting at most `grace` for the sink, then
  // counts the rest as dropped. Never waits longer than `grace` plus one poll interval.
  Stats stop(std::chrono::milliseconds grace);
  const std::string& name() const { return shared_->name; }

 private:
  struct Shared {
    std::string name;
    UniqueFd events;
    UniqueFd sink;
    std::atomic<bool> stopping{false};
    std::atomic<int64_t> deadline_ns{0};
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Stats stats;
  };
  explicit EventSink(std::shared_ptr<Shared> s);
  static void run(std::shared_ptr<Shared> s);

  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace cordon::launcher
