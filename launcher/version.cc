// `cordon --version`: the build and the kernel features, from the probes the launcher and
// cordon-fs use themselves (so the report cannot disagree with what a run does).
#include "launcher/version.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>

#include "fusefs/daemon.h"
#include "fusefs/kernel/passthrough.h"
#include "launcher/limits/limits.h"
#include "launcher/sandbox/landlock.h"
#include "launcher/sandbox/userns.h"

#ifndef CORDON_GIT_COMMIT
#define CORDON_GIT_COMMIT "unknown"
#endif

namespace cordon::launcher {
namespace {

std::string user_namespaces() {
  if (::access("/proc/self/ns/user", F_OK) != 0) {
    return "no (the kernel lacks CONFIG_USER_NS)";
  }
  std::string blocked = userns_restriction(read_userns_settings());
  if (!blocked.empty()) {
    return "yes; for ordinary users: refused (" + blocked + ")";
  }
  return "yes; for ordinary users: allowed";
}

std::string fuse_passthrough() {
  struct utsname u {};
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  if (major < 6 || (major == 6 && minor < 9)) {
    return "no (needs Linux 6.9+)";
  }
  std::string why_not = fusefs::passthrough::unusable_reason();
  return why_not.empty() ? "yes (Linux 6.9+; this user may register backing files)"
                         : "not for this user (" + why_not + ")";
}

std::string cgroups() {
  CgroupSupport c = cgroup_support();
  return c.hierarchy + "; limits through it: " + (c.usable ? "yes" : "no (" + c.brief + ")");
}

}  // namespace

std::string version_report() {
  struct utsname u {};
  ::uname(&u);
  int err = 0;
  int abi = landlock_abi(&err);
  std::string out = "cordon " CORDON_VERSION " (git " CORDON_GIT_COMMIT ")\n";
  out += std::string("kernel: Linux ") + u.release + "\n";
  out += "  user namespaces: " + user_namespaces() + "\n";
  out += "  FUSE passthrough: " + fuse_passthrough() + "\n";
  out += std::string("  FUSE over io_uring: ") +
         (fusefs::kernel_uring_enabled()
              ? "on (/sys/module/fuse/parameters/enable_uring=Y)"
              : "off (needs Linux 6.14+ and /sys/module/fuse/parameters/enable_uring=Y)") +
         "\n";
  out += "  Landlock: " + (abi > 0 ? "ABI " + std::to_string(abi) : "no") + "\n";
  out += "  cgroup: " + cgroups() + "\n";
  return out;
}

}  // namespace cordon::launcher
