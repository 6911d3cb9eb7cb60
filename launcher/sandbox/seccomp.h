// The default seccomp filter (libseccomp), compiled once and cached as BPF.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "policy/policy.h"

namespace cordon::launcher {

// The syscalls denied with EPERM by default (names as libseccomp knows them).
const std::vector<std::string>& default_denied_syscalls();

// The syscalls process.nested_sandbox lifts from the default list besides the user-namespace
// filters: what a sandbox like bubblewrap needs to build its root in its own namespaces.
const std::vector<std::string>& nested_sandbox_syscalls();

// A compiled filter: raw BPF instructions ready for seccomp(SECCOMP_SET_MODE_FILTER).
struct SeccompProgram {
  std::vector<unsigned char> bpf;  // struct sock_filter[]
  // clone/unshare with CLONE_NEWUSER go to a user-space listener (SECCOMP_RET_USER_NOTIF), which
  // cordon's supervisor answers EPERM and records (userns_listener.h): installed with
  // SECCOMP_FILTER_FLAG_NEW_LISTENER. Off: they fail EPERM in the kernel, unrecorded.
  bool listener = false;
};

struct SeccompOptions {
  bool nested_sandbox = false;  // process.nested_sandbox: user/mount namespaces and mounts allowed
  bool notify_userns = false;   // refused CLONE_NEWUSER reported to a listener (see above)
};

// Parent side: default list + policy.deny - policy.allow, plus argument filters (raw/packet
// sockets, TIOCSTI/TIOCLINUX ioctls, clone/unshare with CLONE_NEWUSER unless nested). Cached
// under $XDG_CACHE_HOME/cordon (or /var/cache/cordon) keyed by a hash of the inputs and
// libseccomp's version. Unknown syscall names are an error naming the name.
Result<SeccompProgram> compile_seccomp(const policy::SeccompPolicy& p, SeccompOptions o = {});

// Child side, after no_new_privs: loads the filter. Async-signal-safe. With prog.listener the
// listener's fd goes to *listener (which must then be given).
Status install_seccomp(const SeccompProgram& prog, UniqueFd* listener = nullptr);

}  // namespace cordon::launcher
