// RecordFollower: a thread of cordon that follows events.jsonl as it grows and hands its whole
// lines to a destination (--events-to, --otlp), with a bounded backlog, drops counted, and a stop
// that waits for the destination at most until a deadline, so the sandbox and its end never wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::launcher {

// Where the lines go. Called only from the follower's thread.
class RecordDestination {
 public:
  virtual ~RecordDestination() = default;
  // Takes one whole line (no newline) if its backlog has room; false: the line is dropped.
  virtual bool offer(std::string_view line) = 0;
  // Moves taken lines on. `final`: the record has ended, nothing more comes. Returns at the latest
  // at `deadline_ns()` (CLOCK_MONOTONIC; it moves closer once a stop is asked for), and, when
  // lines are pending but cannot move, after waiting a little for them (a poll's worth).
  virtual void pump(bool final, const std::atomic<int64_t>& deadline_ns) = 0;
  virtual uint64_t pending() const = 0;   // lines taken, not yet delivered or given up
  virtual uint64_t sent() const = 0;      // lines delivered
  virtual uint64_t lost() const = 0;      // lines taken and given up (the sink failed them)
  virtual std::string error() const = 0;  // the last failure, "" if none
};

// How long the end of a session waits, at most, for every follower to deliver its last lines.
inline constexpr std::chrono::seconds kShippingGrace{2};

class RecordFollower {
 public:
  struct Stats {
    uint64_t sent = 0;     // lines delivered
    uint64_t dropped = 0;  // lines not delivered: backlog full, sink failed, or too slow at the end
    std::string error;     // why lines were not delivered, if they were not
  };
  static constexpr int kPollMs = 20;  // how often a quiet record is looked at again

  // Starts following `events_path` from its start into `dest`; `name` is the destination as the
  // user gave it.
  static Result<std::unique_ptr<RecordFollower>> start(const std::string& events_path,
                                                       std::string name,
                                                       std::unique_ptr<RecordDestination> dest);
  ~RecordFollower();
  RecordFollower(const RecordFollower&) = delete;
  RecordFollower& operator=(const RecordFollower&) = delete;

  // After the record's last line: delivers what is left until `deadline`, then counts the rest as
  // dropped. Returns at the latest a few polls after `deadline`.
  Stats stop(std::chrono::steady_clock::time_point deadline);
  const std::string& name() const { return shared_->name; }

 private:
  struct Shared {
    std::string name;
    UniqueFd events;
    std::unique_ptr<RecordDestination> dest;
    std::atomic<bool> stopping{false};
    std::atomic<int64_t> deadline_ns{INT64_MAX};
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Stats stats;
  };
  explicit RecordFollower(std::shared_ptr<Shared> s);
  static void run(std::shared_ptr<Shared> s);

  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

int64_t monotonic_ns();

}  // namespace cordon::launcher
