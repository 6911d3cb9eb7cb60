// Host-side scans of /proc, for tests that check what a sandbox left running. The sandbox's
// processes are visible from the host, each with its full command line.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace cordon::testing {

// The contents of /proc/PID/<file> ("" if gone). read(2), not an ifstream: a process that exits
// between the open and the read makes the read fail with ESRCH, which libstdc++'s filebuf turns
// into an exception whatever the stream's exception mask.
inline std::string proc_file(pid_t pid, const char* file) {
  std::string out;
  const std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return out;
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;  // end, or the process is gone (ESRCH): what was read so far
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Pids of every host process whose command line (argv joined and ended by NULs) satisfies `match`.
inline std::vector<pid_t> host_pids_where(
    const std::function<bool(pid_t, const std::string& cmdline)>& match) {
  std::vector<pid_t> found;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) {
    return found;
  }
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') {
      continue;
    }
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (match(pid, proc_file(pid, "cmdline"))) {
      found.push_back(pid);
    }
  }
  ::closedir(d);
  return found;
}

// Pids whose command line contains `token` anywhere.
inline std::vector<pid_t> host_pids_containing(const std::string& token) {
  return host_pids_where(
      [&](pid_t, const std::string& cmd) { return cmd.find(token) != std::string::npos; });
}

}  // namespace cordon::testing
