// Adding entries to a policy file's lists as text, so that the user's comments, key order and
// layout survive (nlohmann drops comments on a round trip): `cordon policy suggest --apply`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"

namespace cordon::launcher {

// One entry to append to a list such as "network.allow" (a dotted path of objects, then the
// array), preceded by a `//` line holding `comment` (made one line).
struct PolicyAddition {
  std::string field;
  std::string entry;
  std::string comment;
};

// Returns `text` (JSON with `//` and `/* */` comments, as the policy loader reads it) with each
// addition inserted: after the list's last element, or as a new list (and a new section) at the
// start of its parent object when there is none. Nothing else of the text changes. Fails when the
// text is not a JSON object, or when a path through it is not an object or a list.
Result<std::string> add_to_policy_text(std::string_view text,
                                       const std::vector<PolicyAddition>& additions);

// What `cordon run` checks beyond the loader before anything starts, so that a policy `check`
// passes is one `run` accepts: syscall names libseccomp knows, exec_allow paths Landlock can
// express. (What depends on the host, such as paths that exist, is said by `run`.)
Status validate_for_run(const policy::Policy& p);

// Adds `additions` to the policy file `file` (add_to_policy_text; a file not there yet starts as
// {"version": 1}), only when the result passes what `cordon policy check` checks (the loader,
// with "~" as the invoking user's home, and validate_for_run()); otherwise the file is left as it
// was and the error says why. The file is replaced in one rename (base/replace_file.h) keeping
// its mode and, as root, its owner. Used by `policy suggest --apply` and `run --ask`'s "always"
// answers.
Status add_to_policy_file(const std::string& file, const std::vector<PolicyAddition>& additions);

}  // namespace cordon::launcher
