// The deny lists an import fills, and how their entries are put in cordon's syntax without ever
// denying less than the input did.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::policy::import {

// network.deny, filesystem.deny, filesystem.deny_write, process.env.deny: lists whose entries an
// import may rewrite but never drop, since dropping one leaves the covering allow in force.
bool is_deny_list(std::string_view list_path);

// The entries of `list_path` that deny at least what `value` denied, in a form cordon's loader
// takes: surrounding spaces trimmed; for network.deny "https://user@host:8443/x" becomes "host"
// (every port) and "[::1]" "::1"; for paths, a ".." segment is resolved lexically when that means
// the same as the kernel's resolution: it follows a plain name that is not a symlink on this host,
// and does not climb above "/", "~" or the workspace. A trimmed path keeps its untrimmed form too
// (a name may end in a space). The value itself when nothing needs rewriting; nullopt with `why`
// filled when no rewrite is safe. `home` expands "~" for the symlink check.
std::optional<std::vector<std::string>> normalise_deny(std::string_view list_path,
                                                       const std::string& value,
                                                       const std::string& home, std::string* why);

}  // namespace cordon::policy::import
