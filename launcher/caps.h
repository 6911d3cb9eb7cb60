// Privilege drop for the program: no_new_privs, every capability (bounding, ambient, inheritable,
// permitted, effective) dropped, securebits locked.
#pragma once

#include "policy/base/result.h"

namespace cordon::launcher {

// Child side, just before seccomp and exec. Async-signal-safe.
Status drop_privileges();

// Child side, after seccomp: verifies the sandbox holds before exec — no capability left,
// no_new_privs set, a new user namespace cannot be created, seccomp filter active.
// An error names what held open.
Status verify_sandbox_holds();

}  // namespace cordon::launcher
