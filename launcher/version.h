// `cordon --version`: the build (version, git commit) and the kernel features cordon uses here.
#pragma once

#include <string>

namespace cordon::launcher {

// Several lines: "cordon 0.1.0 (git 1a2b3c4d5e6f)", then one line per kernel feature as this
// process finds it (user namespaces, FUSE passthrough, FUSE over io_uring, Landlock, cgroups).
std::string version_report();

}  // namespace cordon::launcher
