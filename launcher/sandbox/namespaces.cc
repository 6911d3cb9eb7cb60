// Namespace creation (clone3) and the UTS / cgroup namespace steps.
#include "launcher/sandbox/namespaces.h"

#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "launcher/sandbox/container_fixes.h"
#include "launcher/sandbox/userns.h"

namespace cordon::launcher {

Result<ClonedChild> clone_sandbox(const std::function<void()>& child) {
  constexpr uint64_t kFlags =
      CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
  int pidfd = -1;
  clone_args args{};
  args.flags = kFlags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  long r = ::syscall(SYS_clone3, &args, sizeof args);
  if (r < 0 && errno == ENOSYS) {
    // Pre-5.3 kernels: plain clone, fork-like (no new stack), pidfd opened afterwards.
    r = ::syscall(SYS_clone, kFlags | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
    if (r > 0) {
      pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(r), 0));
    }
  }
  if (r < 0) {
    int e = errno;
    std::string hint;
    if ((e == EPERM || e == ENOSPC || e == EUSERS) && ::geteuid() != 0) {
      hint = userns_disabled_hint();
    } else if (e == EPERM) {
      hint =
          "namespaces are refused here (a container or seccomp policy?); run cordon on the "
          "host or in a container started with user namespaces allowed";
    } else if (e == ENOSPC || e == EUSERS) {
      hint = "too many namespaces: raise user.max_user_namespaces";
    }
    errno = e;
    return sys_error(
        "clone3(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWNET|CLONE_NEWIPC|"
        "CLONE_NEWUTS)",
        hint);
  }
  if (r == 0) {
    // Exception firewall: nothing unwinds out of the child side of a clone.
    try {
      child();
    } catch (...) {
    }
    ::_exit(125);
  }
  ClonedChild c;
  c.pid = static_cast<pid_t>(r);
  c.pidfd.reset(pidfd);
  return c;
}

Status enter_cgroup_namespace_in_child() {
  if (::unshare(CLONE_NEWCGROUP) != 0 && errno != EINVAL) {
    return sys_error("unshare(CLONE_NEWCGROUP)");
  }
  return {};
}

Status set_hostname_in_child(const std::string& hostname) {
  if (::sethostname(hostname.data(), hostname.size()) != 0) {
    return sys_error("sethostname(\"" + hostname + "\")", kHostnameSeccompFix);
  }
  return {};
}

}  // namespace cordon::launcher
