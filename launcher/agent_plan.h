// What an agent preset ("extends", --agent) adds to the launch plan: the program's install tree
// readable, the agent's missing state directories created on the host, its /etc defaults.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "launcher/plan.h"
#include "policy/policy.h"

namespace cordon::launcher {

// The host directories `argv0` needs to run beyond the system directories: the directory it is
// found in through `path_env` (an npm prefix's bin/, which holds a symlink), the package its real
// file belongs to (…/node_modules/<pkg> or @scope/<pkg>; else the file's own directory), and
// the same for a `#!` interpreter found outside the system directories (node from nvm). Never a
// directory that holds `home` or `workspace`, nor anything beneath `workspace` (visible already).
// Empty when the program is not found: `cordon run` reports that itself.
std::vector<std::string> install_tree(const std::string& argv0, const std::string& path_env,
                                      const std::string& cwd, const std::string& home,
                                      const std::string& workspace);

// The preset of `p.extends` into `plan`: read-only binds of the install trees of the program and
// of the preset's own programs (into `user`, the mounts still to be ordered), each missing state
// directory as a directory to create (when the sandbox's user owns the home it lies in), which
// plan_grants then mounts as its write grant, the /etc defaults the host has no file for. Needs
// plan.argv, envp, workspace, home and ids.
void plan_agent(const policy::Policy& p, const HostFacts& host, LaunchPlan& plan,
                std::vector<MountOp>& user);

// Creates plan.create_dirs on the host, owned by the sandbox's user (mode 0700), before the clone.
Status create_agent_state_from_parent(const LaunchPlan& plan);

}  // namespace cordon::launcher
