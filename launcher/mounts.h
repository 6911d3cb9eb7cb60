// The sandbox's root: a tmpfs composed from the plan's mount list, then pivot_root into it.
#pragma once

#include "launcher/plan.h"
#include "policy/base/result.h"

namespace cordon::launcher {

// Child side, in the new user + mount + pid namespaces, after the id switch. Replays
// plan.mounts under a fresh tmpfs root, makes the root read-only, pivots into it, detaches the
// host's tree and chdirs to plan.cwd. Any failure aborts with the syscall, its arguments, errno
// and a fix: a half-built root is never used.
Status compose_root_in_child(const LaunchPlan& plan);

}  // namespace cordon::launcher
