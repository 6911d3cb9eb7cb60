// run_in_child: runs a lambda in a forked copy of the test process and collects what it returns
// and how the child ended. For code that must run in a process of its own: it installs seccomp
// filters, drops capabilities, sets rlimits or moves into cgroups.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace cordon::testing {

struct ChildResult {
  int status = -1;  // raw wait status
  std::string out;  // what `body` returned
  bool exited_ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  int signal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }
};

// The child is bounded by alarm(), so a hang fails the test instead of blocking it.
inline ChildResult run_in_child(const std::function<std::string()>& body, unsigned alarm_s = 20) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return {};
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    ::alarm(alarm_s);
    std::string s = body();
    (void)!::write(p[1], s.data(), s.size());
    ::_exit(0);
  }
  ::close(p[1]);
  ChildResult r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) {
    r.out.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

}  // namespace cordon::testing
