// The extended attribute names a host path has itself (symlinks not followed).
#pragma once

#include <sys/xattr.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace cordon::testing {

// Each name once, in the kernel's order; ["ERROR <errno>"] when llistxattr(2) fails.
inline std::vector<std::string> xattr_names(const std::string& path) {
  char buf[4096];
  ssize_t n = ::llistxattr(path.c_str(), buf, sizeof buf);
  if (n < 0) {
    return {"ERROR " + std::to_string(errno)};
  }
  std::vector<std::string> out;
  for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(std::strlen(buf + i)) + 1) {
    out.emplace_back(buf + i);
  }
  return out;
}

}  // namespace cordon::testing
