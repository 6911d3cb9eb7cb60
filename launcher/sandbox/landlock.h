// Landlock in the program's last steps: process.exec_allow (execute rights only beneath the allowed
// paths, so a static binary cannot bypass it) and a second layer behind the mount plan for writes.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"

namespace cordon::launcher {

struct LaunchPlan;

// Decided on the host (parse -> plan -> apply); paths are as the sandbox sees them.
struct LandlockPlan {
  bool enabled = false;          // the kernel has Landlock: apply the write layer (and exec rules)
  int abi = 0;                   // the kernel's Landlock ABI version, 0 = unavailable
  bool exec_restricted = false;  // process.exec_allow is non-empty
  std::vector<std::string> exec_paths;   // EXECUTE granted on these files / beneath these dirs
  std::vector<std::string> write_paths;  // writes granted beneath these (the writable mounts)
  // --no-namespaces only (no mount namespace hides anything): reads, too, are granted only
  // beneath read_paths (and the write and exec paths).
  bool restrict_reads = false;
  std::vector<std::string> read_paths;
};

// The running kernel's Landlock ABI (landlock_create_ruleset(NULL, 0, VERSION)); 0 when the
// kernel lacks it or it is disabled (errno kept in *err when non-null).
int landlock_abi(int* err = nullptr);

// Fills plan.landlock from the policy and the mount plan (call after every mount is planned) and,
// with exec_allow, writes /etc/cordon/exec_allow. Fails (closed) when exec_allow is set and
// Landlock is unavailable, or when an exec_allow entry is a glob Landlock cannot express.
Status plan_landlock(const policy::ProcessPolicy& process, LaunchPlan& plan);

// The paths process.exec_allow grants execution beneath (relative entries are workspace-relative),
// plus the system's ELF interpreters. An error for globs Landlock cannot express.
Result<std::vector<std::string>> exec_allow_paths(const policy::ProcessPolicy& process,
                                                  const std::string& workspace);

// In the program, after no_new_privs and before seccomp: opens each path (O_PATH) inside the
// sandbox's root, builds the ruleset and restricts the calling process. A no-op when !enabled.
Status apply_landlock_in_program(const LandlockPlan& plan);

// /etc/cordon/exec_allow in the sandbox: the shim reads it when an exec fails with EACCES, to say
// that process.exec_allow refused it (a file, so children that scrub their environment see it).
inline constexpr char kExecAllowEtcFile[] = "cordon/exec_allow";

}  // namespace cordon::launcher
