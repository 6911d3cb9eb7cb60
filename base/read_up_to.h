// read_up_to: a whole small file (or pipe) from an fd, bounded.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>

namespace cordon {

// Reads `fd` to its end, but at most `max` bytes (EINTR retried); nullopt on a read error, with
// errno as the read left it. A caller that must know whether more followed asks for max + 1.
inline std::optional<std::string> read_up_to(int fd, size_t max) {
  std::string out;
  char buf[8192];
  while (out.size() < max) {
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, max - out.size()));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return std::nullopt;
    }
    if (n == 0) {
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace cordon
