// CgroupAttachWarmup: starts paying, on a thread, the RCU grace period that the first cgroup v1
// migration costs, so that it overlaps policy loading, seccomp, the session record and the
// cgroup setup instead of adding to start-up after clone.
#pragma once

#include <thread>

namespace cordon::launcher {

// Why it works: every write to a v1 cgroup.procs takes the global cgroup threadgroup rwsem for
// writing, and the first writer after a quiet spell waits a full RCU grace period in
// rcu_sync_enter() (~10 ms on these VMs). Writers that follow within a grace period of the last
// one do not wait again. The warm-up is a no-op migration: cordon's own pid written into the
// memory cgroup it is already in.
class CgroupAttachWarmup {
 public:
  // Starts the thread only as root on a host with a v1 memory hierarchy; otherwise a no-op.
  static CgroupAttachWarmup start();
  CgroupAttachWarmup() = default;
  CgroupAttachWarmup(CgroupAttachWarmup&&) = default;
  CgroupAttachWarmup& operator=(CgroupAttachWarmup&&) = default;
  ~CgroupAttachWarmup() { join(); }
  // Must be called before clone: the child of a raw clone must not inherit a second thread that
  // may hold libc's locks.
  void join() {
    if (thread_.joinable()) {
      thread_.join();
    }
  }

 private:
  std::thread thread_;
};

}  // namespace cordon::launcher
