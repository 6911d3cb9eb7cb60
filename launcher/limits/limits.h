// Resource limits for the sandbox: cgroup v2 (delegated), cgroup v1 (root on v1/hybrid hosts) or
// rlimits, whichever is available, in that order; plus nofile/core/fsize rlimits always.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"

namespace cordon::launcher {

enum class LimitBackend { CgroupV2, CgroupV1, Rlimits };

struct Usage {
  uint64_t peak_memory = 0;          // bytes; 0 when unknown
  std::chrono::microseconds cpu{0};  // user+system of the whole tree
  bool oom_killed = false;           // the memory limit killed something
  bool pids_limit_hit = false;       // a fork was refused by the pids limit
};

// RAII: owns the cgroup directories it created and removes them (after killing what is left) on
// destruction. Move-only.
class Limits {
 public:
  // Parent side, before clone. Chooses the backend and creates/configures cgroups if any.
  // Fails (never silently weaker) if a cgroup was available but could not be configured.
  static Result<Limits> create(const policy::ProcessPolicy& p, const std::string& session_id);
  Limits(Limits&&) noexcept;
  Limits& operator=(Limits&&) noexcept;
  Limits(const Limits&) = delete;
  Limits& operator=(const Limits&) = delete;
  ~Limits();

  // Parent side, after clone and before the child is released: moves `pid` into the cgroups.
  Status add_process(pid_t pid);
  // Child side (the program, just before exec): setrlimit for nofile, core=0, fsize, and when the
  // backend is Rlimits also RLIMIT_DATA (memory), RLIMIT_NPROC (pids) and RLIMIT_CPU is NOT used
  // (cpus is a rate, not a total). Only async-signal-safe calls.
  Status apply_rlimits_in_child() const;
  // One line for the user: "limits: cgroup v1 (memory 1G, cpus 1.0, pids 512)" or
  // "limits: rlimits only (memory 1G of private writable memory per process (RLIMIT_DATA), ...)".
  std::string describe() const;
  LimitBackend backend() const;
  // Read after the program ended (cgroups: counters; rlimits: zeros apart from cpu).
  Usage usage() const;
  // SIGKILLs every process left in the cgroups (no-op for rlimits).
  void kill_all() const;
  // The cgroup directories this sandbox owns (empty for rlimits), for diagnostics and tests.
  std::vector<std::string> cgroup_paths() const;

 private:
  Limits() = default;
  struct State;
  State* s_ = nullptr;  // owned; pimpl keeps cgroup details out of this header
};

// The host's cgroup hierarchy and whether a sandbox's limits can go through it, from the probes
// Limits::create uses (for cordon --version and cordon doctor).
struct CgroupSupport {
  std::string hierarchy;  // "v2", "v1", "hybrid (v1 and v2)" or "none mounted"
  bool usable = false;    // Limits::create would take a cgroup backend
  std::string why_not;    // in full, with paths; empty when usable
  std::string brief;      // a few words: "v2 has no memory,cpu"
};
CgroupSupport cgroup_support();

}  // namespace cordon::launcher
