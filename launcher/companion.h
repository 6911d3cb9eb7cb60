// The files that ship with cordon (cordon-netproxy, cordon-fs, cordon-capture.so,
// libcordon_preload.so): one lookup for all of them, so a build tree, an install and a relocated
// install are searched the same way for each.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cordon::launcher {

// First of: beside the running cordon, `<cordon's dir>/../<build_subdir>/<file>` (only when
// cordon runs from a CMake build tree), `<cordon's dir>/../libexec/cordon/<file>` (an install,
// wherever its prefix), `installed_path` (the configured prefix's libexec/cordon) - that
// is a regular file passing access(2) with `access_mode` (X_OK for programs, R_OK for
// libraries). Every candidate looked at is appended to `tried` (for the error message).
std::optional<std::string> find_companion(const std::string& file, const std::string& build_subdir,
                                          const std::string& installed_path, int access_mode,
                                          std::vector<std::string>* tried = nullptr);

// "a, b, c": the candidates of a failed find_companion, for "not found (looked at ...)".
std::string join_tried(const std::vector<std::string>& tried);

}  // namespace cordon::launcher
