// Handing a daemon its fds only once it is no longer dumpable. An fd inherited across execve is
// exposed from the execve until the new program's first prctl(PR_SET_DUMPABLE, 0): long enough for
// another process of the daemon's uid to take it with pidfd_getfd. So the daemon is started with
// one socket only, makes itself undumpable, creates a fresh socket pair (which nobody else can
// hold), and sends one end back on the first socket; cordon checks the kernel's credentials of
// that message (the daemon's own pid) and sends the real fds over the fresh socket alone.
#pragma once

#include <sys/types.h>

#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon {

// cordon's end: `sock` must have SO_PASSCRED set before the daemon started. Waits up to
// `timeout_ms` for the daemon (`pid`) to send its fresh socket; messages from any other pid are
// dropped. Then sends `fds` over the fresh socket, in order.
Status hand_over_fds(int sock, pid_t pid, const std::vector<int>& fds, int timeout_ms);

// The daemon's end, after make_undumpable(): asks on `sock` and receives exactly `count` fds
// (close-on-exec), in the order cordon sent them.
Result<std::vector<UniqueFd>> receive_handed_fds(int sock, size_t count, int timeout_ms);

}  // namespace cordon
