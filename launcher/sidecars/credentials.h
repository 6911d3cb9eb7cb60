// network.credentials under `cordon run`: the placeholder the sandbox sees for each secret, and
// the real values handed to cordon-netproxy only.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"
#include "launcher/plan.h"
#include "policy/policy.h"

namespace cordon::launcher {

// A random stand-in of the same shape as `real`: a known prefix (ghp_, github_pat_, sk-ant-, sk-,
// xoxb-, ...) kept, the same length, each digit, lowercase and uppercase letter replaced by a
// random one of its class, anything else kept. Never equal to `real`.
Result<std::string> make_placeholder(std::string_view real);

// For each credential: its variable has to be set in cordon's environment; the sandbox's
// `plan.envp` gets the placeholder under that name. Returns what cordon-netproxy reads from
// --credentials-fd (a JSON array of {"env", "placeholder", "value"}); "" when there are none.
Result<std::string> plant_placeholders(const policy::NetworkPolicy& net, LaunchPlan& plan);

}  // namespace cordon::launcher
