// ChildProcess: one child of cordon's (a sidecar), held by a pidfd, stopped with grace, reaped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>

#include "base/unique_fd.h"

namespace cordon::launcher {

// Move-only. Signals go through the pidfd, so they cannot hit a recycled pid; destruction stops
// the child (SIGTERM, a grace period, SIGKILL) and reaps it, so none outlives its owner.
class ChildProcess {
 public:
  ChildProcess() = default;
  // Takes `pid`, a child of this process not yet reaped, and opens its pidfd (without one, on a
  // kernel that lacks pidfd_open, signals go to the pid, which stays ours until reaped).
  explicit ChildProcess(pid_t pid);
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;  // stops the child it held first
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { stop(); }

  pid_t pid() const { return pid_; }
  // Readable once the child has ended (for a caller's own poll); -1 without one.
  int pidfd() const { return pidfd_.get(); }
  // The raw wait status once it has ended (reaped here), std::nullopt while it runs.
  std::optional<int> exited();
  // Waits up to `timeout` for it to end, without reaping it. True if it ended.
  bool wait_for(std::chrono::milliseconds timeout);
  // Nothing once it has been reaped.
  void signal(int sig);
  // SIGTERM, up to `grace` for it to end, then SIGKILL; reaps. The wait status (-1 without a
  // child). Idempotent: later calls return the first one's status.
  int stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  std::optional<int> status_;
  bool stopped_ = false;  // stop() ran: never signal the pid again, reaped or not
};

}  // namespace cordon::launcher
