// make_undumpable, cloexec_from.
#include "base/hardening.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace cordon {

Status make_undumpable() {
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return sys_error("prctl(PR_SET_DUMPABLE, 0)");
  }
  if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return make_error("prctl(PR_SET_DUMPABLE, 0) did not hold (PR_GET_DUMPABLE is not 0)");
  }
  return {};
}

Status cloexec_from(int first) {
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, CLOSE_RANGE_CLOEXEC) == 0) {
    return {};
  }
  if (errno != EINVAL && errno != ENOSYS) {
    return sys_error("close_range(" + std::to_string(first) + ", ~0, CLOSE_RANGE_CLOEXEC)");
  }
  // Before Linux 5.11: the open fds, listed first (fcntl on a directory fd being read is fine,
  // but collect so the listing's own fd is not in the way).
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) {
    return sys_error("opendir(\"/proc/self/fd\")");
  }
  std::vector<int> fds;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && end != e->d_name && fd >= first && fd != ::dirfd(d)) {
      fds.push_back(static_cast<int>(fd));
    }
  }
  ::closedir(d);
  for (int fd : fds) {
    int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
      return sys_error("fcntl(" + std::to_string(fd) + ", F_SETFD, FD_CLOEXEC)");
    }
  }
  return {};
}

}  // namespace cordon
