// The sandbox's environment: keep list, deny patterns, explicit sets (process.env).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "policy/policy.h"

namespace cordon::launcher {

// Builds the program's envp from the host's. Order: start empty; copy names in env.keep that are
// present and not denied; apply env.set (always wins, even over deny); then `extra` (set by
// cordon itself, e.g. proxy variables). Returns "K=V" strings.
std::vector<std::string> build_environment(const policy::EnvPolicy& env, char** host_env,
                                           const std::map<std::string, std::string>& extra = {});

}  // namespace cordon::launcher
