// Process hardening shared by cordon's host-side processes (cordon, cordon-netproxy, cordon-fs):
// not dumpable, so no other process of the same uid can take their fds (pidfd_getfd), read their
// memory or ptrace them; and no fd of theirs reaches a program they run.
#pragma once

#include "base/result.h"

namespace cordon {

// PR_SET_DUMPABLE 0, verified. The kernel resets the flag on execve and on a change of ids, so
// call it after both (first thing in main, after any setuid).
Status make_undumpable();

// Marks every fd from `first` up close-on-exec (close_range(CLOSE_RANGE_CLOEXEC), or one fcntl per
// open fd on kernels before 5.11): the fds a daemon inherited by number lose FD_CLOEXEC at dup2,
// and must not reach the helpers it execs (fusermount3, ...).
Status cloexec_from(int first);

}  // namespace cordon
