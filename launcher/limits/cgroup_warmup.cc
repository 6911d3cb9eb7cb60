// The cgroup v1 attach warm-up (see cgroup_warmup.h for why).
#include "launcher/limits/cgroup_warmup.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "launcher/limits/limits_backend.h"

namespace cordon::launcher {

using limits_detail::cgroup_dir;
using limits_detail::own_cgroup_path;
using limits_detail::read_cgroup_mounts;
using limits_detail::read_small_file;

CgroupAttachWarmup CgroupAttachWarmup::start() {
  CgroupAttachWarmup w;
  if (::geteuid() != 0) {
    return w;  // rootless: no v1 cgroup is writable, so no migration to warm up
  }
  auto mountinfo = read_small_file("/proc/self/mountinfo");
  auto self = read_small_file("/proc/self/cgroup");
  if (!mountinfo.ok() || !self.ok()) {
    return w;
  }
  for (const auto& m : read_cgroup_mounts(*mountinfo)) {
    bool memory = false;
    for (const auto& c : m.controllers) {
      memory = memory || c == "memory";
    }
    if (m.fstype != "cgroup" || !memory) {
      continue;
    }
    std::string own = own_cgroup_path(*self, "memory");
    if (own.empty()) {
      return w;
    }
    std::string procs = cgroup_dir(m, own) + "/cgroup.procs";
    std::string pid = std::to_string(::getpid());
    w.thread_ = std::thread([procs, pid] {
      // Best effort: a failure only means start-up does not get faster. Limits::add_process
      // does the real migration and reports its own errors.
      int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0) {
        (void)!::write(fd, pid.data(), pid.size());
        ::close(fd);
      }
    });
    return w;
  }
  return w;
}

}  // namespace cordon::launcher
