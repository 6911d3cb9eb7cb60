// RecordFollower: read what events.jsonl gained, offer its whole lines, pump the destination,
// publish the counts; SIGPIPE blocked so a closed reader is an error value, not cordon's death.
#include "launcher/sidecars/record_follower.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "launcher/session/line_splitter.h"
#include "launcher/session/session_store.h"

namespace cordon::launcher {

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Result<std::unique_ptr<RecordFollower>> RecordFollower::start(
    const std::string& events_path, std::string name, std::unique_ptr<RecordDestination> dest) {
  auto s = std::make_shared<Shared>();
  s->name = std::move(name);
  s->dest = std::move(dest);
  s->events.reset(::open(events_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!s->events) {
    return sys_error("open(\"" + events_path + "\", O_RDONLY) for " + s->name);
  }
  std::unique_ptr<RecordFollower> f(new RecordFollower(s));
  f->thread_ = std::thread(&RecordFollower::run, s);
  return f;
}

RecordFollower::RecordFollower(std::shared_ptr<Shared> s) : shared_(std::move(s)) {}

RecordFollower::~RecordFollower() {
  if (thread_.joinable()) {
    (void)stop(std::chrono::steady_clock::now());
  }
}

RecordFollower::Stats RecordFollower::stop(std::chrono::steady_clock::time_point deadline) {
  if (!thread_.joinable()) {
    std::lock_guard lock(shared_->mu);
    return shared_->stats;
  }
  const int64_t left_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              deadline - std::chrono::steady_clock::now())
                              .count();
  shared_->deadline_ns.store(monotonic_ns() + std::max<int64_t>(left_ns, 0));
  shared_->stopping.store(true);
  std::unique_lock lock(shared_->mu);
  bool done = shared_->cv.wait_until(lock, deadline + std::chrono::milliseconds(10 * kPollMs),
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

void RecordFollower::run(std::shared_ptr<Shared> s) {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);

  RecordDestination& dest = *s->dest;
  LineSplitter lines(store::kMaxLine);
  uint64_t refused = 0;  // lines the destination had no room for, or cut at kMaxLine
  char buf[64 << 10];
  bool at_eof_after_stop = false;
  auto publish = [&](bool last) {
    std::lock_guard lock(s->mu);
    // While running, what is pending may still go out; reported mid-way (a detached thread),
    // it did not.
    s->stats = {dest.sent(), refused + dest.lost() + dest.pending(), dest.error()};
    if (last) {
      s->done = true;
      s->cv.notify_all();
    }
  };

  for (;;) {
    const bool stopping = s->stopping.load();
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
        if (!complete || !dest.offer(line)) {
          ++refused;
        }
      });
    }
    if (stopping && !read_any) {
      at_eof_after_stop = true;  // session.end is written before stop(): nothing more comes
    }
    dest.pump(at_eof_after_stop, s->deadline_ns);
    publish(false);
    if (at_eof_after_stop && (dest.pending() == 0 || monotonic_ns() >= s->deadline_ns.load())) {
      break;
    }
    if (!read_any && dest.pending() == 0) {
      // Nothing to deliver and nothing new: wait a little for the record to grow.
      ::poll(nullptr, 0, kPollMs);
    }
  }
  publish(true);
}

}  // namespace cordon::launcher
