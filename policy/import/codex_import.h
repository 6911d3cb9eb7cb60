// Codex (openai/codex) config.toml -> a cordon policy.
#pragma once

#include <string>
#include <string_view>

#include "policy/import/import.h"

namespace cordon::policy::import {

// Maps the sandbox settings of a Codex config.toml: `sandbox_mode` with
// `[sandbox_workspace_write]`, or the permission profile `default_permissions` names
// (`[permissions.NAME]`), and `[shell_environment_policy]`; `profile` ("" for the file's own
// top-level `profile`) selects `[profiles.NAME]`, whose keys override the top level. Keys that
// are not sandbox settings are listed in `unmapped`. Not settled (see settle()). Throws
// PolicyError naming `source` and the key path for invalid TOML, wrong types, an unknown profile.
ImportResult import_codex(std::string_view text, const std::string& source,
                          const std::string& profile);

// Whether `text` parses as TOML (detect_format()).
bool parses_as_toml(std::string_view text);

}  // namespace cordon::policy::import
