// The child side of the clone, start to finish: the whole setup order in one place.
#pragma once

#include <signal.h>

#include "launcher/limits/limits.h"
#include "launcher/plan.h"
#include "launcher/sandbox/seccomp.h"

namespace cordon::launcher {

struct ContainContext {
  const LaunchPlan& plan;
  const Limits& limits;
  const SeccompProgram& seccomp;
  int report_fd;       // child end of the report channel
  sigset_t host_mask;  // the mask cordon started with, restored for the program
  // `cordon run --detach`: the exec server's end of its socketpair; init then serves `cordon
  // exec` requests (exec_server.h) instead of starting the plan's program. -1 = a plain run.
  int exec_fd = -1;
};

// Never returns: becomes init, or reports a SetupError and exits 125.
[[noreturn]] void contain(const ContainContext& c);

}  // namespace cordon::launcher
