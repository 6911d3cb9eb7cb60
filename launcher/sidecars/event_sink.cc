// --events-to: opening the sink as the user named it, and writing whole lines to it as poll()
// allows.
#include "launcher/sidecars/event_sink.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

namespace cordon::launcher {

namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

Result<EventSinkTarget> open_event_sink(const std::string& spec) {
  EventSinkTarget t;
  t.name = spec;
  if (spec.empty()) {
    return make_error("empty", "give stdout, stderr, a file descriptor number or a path");
  }
  // "stdout" is what a container's log agent collects; the program's own output shares it, and
  // every record line is a JSON object with "kind", which is how an agent tells them apart.
  if (spec == "stdout" || spec == "stderr" || all_digits(spec)) {
    int n = spec == "stdout" ? STDOUT_FILENO : spec == "stderr" ? STDERR_FILENO : -1;
    if (n < 0) {
      if (spec.size() > 6) {
        return make_error("\"" + spec + "\": not a file descriptor number");
      }
      n = std::stoi(spec);
    }
    int flags = ::fcntl(n, F_GETFL);
    int fd_flags = ::fcntl(n, F_GETFD);
    if (flags < 0 || fd_flags < 0) {
      return sys_error("\"" + spec + "\": file descriptor " + std::to_string(n),
                       "open it for the command, e.g. `3>file` or `3> >(reader)`");
    }
    if ((flags & O_ACCMODE) == O_RDONLY) {
      return make_error(
          "\"" + spec + "\": file descriptor " + std::to_string(n) + " is open for reading only",
          "open it for writing, e.g. `3>file`");
    }
    if (n > STDERR_FILENO && (fd_flags & FD_CLOEXEC) != 0) {
      // Every descriptor cordon opens is close-on-exec; one given by the shell is not. Taking
      // one of cordon's own would steal, say, its session lock.
      return make_error("\"" + spec + "\": file descriptor " + std::to_string(n) +
                            " was not given to cordon (it is one of cordon's own)",
                        "open it for the command, e.g. `3>file`");
    }
    t.fd.reset(::fcntl(n, F_DUPFD_CLOEXEC, 3));
    if (!t.fd) {
      return sys_error("fcntl(" + std::to_string(n) + ", F_DUPFD_CLOEXEC)");
    }
    if (n > STDERR_FILENO) {
      ::close(n);  // the copy above is cordon's; the sandbox must not inherit the original
    }
    return t;
  }
  // O_NONBLOCK: a FIFO without a reader is refused now rather than blocking cordon's start.
  t.fd.reset(::open(spec.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600));
  if (!t.fd) {
    return sys_error("\"" + spec + "\": open(O_WRONLY|O_APPEND|O_CREAT)",
                     errno == ENXIO ? "a FIFO needs its reader started first"
                                    : "give a writable path, stderr or a file descriptor number");
  }
  return t;
}

namespace {

// A file descriptor as a destination: whole lines queued, written at most PIPE_BUF at a time so
// a pipe's reader never sees half a line interleaved with anything.
class FdDestination final : public RecordDestination {
 public:
  explicit FdDestination(UniqueFd fd) : fd_(std::move(fd)) {}

  bool offer(std::string_view line) override {
    if (!error_.empty() || pending_.size() - written_ + line.size() >= kEventSinkQueueBytes) {
      return false;
    }
    pending_.append(line);
    pending_ += '\n';
    ++lines_;
    return true;
  }

  void pump(bool final, const std::atomic<int64_t>& deadline_ns) override {
    if (!error_.empty() || written_ == pending_.size()) {
      return;
    }
    int64_t left_ms = RecordFollower::kPollMs;
    if (final) {
      left_ms = std::min<int64_t>((deadline_ns.load() - monotonic_ns()) / 1'000'000, left_ms);
    }
    pollfd p{fd_.get(), POLLOUT, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left_ms, 0)));
    if (r <= 0) {
      return;
    }
    if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) && !(p.revents & POLLOUT)) {
      fail("the sink was closed");
      return;
    }
    size_t len = std::min<size_t>(pending_.size() - written_, PIPE_BUF);
    ssize_t n = ::write(fd_.get(), pending_.data() + written_, len);
    if (n < 0) {
      if (errno != EINTR && errno != EAGAIN) {
        fail(std::string("write: ") + std::strerror(errno));
      }
      return;
    }
    // Count the lines whose last byte went out.
    for (char c : std::string_view(pending_.data() + written_, static_cast<size_t>(n))) {
      if (c == '\n') {
        ++sent_;
        --lines_;
      }
    }
    written_ += static_cast<size_t>(n);
    if (written_ == pending_.size() || written_ > (1 << 20)) {
      pending_.erase(0, written_);
      written_ = 0;
    }
  }

  uint64_t pending() const override { return lines_; }
  uint64_t sent() const override { return sent_; }
  uint64_t lost() const override { return lost_; }
  std::string error() const override { return error_; }

 private:
  void fail(std::string why) {
    error_ = std::move(why);
    lost_ += lines_;
    lines_ = 0;
    pending_.clear();
    written_ = 0;
  }

  UniqueFd fd_;
  std::string pending_;  // whole lines taken, not yet written
  size_t written_ = 0;   // bytes of pending_ already written
  uint64_t lines_ = 0;   // lines in pending_ not yet written whole
  uint64_t sent_ = 0, lost_ = 0;
  std::string error_;
};

}  // namespace

Result<std::unique_ptr<RecordFollower>> start_event_sink(const std::string& events_path,
                                                         EventSinkTarget target) {
  return RecordFollower::start(events_path, target.name,
                               std::make_unique<FdDestination>(std::move(target.fd)));
}

}  // namespace cordon::launcher
