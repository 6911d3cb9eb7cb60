// The program's last steps: setsid, terminal, rlimits, privileges, seccomp, close fds, verify,
// execvpe. Order matters: anything that needs an fd or a privilege runs before the step that
// takes it away.
#include "launcher/sandbox/exec.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "launcher/channel.h"
#include "launcher/run_options.h"
#include "launcher/sandbox/caps.h"
#include "launcher/sandbox/landlock.h"
#include "launcher/sandbox/pty.h"
#include "launcher/sandbox/userns_listener.h"

namespace cordon::launcher {
namespace {

// Signal state the program starts with: dispositions init installed back to default, the mask
// cordon was started with.
Status reset_signals(const sigset_t& mask) {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) {
      continue;
    }
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_DFL &&
        old.sa_handler != SIG_IGN) {
      ::sigaction(sig, &sa, nullptr);
    }
  }
  if (::sigprocmask(SIG_SETMASK, &mask, nullptr) != 0) {
    return sys_error("sigprocmask(SIG_SETMASK)");
  }
  return {};
}

// Closes every inherited fd above 2 except the report channel (moved to 3; CLOEXEC). A leaked fd
// would be a hole through every wall (a host directory, a socket, a pipe to a host process).
Status close_inherited_fds(int& report_fd) {
  if (report_fd != 3) {
    if (::dup3(report_fd, 3, O_CLOEXEC) != 3) {
      return sys_error("dup3(report channel, 3)");
    }
    report_fd = 3;
  }
  if (::close_range(4, ~0U, 0) != 0) {
    return sys_error("close_range(4, ~0U)");
  }
  return {};
}

// `cordon exec`: the caller's fds become 0-2 (the exec server holds them above 4, so no dup2 here
// overwrites another's source), and the caller's directory is used where the sandbox shows it.
Status take_callers_stdio(const ExecOverride& x) {
  for (int i = 0; i < 3; ++i) {
    if (::dup2(x.stdio[i], i) != i) {
      return sys_error("dup2(the caller's fd " + std::to_string(i) + ")");
    }
  }
  if (!x.cwd.empty()) {
    (void)!::chdir(x.cwd.c_str());  // not shown in the sandbox: init's, the session's directory
  }
  return {};
}

// A failure before exec: to cordon over report_fd, or for `cordon exec` on the caller's stderr.
void report_failure(const ProgramContext& ctx, int report_fd, MsgKind kind, int err,
                    const std::string& text) {
  if (ctx.exec == nullptr) {
    send_msg(report_fd, kind, err, text.c_str());
    return;
  }
  std::string line = "cordon exec: " + text;
  if (kind == MsgKind::ExecError) {
    line += ": " + std::string(std::strerror(err));
  }
  line += "\n";
  (void)!::write(2, line.data(), line.size());
}

Status prepare(const ProgramContext& ctx, int& report_fd) {
  TRY(reset_signals(ctx.host_mask));
  // Its own session: job control signals from the host terminal never reach it directly, and it
  // can take the pty as its controlling terminal.
  if (::setsid() < 0) {
    return sys_error("setsid()");
  }
  if (ctx.tty_slave >= 0) {
    TRY(attach_terminal_in_program(ctx.tty_slave));
  }
  if (ctx.exec != nullptr) {
    TRY(take_callers_stdio(*ctx.exec));
  }
  // Before the limits: RLIMIT_NOFILE refuses any new fd numbered at or above it, and what cordon
  // held when it cloned init (the record, its head, sidecar pipes) would push Landlock's rule fds
  // over a small --nofile.
  TRY(close_inherited_fds(report_fd));
  TRY(ctx.limits.apply_rlimits_in_child());
  TRY(drop_privileges());
  TRY(apply_landlock_in_program(ctx.plan.landlock));  // needs no_new_privs; before seccomp
  UniqueFd listener;
  TRY(install_seccomp(ctx.seccomp, &listener));
  UsernsCheck userns = ctx.plan.nested_sandbox ? UsernsCheck::Allowed : UsernsCheck::Direct;
  if (listener) {
    // Proved here, while only this process holds the listener; then cordon answers for good.
    TRY(probe_userns_listener(listener.get()));
    if (!send_msg(report_fd, MsgKind::UsernsListener, 0, nullptr, listener.get())) {
      return sys_error("sendmsg(seccomp listener to cordon)");
    }
    listener.reset();
    userns = UsernsCheck::Probed;
  }
  TRY(verify_sandbox_holds(userns));
  return {};
}

[[noreturn]] void program_main(const ProgramContext& ctx) {
  int report_fd = ctx.report_fd;
  Status s = prepare(ctx, report_fd);
  if (!s.ok()) {
    const Error& e = s.error();
    report_failure(ctx, report_fd, MsgKind::SetupError, e.code, e.to_string());
    ::_exit(kExitCordonFailed);
  }
  const auto& args = ctx.exec != nullptr ? ctx.exec->argv : ctx.plan.argv;
  const auto& env = ctx.exec != nullptr ? ctx.exec->envp : ctx.plan.envp;
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // execvpe searches the PATH of the *calling* environment: make it the sandbox's, so the lookup
  // happens with the sandbox's PATH inside the sandbox's root.
  environ = envp.data();
  ::execvpe(argv[0], argv.data(), envp.data());
  int err = errno;
  report_failure(ctx, report_fd, MsgKind::ExecError, err, argv[0]);
  ::_exit(err == ENOENT || err == ENOTDIR ? kExitNotFound : kExitCannotExec);
}

}  // namespace

Result<pid_t> spawn_program(const ProgramContext& ctx) {
  pid_t pid = ::fork();
  if (pid < 0) {
    return sys_error("fork() of the program in the sandbox");
  }
  if (pid == 0) {
    // Exception firewall: nothing may unwind out of a forked child.
    try {
      program_main(ctx);
    } catch (...) {
      send_msg(ctx.report_fd, MsgKind::SetupError, 0, "unexpected exception before exec");
    }
    ::_exit(kExitCordonFailed);
  }
  return pid;
}

}  // namespace cordon::launcher
