// The program's last steps before it becomes the program: session, terminal, limits, privileges,
// seccomp, fd hygiene, self-check, execve. Runs in the process init forked.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include "base/result.h"
#include "launcher/limits/limits.h"
#include "launcher/plan.h"
#include "launcher/sandbox/seccomp.h"

namespace cordon::launcher {

struct ProgramContext {
  const LaunchPlan& plan;
  const Limits& limits;
  const SeccompProgram& seccomp;
  int report_fd;       // CLOEXEC: closes itself on a successful exec
  int tty_slave;       // -1 when stdin is not a terminal (fds 0-2 pass through as they are)
  sigset_t host_mask;  // the signal mask cordon started with
};

// Forks the program from init. The child never returns: it execs, or reports over report_fd
// (ExecError with errno, or SetupError) and exits 127/126/125.
Result<pid_t> spawn_program(const ProgramContext& ctx);

}  // namespace cordon::launcher
