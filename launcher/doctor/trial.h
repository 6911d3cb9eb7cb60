// The part of a launch that `cordon doctor` tries for real in a child of its own: the namespaces
// cordon creates (one clone3, as a run makes them), the hostname, a fresh /proc, the capture
// ruleset and the cow overlay's upper layer in the state directory. The child and its namespaces
// end before doctor reports; the host keeps nothing of them.
#pragma once

#include <functional>
#include <string>

#include "base/result.h"

namespace cordon::launcher::doctor {

struct SandboxTrial {
  Status clone;     // clone3 with cordon's namespaces and the id maps written into them
  Status hostname;  // sethostname("cordon") in the new UTS namespace
  Status proc;      // procfs mounted in the new pid + mount namespaces
  Status capture;   // lo up and the capture ruleset installed through libnftables
  // The overlay superblock cow mode falls back to, with its upper layer in `scratch`: true
  // tried and taken, false not tried (no scratch, or a kernel that takes no layers by fd).
  Result<bool> overlay = false;
};

// Runs the trial. `scratch`: an empty directory on the state directory's filesystem for the
// overlay's lower/, upper/ and work/, or "" to skip that step. Bounded: a child that hangs is
// killed after a few seconds and its steps reported as such.
SandboxTrial run_sandbox_trial(const std::string& scratch);

// Runs `fn` in a forked child (for steps that change the process for good, like a seccomp
// filter) and returns its Status; bounded like the trial.
Status run_in_forked_child(const std::function<Status()>& fn);

}  // namespace cordon::launcher::doctor
