// The file-rules hand-over from the launcher to the shim (--no-namespaces): format and bounds.
#pragma once

#include <stddef.h>

// Plain constants only: included by the no-libstdc++ shim and by the launcher that encodes.
//
// CORDON_SHIM_FS_RULES holds the workspace path rules of the effective policy as text lines:
//   cordon-fs-rules 1
//   workspace /abs/real/path          (realpath of the workspace)
//   mode ro|rw                         (ro: every write inside the workspace is EROFS)
//   style eacces|hide                  (filesystem.deny_style)
//   deny a|r PATTERN                   (filesystem.deny[i], in policy order; a = absolute)
//   deny_write a|r PATTERN             (filesystem.deny_write[i])
//   protect a|r PATTERN                (filesystem.protect[i])
// PATTERN is PathPattern::expanded ("~" expanded, normalized). Relative patterns are matched
// against workspace-relative paths, absolute ones against absolute paths (PathPattern::matches).
// The launcher refuses to start when the rules do not fit the bounds below or a pattern holds a
// newline, so the shim never runs with a silently shortened list.
namespace cordon::preload_shim::fs_rules {

inline constexpr char kEnvName[] = "CORDON_SHIM_FS_RULES";
inline constexpr char kHeader[] = "cordon-fs-rules 1";
inline constexpr size_t kMaxBytes = 32768;
inline constexpr size_t kMaxRules = 512;

}  // namespace cordon::preload_shim::fs_rules
