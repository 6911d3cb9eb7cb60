// The default seccomp filter (libseccomp), compiled once and cached as BPF.
#pragma once

#include <string>
#include <vector>

#include "policy/base/result.h"
#include "policy/policy.h"

namespace cordon::launcher {

// The syscalls denied with EPERM by default (names as libseccomp knows them).
const std::vector<std::string>& default_denied_syscalls();

// A compiled filter: raw BPF instructions ready for prctl(PR_SET_SECCOMP).
struct SeccompProgram {
  std::vector<unsigned char> bpf;  // struct sock_filter[]
};

// Parent side: default list + policy.deny - policy.allow, plus argument filters (raw/packet
// sockets, TIOCSTI/TIOCLINUX ioctls, clone/unshare with CLONE_NEWUSER). Cached under
// $XDG_CACHE_HOME/cordon (or /var/cache/cordon) keyed by a hash of the inputs and libseccomp's
// version. Unknown syscall names are an error naming the name.
Result<SeccompProgram> compile_seccomp(const policy::SeccompPolicy& p);

// Child side, after no_new_privs: loads the filter. Async-signal-safe.
Status install_seccomp(const SeccompProgram& prog);

}  // namespace cordon::launcher
