// The /dev/fuse read strategy: blocking read(2), or one bounded busy-poller ahead of it.
//
// Why poll(2) with a zero timeout and not a non-blocking read: the fd is shared by all of
// libfuse's workers, and O_NONBLOCK on it would reach libfuse's own reads too; libfuse 3.14 ends
// the session when a read fails with EAGAIN. poll() leaves the fd blocking. A request the poll
// saw may still be taken by a worker the kernel woke at the same time; the poller's read then
// just blocks like any other worker's, which is what it would have done anyway.
#include "fusefs/dev_read.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cordon::fusefs {

namespace {

int64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool parse_us(const std::string& s, int64_t* ns) {
  if (s.empty() || s.size() > 7 || s.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *ns = std::stoll(s) * 1000;
  return true;
}

// Only one worker spins: a second would burn the other vCPU for nothing (requests come one at a
// time from a program waiting on each reply).
std::atomic<bool> g_spinning{false};
// When the last request was read (any worker): the spin is worth it only while requests come.
std::atomic<int64_t> g_last_request_ns{0};
std::atomic<uint64_t> g_reads{0}, g_spin_hits{0}, g_spin_misses{0};

// Releases the spinner slot however the spin ends: libfuse cancels its workers at exit, and
// glibc's cancellation unwinds through this frame.
struct SpinSlot {
  ~SpinSlot() { g_spinning.store(false, std::memory_order_release); }
};

enum class Spin { kReady, kTimedOut, kInterrupted };

// Polls until a request (or an error such as an unmount, which the read then reports) is ready,
// for at most cfg.spin_ns. The read that follows is the blocking one.
Spin spin_for_request(int fd, const DevReadConfig& cfg) {
  SpinSlot slot;
  const int64_t deadline = now_ns() + cfg.spin_ns;
  do {
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, 0);
    if (rc > 0) {
      return Spin::kReady;
    }
    if (rc < 0 && errno == EINTR) {
      // A signal (SIGTERM: libfuse's handler has just ended the session) must reach libfuse's
      // loop as read(2)'s EINTR would, or this worker would block in the read below and never
      // see that the session ended.
      return Spin::kInterrupted;
    }
    if (rc < 0) {
      return Spin::kReady;  // the read reports the error in its own terms
    }
  } while (now_ns() < deadline);
  return Spin::kTimedOut;
}

}  // namespace

Result<DevReadConfig> parse_dev_read_config(const std::string& spec) {
  DevReadConfig cfg;
  if (spec.empty() || spec == "block") {
    return cfg;
  }
  auto bad = [&spec]() {
    return make_error("CORDON_FS_DEV_READ=\"" + spec + "\" is not a /dev/fuse read strategy",
                      "use block, spin, or spin:US[:IDLE_US] (microseconds, up to 7 digits)");
  };
  if (spec.rfind("spin", 0) != 0) {
    return bad();
  }
  cfg.mode = DevReadConfig::Mode::kSpin;
  std::string rest = spec.substr(4);
  if (rest.empty()) {
    return cfg;
  }
  if (rest[0] != ':') {
    return bad();
  }
  rest = rest.substr(1);
  size_t colon = rest.find(':');
  if (!parse_us(rest.substr(0, colon), &cfg.spin_ns)) {
    return bad();
  }
  if (colon != std::string::npos && !parse_us(rest.substr(colon + 1), &cfg.idle_ns)) {
    return bad();
  }
  if (cfg.spin_ns == 0) {
    cfg.mode = DevReadConfig::Mode::kBlock;
  }
  return cfg;
}

const DevReadConfig& dev_read_config() {
  static const DevReadConfig cfg = [] {
    if (std::getenv("CORDON_FS_DEV_READ_STATS") != nullptr) {
      std::atexit([] {
        DevReadStats s = dev_read_stats();
        std::fprintf(stderr, "cordon-fs: /dev/fuse reads %llu, spin hits %llu, spin misses %llu\n",
                     static_cast<unsigned long long>(s.reads),
                     static_cast<unsigned long long>(s.spin_hits),
                     static_cast<unsigned long long>(s.spin_misses));
      });
    }
    const char* env = std::getenv("CORDON_FS_DEV_READ");
    auto parsed = parse_dev_read_config(env != nullptr ? env : "");
    if (!parsed.ok()) {
      std::fprintf(stderr, "cordon-fs: warning: %s; reading /dev/fuse the default way\n",
                   parsed.error().to_string().c_str());
      return DevReadConfig{};
    }
    return parsed.value();
  }();
  return cfg;
}

ssize_t dev_read(int fd, void* buf, size_t len) {
  const DevReadConfig& cfg = dev_read_config();
  if (cfg.mode == DevReadConfig::Mode::kSpin &&
      now_ns() - g_last_request_ns.load(std::memory_order_relaxed) <= cfg.idle_ns &&
      !g_spinning.exchange(true, std::memory_order_acquire)) {
    switch (spin_for_request(fd, cfg)) {
      case Spin::kReady:
        g_spin_hits.fetch_add(1, std::memory_order_relaxed);
        break;
      case Spin::kTimedOut:
        g_spin_misses.fetch_add(1, std::memory_order_relaxed);
        break;
      case Spin::kInterrupted:
        errno = EINTR;
        return -1;
    }
  }
  ssize_t n = ::read(fd, buf, len);
  if (n > 0) {
    int saved = errno;
    g_last_request_ns.store(now_ns(), std::memory_order_relaxed);
    g_reads.fetch_add(1, std::memory_order_relaxed);
    errno = saved;
  }
  return n;
}

DevReadStats dev_read_stats() {
  return {g_reads.load(), g_spin_hits.load(), g_spin_misses.load()};
}

}  // namespace cordon::fusefs
