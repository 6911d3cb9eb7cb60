// Background processes for the netproxy tests: the proxy under test and the upstream servers.
// Each is killed (SIGTERM, then SIGKILL) and reaped when the object goes away.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace cordon::testing {

class Child {
 public:
  // Starts argv with stdin and stdout as pipes; `inherit` maps our fds to fd numbers in the child.
  static Child start(const std::vector<std::string>& argv,
                     const std::vector<std::pair<int, int>>& inherit = {}) {
    Child c;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      return c;
    }
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      dup2(in[0], 0);
      dup2(out[1], 1);
      // Move inherited fds above the targets first so dup2 onto a target cannot clobber a source.
      std::vector<int> moved;
      for (auto& [from, to] : inherit) {
        moved.push_back(fcntl(from, F_DUPFD_CLOEXEC, 100));
      }
      for (size_t i = 0; i < inherit.size(); ++i) {
        dup2(moved[i], inherit[i].second);  // dup2 clears FD_CLOEXEC on the target
      }
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execvp(a[0], a.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c.pid_ = pid;
    c.stdin_ = in[1];
    c.stdout_ = out[0];
    return c;
  }

  Child() = default;
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(stdin_, o.stdin_);
    std::swap(stdout_, o.stdout_);
    return *this;
  }
  ~Child() { stop(); }

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // One line from the child's stdout, waiting at most `deadline`; "" on timeout or EOF.
  std::string read_line(std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
    std::string line;
    auto end = std::chrono::steady_clock::now() + deadline;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char ch;
      ssize_t n = read(stdout_, &ch, 1);
      if (n <= 0) return "";
      if (ch == '\n') return line;
      line.push_back(ch);
    }
  }

  // Waits for exit (bounded); returns the wait status or -1.
  int wait(std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
    auto end = std::chrono::steady_clock::now() + deadline;
    int st = -1;
    while (pid_ > 0 && std::chrono::steady_clock::now() < end) {
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return st;
      }
      usleep(2000);
    }
    return -1;
  }

  void stop() {
    if (stdin_ >= 0) {
      close(stdin_);
      stdin_ = -1;
    }
    if (pid_ > 0) {
      kill(-pid_, SIGTERM);
      kill(pid_, SIGTERM);
      if (wait(std::chrono::seconds(5)) == -1 && pid_ > 0) {
        kill(-pid_, SIGKILL);
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        pid_ = -1;
      }
    }
    if (stdout_ >= 0) {
      close(stdout_);
      stdout_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
};

}  // namespace cordon::testing
