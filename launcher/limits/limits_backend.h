// Internal to limits*.cc / cgroup_v1.cc / cgroup_v2.cc / rlimits.cc: the cgroup backends behind
// Limits, and the precomputed rlimit table the child applies without allocating.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "launcher/limits/limits.h"

namespace cordon::launcher::limits_detail {

// What a backend enforces, taken from policy::ProcessPolicy (0 = unlimited).
struct LimitValues {
  uint64_t memory = 0;
  double cpus = 0;
  uint32_t pids = 0;
};

// One sandbox's cgroup(s). The destructor kills what is left and removes the directories.
class CgroupTree {
 public:
  virtual ~CgroupTree() = default;
  virtual Status add_process(pid_t pid) = 0;
  virtual Usage usage() const = 0;
  virtual void kill_all() const = 0;
  // The directories, for diagnostics and tests ("/sys/fs/cgroup/memory/.../cordon/<id>").
  virtual std::vector<std::string> paths() const = 0;
};

// Why a backend is not usable on this host (empty when it is usable).
struct Probe {
  bool usable = false;
  std::string why_not;  // in full, with paths
  std::string brief;    // a few words for describe(): "v1 needs root", "v2 has no memory,cpu"
};

// A mounted cgroup hierarchy as /proc/self/mountinfo describes it.
struct CgroupMount {
  std::string mount_point;               // "/sys/fs/cgroup/memory"
  std::string root;                      // the mount's root inside the hierarchy, usually "/"
  std::string fstype;                    // "cgroup" or "cgroup2"
  std::vector<std::string> controllers;  // v1: from the super options ("memory", "cpu", ...)
};
std::vector<CgroupMount> read_cgroup_mounts(const std::string& mountinfo_text);
// The calling process's cgroup in the hierarchy carrying `controller` (v1) or "" for v2 ("0::").
// Returns "" when not found.
std::string own_cgroup_path(const std::string& proc_cgroup_text, const std::string& controller);
// Joins a mount with the own cgroup path, honouring the mount's root (containers mount a subtree).
std::string cgroup_dir(const CgroupMount& m, const std::string& own_path);

Probe probe_cgroup_v2();
Result<std::unique_ptr<CgroupTree>> create_cgroup_v2(const LimitValues& v, const std::string& id);
Probe probe_cgroup_v1();
Result<std::unique_ptr<CgroupTree>> create_cgroup_v1(const LimitValues& v, const std::string& id);

// The rlimits the program's process sets before exec, precomputed in the parent so that the
// child only calls setrlimit(2) in a loop.
struct RlimitEntry {
  int resource = 0;
  rlim_t value = 0;
  const char* name = "";  // static string, for the child's error message
};
struct RlimitPlan {
  static constexpr int kMax = 8;
  RlimitEntry entries[kMax];
  int count = 0;
};
RlimitPlan plan_rlimits(const policy::ProcessPolicy& p, LimitBackend backend);
Status apply_rlimit_plan(const RlimitPlan& plan);

// Small file helpers shared by the cgroup backends.
Result<std::string> read_small_file(const std::string& path);
Status write_file(const std::string& path, const std::string& value);
std::string format_bytes(uint64_t n);  // "256M", "1G", "1536K", "123"
// The value of "key N" in a flat-keyed cgroup file (memory.events, pids.events, cpu.stat,
// memory.oom_control); 0 when absent.
uint64_t keyed_counter(const std::string& text, const std::string& key);

}  // namespace cordon::launcher::limits_detail
