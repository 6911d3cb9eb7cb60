// diff(1) in a child with the two files as fd 3 and 4, its output read back through a pipe.
#include "launcher/session/unified_diff.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fusefs/safe_io.h"

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

namespace {

UniqueFd open_side(int root_fd, const std::string& rel) {
  return UniqueFd(fusefs::open_beneath(root_fd, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
}

bool looks_binary(int fd) {
  char buf[8000];
  ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  return n > 0 && std::memchr(buf, '\0', static_cast<size_t>(n)) != nullptr;
}

}  // namespace

std::optional<DiffSides> open_diff_sides(const fusefs::Change& ch, int lower_fd, int upper_fd) {
  DiffSides s;
  if (ch.kind != fusefs::ChangeKind::Added) {
    s.old_side = open_side(lower_fd, ch.path);
    if (!s.old_side) {
      return std::nullopt;
    }
  }
  if (ch.kind != fusefs::ChangeKind::Deleted) {
    s.new_side = open_side(upper_fd, ch.path);
    if (!s.new_side) {
      return std::nullopt;
    }
  }
  s.binary = (s.old_side && looks_binary(s.old_side.get())) ||
             (s.new_side && looks_binary(s.new_side.get()));
  return s;
}

}  // namespace cordon::launcher
