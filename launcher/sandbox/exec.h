// The program's last steps before it becomes the program: session, terminal, limits, privileges,
// seccomp, fd hygiene, self-check, execve. Runs in the process init forked.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.h"
#include "launcher/limits/limits.h"
#include "launcher/plan.h"
#include "launcher/sandbox/seccomp.h"

namespace cordon::launcher {

// `cordon exec`: a program of a detached session, in place of the plan's. Everything else about
// it (limits, privileges, Landlock, seccomp, fd hygiene) is the plan's, through the same steps.
struct ExecOverride {
  std::vector<std::string> argv, envp;
  std::string cwd;              // tried first ("" = init's, the plan's cwd)
  int stdio[3] = {-1, -1, -1};  // the caller's fds 0-2, dup'ed over the program's
};

struct ProgramContext {
  const LaunchPlan& plan;
  const Limits& limits;
  const SeccompProgram& seccomp;
  int report_fd;       // CLOEXEC: closes itself on a successful exec
  int tty_slave;       // -1 when stdin is not a terminal (fds 0-2 pass through as they are)
  sigset_t host_mask;  // the signal mask cordon started with
  // Set: the program is this one, and cordon's failures go to its stderr (the caller's), not to
  // report_fd, whose reader expects one program per sandbox.
  const ExecOverride* exec = nullptr;
};

// Forks the program from init. The child never returns: it execs, or reports over report_fd
// (ExecError with errno, or SetupError) and exits 127/126/125.
Result<pid_t> spawn_program(const ProgramContext& ctx);

}  // namespace cordon::launcher
