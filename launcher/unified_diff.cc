// diff(1) in a child with the two files as fd 3 and 4, its output read back through a pipe.
#include "launcher/unified_diff.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace cordon::launcher {

bool unified_diff_lines(int old_fd, int new_fd, const std::function<void(std::string_view)>& line) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return false;
  }
  std::vector<std::string> args = {"diff", "-u", "/dev/fd/3", "/dev/fd/4"};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::dup2(out[1], 1) < 0 || ::dup2(old_fd, 3) < 0 || ::dup2(new_fd, 4) < 0) {
      ::_exit(126);
    }
    ::execvp("diff", argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  FILE* f = ::fdopen(out[0], "r");
  if (f == nullptr) {
    ::close(out[0]);
  } else {
    char* buf = nullptr;
    size_t cap = 0;
    ssize_t n;
    int skipped = 0;
    while ((n = ::getline(&buf, &cap, f)) > 0) {
      if (skipped < 2) {
        ++skipped;  // diff(1)'s "---" and "+++" lines name /dev/fd/N
        continue;
      }
      std::string_view text(buf, static_cast<size_t>(n));
      if (!text.empty() && text.back() == '\n') {
        text.remove_suffix(1);
      }
      line(text);
    }
    std::free(buf);
    std::fclose(f);
  }
  int st = 0;
  if (pid > 0) {
    ::waitpid(pid, &st, 0);
  }
  return pid > 0 && f != nullptr && !(WIFEXITED(st) && WEXITSTATUS(st) > 1);
}

}  // namespace cordon::launcher
