// Privilege drop for the program: no_new_privs, every capability (bounding, ambient, inheritable,
// permitted, effective) dropped, securebits locked.
#pragma once

#include "base/result.h"

namespace cordon::launcher {

// Child side, just before seccomp and exec. Async-signal-safe.
Status drop_privileges();

// How the check that no user namespace can be made is done: directly (the filter refuses it in
// the kernel), already (through the seccomp listener: probe_userns_listener), or not at all
// (process.nested_sandbox allows it).
enum class UsernsCheck { Direct, Probed, Allowed };

// Child side, after seccomp: verifies the sandbox holds before exec — no capability left,
// no_new_privs set, a new user namespace cannot be created, seccomp filter active.
// An error names what held open.
Status verify_sandbox_holds(UsernsCheck userns = UsernsCheck::Direct);

}  // namespace cordon::launcher
