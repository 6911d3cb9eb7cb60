// Runs a real program for a test: stdin fed from a string, stdout/stderr captured, a hard deadline
// (the child's process group is SIGKILLed past it), optionally as another uid.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace cordon::testing {

struct RunSpec {
  std::string stdin_data;
  std::optional<std::vector<std::string>> env;  // full environment; default: inherit
  std::chrono::milliseconds deadline{std::chrono::seconds(60)};
  std::optional<uid_t> uid;  // drop to this uid/gid (and no supplementary groups) before exec
  std::optional<gid_t> gid;
  std::string cwd;
};

struct RunResult {
  int status = -1;         // raw wait status
  bool timed_out = false;  // killed by the deadline
  std::string out, err;
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  int term_signal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }
};

inline RunResult run_program(const std::vector<std::string>& argv, const RunSpec& spec = {}) {
  RunResult r;
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return r;
  }
  std::vector<std::string> envs = spec.env.value_or(std::vector<std::string>{});
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) _exit(120);
    if (spec.gid && (setgroups(0, nullptr) != 0 || setgid(*spec.gid) != 0)) _exit(121);
    if (spec.uid && setuid(*spec.uid) != 0) _exit(122);
    if (spec.env) {
      execvpe(cargv[0], cargv.data(), cenv.data());
    } else {
      execvp(cargv[0], cargv.data());
    }
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  // Feed stdin in full first (tests pass small inputs), then close it so the child sees EOF.
  signal(SIGPIPE, SIG_IGN);
  size_t off = 0;
  while (off < spec.stdin_data.size()) {
    ssize_t n = write(in[1], spec.stdin_data.data() + off, spec.stdin_data.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(in[1]);
  auto deadline = std::chrono::steady_clock::now() + spec.deadline;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t k = read(fds[i].fd, buf, sizeof buf);
      if (k <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(k));
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  // Pipes closed: the child is done or we killed it; bound the wait as well.
  for (;;) {
    pid_t w = waitpid(pid, &r.status, r.timed_out ? 0 : WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &r.status, 0);
      break;
    }
    usleep(1000);
  }
  return r;
}

}  // namespace cordon::testing
