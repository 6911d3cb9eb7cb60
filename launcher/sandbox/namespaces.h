// Creating the sandbox's namespaces in one clone3 (no extra exec hop), and the small
// per-namespace steps that need no file of their own (UTS hostname, cgroup namespace).
#pragma once

#include <sys/types.h>

#include <functional>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::launcher {

struct ClonedChild {
  pid_t pid = -1;
  UniqueFd pidfd;  // polled by the supervisor; signals through it can't hit a recycled pid
};

// clone3(CLONE_NEWUSER|NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS|CLONE_PIDFD) like fork: the child runs
// `child` (which must not return) on a copy of the caller's memory. EPERM/ENOSPC/EUSERS name the
// sysctl to change.
Result<ClonedChild> clone_sandbox(const std::function<void()>& child);

// Child side, after the parent moved it into its cgroup: a cgroup namespace rooted there, so
// /proc/self/cgroup shows "/" and nothing of the host's hierarchy. Skipped on kernels without
// cgroup namespaces.
Status enter_cgroup_namespace_in_child();

// Child side: the UTS namespace's hostname (process.hostname).
Status set_hostname_in_child(const std::string& hostname);

}  // namespace cordon::launcher
