// ChildProcess: pidfd signals, a bounded wait, SIGTERM then SIGKILL, and the reap.
#include "launcher/child_process.h"

#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <utility>

namespace cordon::launcher {

ChildProcess::ChildProcess(pid_t pid)
    : pid_(pid), pidfd_(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))) {}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      pidfd_(std::move(o.pidfd_)),
      status_(std::exchange(o.status_, std::nullopt)),
      stopped_(std::exchange(o.stopped_, false)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    stop();
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::move(o.pidfd_);
    status_ = std::exchange(o.status_, std::nullopt);
    stopped_ = std::exchange(o.stopped_, false);
  }
  return *this;
}

std::optional<int> ChildProcess::exited() {
  if (!status_ && pid_ > 0 && !stopped_) {
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      status_ = st;
    }
  }
  return status_;
}

bool ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  if (pid_ <= 0 || status_ || stopped_) {
    return true;
  }
  if (!pidfd_) {
    return false;  // nothing to wait on: the caller's next step (exited(), SIGKILL) decides
  }
  // A pidfd reads ready once the child has ended, before it is reaped.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Rounded up and polled again until the deadline has passed: poll's whole milliseconds must not
  // cut the grace short.
  for (;;) {
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return false;
    }
    pollfd p{pidfd_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) {
      return true;
    }
    if (r < 0 && errno != EINTR) {
      return false;
    }
  }
}

void ChildProcess::signal(int sig) {
  if (pid_ <= 0 || status_ || stopped_) {
    return;
  }
  if (pidfd_) {
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0);
  } else {
    ::kill(pid_, sig);
  }
}

int ChildProcess::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0 || stopped_) {
    return status_.value_or(-1);
  }
  if (!exited()) {
    signal(SIGTERM);  // lets it finish its record (open connections, the mount)
    wait_for(grace);
  }
  if (!exited()) {
    signal(SIGKILL);
    int st = 0;
    pid_t r;
    do {
      r = ::waitpid(pid_, &st, 0);
    } while (r < 0 && errno == EINTR);
    if (r == pid_) {
      status_ = st;
    }
  }
  stopped_ = true;
  pidfd_.reset();
  return status_.value_or(-1);
}

}  // namespace cordon::launcher
