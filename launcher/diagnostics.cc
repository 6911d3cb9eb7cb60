// say(), fail() and their subcommand forms: the "cordon: " lines on stderr.
#include "launcher/diagnostics.h"

#include <unistd.h>

#include <cerrno>
#include <ostream>
#include <string>

#include "launcher/run_options.h"

namespace cordon::launcher {

namespace {

// "cordon: MSG\n", or "cordon COMMAND: MSG\n" when `command` is not empty.
std::string line_of(std::string_view command, std::string_view msg) {
  std::string line = "cordon";
  if (!command.empty()) {
    line += ' ';
    line.append(command);
  }
  line += ": ";
  line.append(msg);
  line += '\n';
  return line;
}

// stderr is unbuffered: one write keeps the line whole. A failed write has nowhere to go.
void write_line(const std::string& line) {
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

}  // namespace

void say(std::string_view msg) { write_line(line_of({}, msg)); }

void say_in(std::string_view command, std::string_view msg) { write_line(line_of(command, msg)); }

void say(std::ostream& err, std::string_view msg) { err << line_of({}, msg); }

void say_in(std::ostream& err, std::string_view command, std::string_view msg) {
  err << line_of(command, msg);
}

int fail_in(std::string_view command, std::string_view msg) {
  say_in(command, msg);
  return kExitCordonFailed;
}

int fail(std::string_view msg) {
  say(msg);
  return kExitCordonFailed;
}

}  // namespace cordon::launcher
