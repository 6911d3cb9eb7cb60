// The pid 1 reaper: fork, then reap and forward until cordon ends.
#include "launcher/pid1.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "launcher/sandbox/init.h"

namespace cordon::launcher {
namespace {

void noop_handler(int) {}

[[noreturn]] void reap_and_forward(pid_t cordon, const sigset_t& set) {
  for (;;) {
    siginfo_t si{};
    int sig = ::sigwaitinfo(&set, &si);
    if (sig < 0) {
      continue;  // EINTR
    }
    if (sig != SIGCHLD) {
      ::kill(cordon, sig);
      continue;
    }
    int st = 0;
    pid_t w;
    while ((w = ::waitpid(-1, &st, WNOHANG)) > 0) {
      if (w != cordon) {
        continue;  // an orphan: reaped, nothing more
      }
      // Leaving ends the namespace: the kernel kills whatever is left in it.
      ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
  }
}

}  // namespace

void reap_as_pid1() {
  if (::getpid() != 1) {
    return;
  }
  sigset_t set, old;
  sigemptyset(&set);
  for (int sig : kForwardedSignals) {
    sigaddset(&set, sig);
  }
  sigaddset(&set, SIGCHLD);
  // Blocked before the fork, so that nothing sent in between is lost: the child unblocks.
  ::sigprocmask(SIG_BLOCK, &set, &old);
  struct sigaction sa {};
  sa.sa_handler = noop_handler;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwardedSignals) {
    ::sigaction(sig, &sa, nullptr);
  }
  ::sigaction(SIGCHLD, &sa, nullptr);
  pid_t child = ::fork();
  if (child < 0) {
    // Without the reaper cordon still runs; orphans then stay zombies until the container ends.
    std::fprintf(stderr, "cordon: fork of the pid 1 reaper failed: %s\n", std::strerror(errno));
  }
  if (child < 0) {
    // Still pid 1: the handlers stay, so that signals reach cordon's signalfd at all.
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return;
  }
  if (child == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig : kForwardedSignals) {
      ::sigaction(sig, &dfl, nullptr);
    }
    ::sigaction(SIGCHLD, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return;
  }
  ::prctl(PR_SET_NAME, "cordon-pid1", 0, 0, 0);
  reap_and_forward(child, set);
}

}  // namespace cordon::launcher
