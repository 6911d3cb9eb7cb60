// How the daemon's worker threads wait for the next request on /dev/fuse: a blocking read(2), or
// a short bounded busy-poll by at most one thread before it (CORDON_FS_DEV_READ).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "policy/base/result.h"

namespace cordon::fusefs {

// A program that makes one request at a time (tar, git, a compiler) waits for each reply; on an
// idle second vCPU every request then pays the wake-up of a halted CPU (~137 us on these VMs, 8 us
// when the daemon already runs). With kSpin, one worker at a time polls /dev/fuse without
// sleeping for up to `spin_ns` before falling back to the blocking read, so a request that comes
// soon finds a thread already running. A spin starts only while requests keep coming (the last
// one was read less than `idle_ns` ago), so each quiet spell costs one window at most and an
// idle daemon sleeps in read(2), using no CPU.
struct DevReadConfig {
  enum class Mode { kBlock, kSpin };
  Mode mode = Mode::kBlock;
  int64_t spin_ns = 50'000;   // the longest one spin lasts
  int64_t idle_ns = 1'000'000;  // no spin if the last request is older than this (adaptive)
};

// Parses CORDON_FS_DEV_READ: "block", "spin" or "spin:US[:IDLE_US]" (microseconds). Empty/unset
// gives the default. An invalid value is an error naming it.
Result<DevReadConfig> parse_dev_read_config(const std::string& spec);

// The strategy in use (from the environment, read once; an invalid value warns on stderr and
// falls back to the default). With CORDON_FS_DEV_READ_STATS set, the counters below are printed
// on stderr at exit.
const DevReadConfig& dev_read_config();

// Reads one request from the /dev/fuse fd `fd` (a blocking fd shared by every worker) into buf,
// with read(2)'s result and errno (EINTR when a signal interrupts the spin, as it would the
// read). Never fails with EAGAIN (libfuse 3.14 ends the session on it): the spin only polls, and
// the read itself is always the blocking one.
ssize_t dev_read(int fd, void* buf, size_t len);

// Counters since start (for measuring the strategy): requests read, spins that found a request,
// spins that ran out and fell back to sleeping.
struct DevReadStats {
  uint64_t reads = 0, spin_hits = 0, spin_misses = 0;
};
DevReadStats dev_read_stats();

}  // namespace cordon::fusefs
