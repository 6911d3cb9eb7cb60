// EventSink: one thread follows events.jsonl and writes its complete lines to the sink, with a
// bounded backlog, polls with deadlines, and SIGPIPE blocked so a closed reader is an error value.
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

#include "launcher/session/line_splitter.h"
#include "launcher/session/session_store.h"

namespace cordon::launcher {

namespace {

constexpr int kPollMs = 20;  // how often a quiet record is looked at again

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

Result<EventSinkTarget> open_event_sink(const std::string& spec) {
  EventSinkTarget t;
  t.name = spec;
  if (spec.empty()) {
    return make_error("empty", "give stderr, a file descriptor number or a path");
  }
  if (spec == "stderr" || all_digits(spec)) {
    int n = spec == "stderr" ? STDERR_FILENO : -1;
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

Result<std::unique_ptr<EventSink>> EventSink::start(const std::string& events_path,
                                                    EventSinkTarget target) {
  auto s = std::make_shared<Shared>();
  s->name = std::move(target.name);
  s->sink = std::move(target.fd);
  s->events.reset(::open(events_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!s->events) {
    return sys_error("open(\"" + events_path + "\", O_RDONLY) for --events-to");
  }
  std::unique_ptr<EventSink> sink(new EventSink(s));
  sink->thread_ = std::thread(&EventSink::run, s);
  return sink;
}

EventSink::EventSink(std::shared_ptr<Shared> s) : shared_(std::move(s)) {}

EventSink::~EventSink() {
  if (thread_.joinable()) {
    (void)stop(std::chrono::milliseconds(0));
  }
}

EventSink::Stats EventSink::stop(std::chrono::milliseconds grace) {
  if (!thread_.joinable()) {
    std::lock_guard lock(shared_->mu);
    return shared_->stats;
  }
  shared_->deadline_ns.store(now_ns() + grace.count() * 1'000'000);
  shared_->stopping.store(true);
  std::unique_lock lock(shared_->mu);
  bool done = shared_->cv.wait_for(lock, grace + std::chrono::milliseconds(10 * kPollMs),
                                   [&] { return shared_->done; });
  Stats out = shared_->stats;
  lock.unlock();
  if (done) {
    thread_.join();
  } else {
    // Stuck in one write to a sink that stopped reading (a pipe chunk is at most PIPE_BUF, so
    // only a stopped terminal or a full socket gets here). The thread owns nothing cordon needs
    // (its state is shared and it exits with the process), and waiting would hold the sandbox's
    // end hostage to the sink.
    thread_.detach();
    out.error = out.error.empty() ? "the sink stopped taking lines" : out.error;
  }
  return out;
}

void EventSink::run(std::shared_ptr<Shared> s) {
  // A reader that went away: EPIPE from write(), not a SIGPIPE that kills cordon.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);

  std::string pending;  // whole lines read, not yet written
  size_t written = 0;   // bytes of `pending` already written
  size_t lines_in_pending = 0;
  LineSplitter lines(store::kMaxLine);
  uint64_t sent = 0, dropped = 0;
  std::string error;
  char buf[64 << 10];
  bool at_eof_after_stop = false;

  for (;;) {
    const bool stopping = s->stopping.load();
    // 1. Read what the record gained: complete lines go to `pending`, or are dropped when the
    //    backlog is full or the sink has failed.
    bool read_any = false;
    for (int rounds = 0; rounds < 64; ++rounds) {
      ssize_t n = ::read(s->events.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        break;
      }
      read_any = true;
      lines.feed({buf, static_cast<size_t>(n)}, [&](std::string_view line, bool complete) {
        if (!complete || !error.empty() || pending.size() - written + line.size() >= kQueueBytes) {
          ++dropped;
        } else {
          pending.append(line);
          pending += '\n';
          ++lines_in_pending;
        }
      });
    }
    if (stopping && !read_any) {
      at_eof_after_stop = true;  // session.end is written before stop(): nothing more comes
    }
    // 2. Write: one chunk at a time, each after poll() said the sink has room.
    bool sink_ready = false;
    if (error.empty() && written < pending.size()) {
      int64_t left_ms = kPollMs;
      if (at_eof_after_stop) {
        left_ms = (s->deadline_ns.load() - now_ns()) / 1'000'000;
      }
      pollfd p{s->sink.get(), POLLOUT, 0};
      int r = left_ms > 0 ? ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, kPollMs)))
                          : ::poll(&p, 1, 0);
      if (r > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) && !(p.revents & POLLOUT)) {
        error = "the sink was closed";
      } else if (r > 0) {
        sink_ready = true;
      }
    }
    if (sink_ready) {
      size_t len = std::min<size_t>(pending.size() - written, PIPE_BUF);
      ssize_t n = ::write(s->sink.get(), pending.data() + written, len);
      if (n > 0) {
        // Count the lines whose last byte went out.
        std::string_view out(pending.data() + written, static_cast<size_t>(n));
        for (char c : out) {
          if (c == '\n') {
            ++sent;
            --lines_in_pending;
          }
        }
        written += static_cast<size_t>(n);
        if (written == pending.size() || written > (1 << 20)) {
          pending.erase(0, written);
          written = 0;
        }
      } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
        error = std::string("write: ") + std::strerror(errno);
      }
    }
    if (!error.empty() && lines_in_pending > 0) {
      dropped += lines_in_pending;
      lines_in_pending = 0;
      pending.clear();
      written = 0;
    }
    {
      std::lock_guard lock(s->mu);
      s->stats = {sent, dropped + lines_in_pending, error};
    }
    const bool drained = lines_in_pending == 0;
    if (at_eof_after_stop && (drained || now_ns() >= s->deadline_ns.load())) {
      break;
    }
    if (!read_any && drained && !sink_ready) {
      // Nothing to write and nothing new: wait a little for the record to grow.
      ::poll(nullptr, 0, kPollMs);
    }
  }
  std::lock_guard lock(s->mu);
  s->stats = {sent, dropped + lines_in_pending, error};
  s->done = true;
  s->cv.notify_all();
}

}  // namespace cordon::launcher
