// `cordon run --no-namespaces`: the advisory mode for hosts without user namespaces.
#pragma once

#include <string>

#include "launcher/run_options.h"
#include "launcher/sandbox/landlock.h"
#include "policy/policy.h"

namespace cordon::launcher {

// Printed on stderr at start, and the gist of the --help text: this mode is not a sandbox.
inline constexpr char kNoNamespacesWarning[] =
    "cordon: --no-namespaces: ADVISORY mode, not a sandbox: the program runs on the host. Only "
    "dynamically linked programs are watched (by the preload shim); connections go through "
    "cordon-netproxy (HTTP_PROXY/ALL_PROXY) and others are refused by the shim, which also "
    "applies filesystem.deny/deny_write/protect to their file calls; Landlock limits reads, "
    "writes and exec where the kernel has it. Static binaries and raw syscalls bypass the shim's "
    "network and file rules.";

// Runs the program on the host with the shim (LD_PRELOAD), cordon-netproxy on 127.0.0.1 as its
// explicit proxy, and Landlock + seccomp + no_new_privs. `pol` is the effective policy.
int run_no_namespaces(const RunOptions& opts, const policy::Policy& pol);

// The Landlock rules of this mode (no mount plan exists): reads beneath the system directories,
// the workspace and filesystem.read/write; writes beneath the workspace (rw only), /tmp, /var/tmp,
// filesystem.write and the harmless devices. Exposed for the tests.
// The workspace path rules handed to the shim in CORDON_SHIM_FS_RULES (preload_shim/fs_rules.h):
// filesystem.deny/deny_write/protect in policy order, the workspace and whether it is writable.
// Fails (closed) when they do not fit the shim's fixed tables or a pattern holds a newline.
Result<std::string> shim_fs_rules(const policy::FilesystemPolicy& fs, const std::string& workspace,
                                  bool workspace_writable);

LandlockPlan no_namespaces_landlock(const policy::Policy& pol, const std::string& workspace,
                                    bool workspace_writable, const std::string& shim_library);

}  // namespace cordon::launcher
