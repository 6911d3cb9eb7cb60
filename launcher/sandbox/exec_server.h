// pid 1 of a detached session (`cordon run --detach`): the exec server that starts each
// `cordon exec` program with the same steps as a run's program, reaps, and reports.
#pragma once

#include <signal.h>

#include "launcher/limits/limits.h"
#include "launcher/plan.h"
#include "launcher/sandbox/seccomp.h"

namespace cordon::launcher {

struct ExecServerContext {
  const LaunchPlan& plan;
  const Limits& limits;
  const SeccompProgram& seccomp;
  int report_fd;       // the report channel, kept only for the programs' setup (exec.h)
  int exec_fd;         // the server's end of the socketpair made before the clone
  sigset_t host_mask;  // restored for each program
};

// Never returns. In place of spawn_program + run_init: scrubs and settles like init, then serves
// requests from exec_fd (exec_wire.h: 8-byte id, an encoded ExecRequest, the caller's fds 0-2).
// For each, forks the program through spawn_program with an ExecOverride (the session's
// environment with the request's NAME=VALUE over it) and reports Started (pid) or Failed, then
// Exited with the raw wait status once reaped. A Signal request with a running program's id is
// passed to that program's process group. SIGTERM, SIGINT and SIGHUP go to every process
// of the sandbox (kill(-1)); after SIGTERM the server exits once no program is left. The end of
// exec_fd (the supervisor is gone) ends it at once, which ends the sandbox.
[[noreturn]] void run_exec_server(const ExecServerContext& c);

}  // namespace cordon::launcher
