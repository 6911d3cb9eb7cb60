// The deny lists an import fills, and how their entries are put in cordon's syntax without ever
// denying less than the input did.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::policy::import {

// The lists whose entries an import may rewrite but never drop, since dropping one leaves the
// covering allow in force.
inline constexpr std::string_view kDenyLists[] = {"network.deny", "filesystem.deny",
                                                  "filesystem.deny_write", "process.env.deny"};
bool is_deny_list(std::string_view list_path);

// The entries of `list_path` that deny at least what `value` denied, in a form cordon's loader
// takes: surrounding spaces trimmed (a path keeps its form as written too, since a file name may
// end in a space); for network.deny "https://user@host:8443/x" becomes "host" (every port),
// "host/x" "host" and "[::1]" "::1"; in an absolute or "~" path a ".." is resolved lexically only
// where the kernel resolves it the same way: after a plain name that is not a symlink on this host
// (`home` expands "~" for that check), and not above "~" ("/.." is "/"). The value itself when
// nothing needs rewriting; nullopt with `why` filled when no rewrite is safe: a ".." after a
// symlink or a glob, above "~" or in a workspace-relative path, or nothing left.
std::optional<std::vector<std::string>> normalise_deny(std::string_view list_path,
                                                       const std::string& value,
                                                       const std::string& home, std::string* why);

}  // namespace cordon::policy::import
