// The detached session's init: serve exec requests, reap, report each program's end.
#include "launcher/sandbox/exec_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "launcher/exec_wire.h"
#include "launcher/run_options.h"
#include "launcher/sandbox/exec.h"
#include "launcher/sandbox/init.h"

namespace cordon::launcher {
namespace {

// More programs at once than any harness runs; process.pids bounds the sandbox anyway.
constexpr size_t kMaxRunning = 1024;

// Like run_init's start: init keeps no host fd (not the caller's terminal, not cordon's pipes),
// only the report channel (3) and the exec socket (4), both CLOEXEC. Both are first copied above
// the low numbers so that neither can be overwritten by the other's move.
void settle(int& report_fd, int& exec_fd) {
  int r = ::fcntl(report_fd, F_DUPFD_CLOEXEC, 10);
  int x = ::fcntl(exec_fd, F_DUPFD_CLOEXEC, 10);
  if (r < 0 || x < 0 || ::dup3(r, 3, O_CLOEXEC) != 3 || ::dup3(x, 4, O_CLOEXEC) != 4) {
    ::_exit(kExitCordonFailed);
  }
  report_fd = 3;
  exec_fd = 4;
  ::close_range(5, ~0U, 0);
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    for (int fd = 0; fd <= 2; ++fd) {
      ::dup2(null, fd);
    }
    if (null > 4) {
      ::close(null);
    }
  }
}

// The session's environment with the request's entries added. A name the session sets itself
// is never replaced: those are a credential's placeholder (the real value must not enter the
// sandbox, as cordon run's --env-set cannot put it there either), the decoys, and cordon's own
// (the proxy, the CA bundle, the shim). The error names the first such entry.
Result<std::vector<std::string>> merge_env(const std::vector<std::string>& base,
                                           const std::vector<std::string>& over) {
  std::vector<std::string> out = base;
  for (const auto& kv : over) {
    std::string name = kv.substr(0, kv.find('=') + 1);
    for (const auto& e : base) {
      if (e.compare(0, name.size(), name) == 0) {
        return make_error("-e " + name.substr(0, name.size() - 1) +
                          ": the session sets this variable itself (a credential's placeholder, "
                          "a decoy, or cordon's own) and cordon exec does not replace it");
      }
    }
    out.push_back(kv);
  }
  return out;
}

void report(int exec_fd, uint64_t id, ExecEvent ev, int32_t value, int32_t pid,
            std::string_view text = {}) {
  (void)send_packet(exec_fd, encode_report({id, ev, value, pid}, text));
}

class Server {
 public:
  explicit Server(const ExecServerContext& c) : c_(c) {}

  // One request from the supervisor. False when the supervisor is gone.
  bool serve_one() {
    auto p = recv_packet(c_.exec_fd, sizeof(uint64_t) + kMaxExecRequest, MSG_DONTWAIT);
    if (!p.ok()) {
      return p.error().code == EAGAIN;  // a refused message is dropped; EAGAIN: nothing yet
    }
    if (p->eof) {
      return false;
    }
    if (p->bytes.size() < sizeof(uint64_t)) {
      return true;
    }
    uint64_t id;
    std::memcpy(&id, p->bytes.data(), sizeof id);
    auto req = decode_request(std::string_view(p->bytes).substr(sizeof id));
    if (req.ok() && req->op == ControlOp::Signal) {
      for (const auto& [pid, rid] : running_) {
        if (rid == id) {
          ::kill(-pid, req->signal);  // its process group: the program made one (setsid)
          ::kill(pid, req->signal);
        }
      }
      return true;
    }
    if (!req.ok() || p->fds.size() != 3 || req->op != ControlOp::Exec) {
      report(c_.exec_fd, id, ExecEvent::Failed, kExitCordonFailed, 0, "malformed exec request");
      return true;
    }
    if (running_.size() >= kMaxRunning || terminating_) {
      report(c_.exec_fd, id, ExecEvent::Failed, kExitCordonFailed, 0,
             terminating_ ? "the session is ending" : "too many programs running at once");
      return true;
    }
    ExecOverride x;
    x.argv = std::move(req->argv);
    auto envp = merge_env(c_.plan.envp, req->env);
    if (!envp.ok()) {
      report(c_.exec_fd, id, ExecEvent::Failed, kExitCordonFailed, 0, envp.error().to_string());
      return true;
    }
    x.envp = std::move(*envp);
    x.cwd = std::move(req->cwd);
    for (int i = 0; i < 3; ++i) {
      x.stdio[i] = p->fds[static_cast<size_t>(i)].get();
    }
    ProgramContext pc{c_.plan, c_.limits, c_.seccomp, c_.report_fd, -1, c_.host_mask, &x};
    auto pid = spawn_program(pc);
    if (!pid.ok()) {
      report(c_.exec_fd, id, ExecEvent::Failed, kExitCordonFailed, 0, pid.error().to_string());
      return true;
    }
    running_[*pid] = id;
    report(c_.exec_fd, id, ExecEvent::Started, 0, *pid);
    return true;  // the caller's fds close here: only the program holds them now
  }

  void reap() {
    int st = 0;
    pid_t w;
    while ((w = ::waitpid(-1, &st, WNOHANG)) > 0) {
      auto it = running_.find(w);
      if (it != running_.end()) {
        report(c_.exec_fd, it->second, ExecEvent::Exited, st, w);
        running_.erase(it);
      }
    }
  }

  void on_signal(int sig) {
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
      ::kill(-1, sig);  // every process of the sandbox but init
    }
    if (sig == SIGTERM) {
      terminating_ = true;
    }
  }

  bool done() const { return terminating_ && running_.empty(); }

 private:
  const ExecServerContext& c_;
  std::map<pid_t, uint64_t> running_;
  bool terminating_ = false;
};

[[noreturn]] void serve(const ExecServerContext& c) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kForwardedSignals) {
    sigaddset(&set, sig);
  }
  sigaddset(&set, SIGCHLD);
  // prepare_init_signals() blocked them; a signalfd reads them beside the exec socket.
  int sfd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    ::_exit(kExitCordonFailed);
  }
  Server server(c);
  for (;;) {
    pollfd fds[2] = {{c.exec_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      continue;  // EINTR
    }
    if (fds[1].revents != 0) {
      signalfd_siginfo si{};
      while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        if (si.ssi_signo == SIGCHLD) {
          server.reap();
        } else {
          server.on_signal(static_cast<int>(si.ssi_signo));
        }
      }
      if (server.done()) {
        ::_exit(0);
      }
    }
    if (fds[0].revents != 0 && !server.serve_one()) {
      ::_exit(0);  // leaving ends the namespace: the kernel kills whatever is left in it
    }
  }
}

}  // namespace

void run_exec_server(const ExecServerContext& c) {
  ::prctl(PR_SET_NAME, "cordon-init", 0, 0, 0);
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  scrub_inherited_memory();
  ExecServerContext settled = c;
  settle(settled.report_fd, settled.exec_fd);
  // Exception firewall: init is the child side of the clone; nothing may unwind out of it.
  try {
    serve(settled);
  } catch (...) {
  }
  ::_exit(kExitCordonFailed);
}

}  // namespace cordon::launcher
