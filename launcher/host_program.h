// Why a program the sandbox could not find is missing: the host may have it somewhere the
// sandbox does not see (/opt, an npm prefix, a home directory), and the message then names the
// grant that would show it.
#pragma once

#include <optional>
#include <string>

#include "launcher/plan.h"

namespace cordon::launcher {

// For `cmd` as the program was given (a name searched in `path`, the sandbox's $PATH, or a path
// resolved against `cwd`): when the host has it, or the interpreter its "#!" line names, where
// the sandbox's mounts do not show it, the text that says so and names --read; else nullopt.
std::optional<std::string> not_found_hint(const std::string& cmd, const std::string& path,
                                          const std::string& cwd, const LaunchPlan& plan);

}  // namespace cordon::launcher
