// say() and fail(): the "cordon: " lines on stderr.
#include "launcher/diagnostics.h"

#include <unistd.h>

#include <cerrno>
#include <string>

#include "launcher/run_options.h"

namespace cordon::launcher {

void say(std::string_view msg) {
  std::string line = "cordon: ";
  line.append(msg);
  line += '\n';
  // stderr is unbuffered: one write keeps the line whole. A failed write has nowhere to go.
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    off += static_cast<size_t>(n);
  }
}

int fail(std::string_view msg) {
  say(msg);
  return kExitCordonFailed;
}

}  // namespace cordon::launcher
