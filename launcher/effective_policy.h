// The policy `cordon run` enforces: the file (or the embedded default) and the command line's
// overrides, both validated by the policy loader; "~" read as the home of the user the sandbox
// runs as; the rules written with "~" applied beneath every other home in play too.
#pragma once

#include <vector>

#include "launcher/plan.h"
#include "launcher/run_options.h"
#include "policy/loader.h"
#include "policy/policy.h"

namespace cordon::launcher {

// The command line as policy overrides, in the order the loader applies them.
std::vector<policy::Override> run_overrides(const RunOptions& o);

// Reads the policy twice when it must: first with the invoking user's home, to find the
// workspace and so the sandbox's user (identity.h); then, where that user's home differs, again
// with it. Throws policy::PolicyError naming the file or the flag. A workspace that cannot be
// resolved is left as written, for build_plan to report.
// With --learn (o.learn), the result is the widened policy (learn_overrides).
policy::Policy load_effective_policy(const RunOptions& o, const HostFacts& host);

// What --learn adds, after every other override: network.allow gains "*" (every host name on
// every port; a name resolving to a private, loopback or metadata address stays refused, and raw
// addresses are not widened); network.deny, the other rules and canaries are untouched;
// CORDON_SHIM_FS_EVENTS=all records every open.
std::vector<policy::Override> learn_overrides();

// The policy the user asked for: load_effective_policy without --learn's widening. A --learn
// session keeps it so that suggestions are judged against it, not against the widened one.
policy::Policy load_requested_policy(const RunOptions& o, const HostFacts& host);

}  // namespace cordon::launcher
