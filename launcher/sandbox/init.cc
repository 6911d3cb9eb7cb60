// pid 1 of the sandbox: reaper and signal forwarder.
#include "launcher/sandbox/init.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "launcher/channel.h"

namespace cordon::launcher {
namespace {

void noop_handler(int) {}

sigset_t init_set() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : kForwardedSignals) {
    sigaddset(&s, sig);
  }
  sigaddset(&s, SIGCHLD);
  return s;
}

int shell_status(int st) {
  if (WIFEXITED(st)) {
    return WEXITSTATUS(st);
  }
  if (WIFSIGNALED(st)) {
    return 128 + WTERMSIG(st);
  }
  return 125;
}

}  // namespace

void scrub_inherited_memory() {
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return;
  }
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) {
    return;
  }
  buf[n] = '\0';
  char* p = std::strrchr(buf, ')');  // comm may hold spaces; fields restart after it
  if (p == nullptr) {
    return;
  }
  // After ')' comes field 3; arg_start is field 48 ... env_end field 51.
  unsigned long long v[52] = {};
  int field = 2;
  for (char* tok = std::strtok(p + 1, " "); tok != nullptr && field < 51;
       tok = std::strtok(nullptr, " ")) {
    ++field;
    v[field] = std::strtoull(tok, nullptr, 10);
  }
  if (field < 51) {
    return;
  }
  auto wipe = [](unsigned long long a, unsigned long long b, const char* repl) {
    if (a == 0 || b <= a || b - a > (1u << 24)) {
      return;
    }
    char* base = reinterpret_cast<char*>(a);
    std::memset(base, 0, b - a);
    if (repl != nullptr && std::strlen(repl) < b - a) {
      std::memcpy(base, repl, std::strlen(repl));
    }
  };
  wipe(v[48], v[49], "cordon-init");
  wipe(v[50], v[51], nullptr);
}

Status prepare_init_signals() {
  sigset_t s = init_set();
  if (::sigprocmask(SIG_BLOCK, &s, nullptr) != 0) {
    return sys_error("sigprocmask(SIG_BLOCK) in init");
  }
  struct sigaction sa {};
  sa.sa_handler = noop_handler;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwardedSignals) {
    if (::sigaction(sig, &sa, nullptr) != 0) {
      return sys_error("sigaction(" + std::to_string(sig) + ") in init");
    }
  }
  return {};
}

void run_init(int report_fd, pid_t program) {
  ::prctl(PR_SET_NAME, "cordon-init", 0, 0, 0);
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  scrub_inherited_memory();
  // Init keeps no host fd: not the terminal, not cordon's pipes; only the report channel.
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    for (int fd = 0; fd <= 2; ++fd) {
      ::dup2(null, fd);
    }
  }
  if (report_fd != 3) {
    report_fd = ::dup3(report_fd, 3, O_CLOEXEC) == 3 ? 3 : report_fd;
  }
  ::close_range(static_cast<unsigned>(report_fd) + 1, ~0U, 0);
  if (report_fd > 3) {
    ::close_range(3, static_cast<unsigned>(report_fd) - 1, 0);
  }

  sigset_t set = init_set();
  for (;;) {
    siginfo_t si{};
    int sig = ::sigwaitinfo(&set, &si);
    if (sig < 0) {
      continue;  // EINTR
    }
    if (sig == SIGCHLD) {
      int st = 0;
      pid_t w;
      while ((w = ::waitpid(-1, &st, WNOHANG)) > 0) {
        if (w == program) {
          send_msg(report_fd, MsgKind::ProgramExit, st);
          // Exiting tears the namespace down: the kernel SIGKILLs every process left in it.
          ::_exit(shell_status(st));
        }
      }
      continue;
    }
    if (sig == SIGTERM && si.si_code == SI_QUEUE && si.si_value.sival_int == kTerminateTree) {
      ::kill(-1, SIGTERM);  // every process in the namespace but init itself
      continue;
    }
    ::kill(program, sig);
  }
}

}  // namespace cordon::launcher
