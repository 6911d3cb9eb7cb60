// One function per requirement `cordon doctor` checks. Each tries what the launcher itself does
// (through the launcher's own code) and returns a Check naming the setting behind a failure.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "launcher/doctor/check.h"
#include "launcher/doctor/trial.h"

namespace cordon::launcher::doctor {

// Where cordon keeps its records: --state-dir, else $CORDON_STATE_DIR, else the default
// (session.h: sessions_root() without its "/sessions").
struct StateDir {
  std::string path;      // as chosen
  std::string source;    // "--state-dir", "$CORDON_STATE_DIR" or "default"
  std::string existing;  // path, or its nearest existing ancestor when cordon has not made it yet
};
// An error when --state-dir names something that is not an existing directory.
Result<StateDir> resolve_state_dir(const std::string& flag);

Check check_namespaces(const SandboxTrial& t);
Check check_proc(const SandboxTrial& t);
Check check_seccomp();
Check check_fuse();
Check check_cgroups();
// `cow_fuse_ok`: cow mode can go through cordon-fs (check_fuse's state is ok), so the overlay
// fallback's needs matter less.
Check check_state_dir(const StateDir& dir, const Result<bool>& overlay, bool cow_fuse_ok);
Check check_landlock();
Check check_nftables(const SandboxTrial& t);

// Every check, in the order the table shows them. Makes (and removes) a scratch directory in
// the state directory for the overlay trial.
std::vector<Check> run_all_checks(const StateDir& dir);

}  // namespace cordon::launcher::doctor
