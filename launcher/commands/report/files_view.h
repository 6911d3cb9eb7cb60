// The report's files view: a copy-on-write session's changes against its workspace (added,
// modified, deleted, renamed, with sizes, modes, protected paths flagged and text diffs).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cordon::launcher::report {

inline constexpr size_t kMaxChanges = 2000;            // listed; the rest counted
inline constexpr size_t kMaxDiffBytes = 64 << 10;      // per file's text diff
inline constexpr size_t kMaxAllDiffBytes = 512 << 10;  // all text diffs together

// {"available": bool, "note": why not / what to know, "changes": [...], "more": n}. A session
// that is not copy-on-write (or whose layer is gone) is not an error: "available" is false.
nlohmann::json files_view(const std::string& session_id);

}  // namespace cordon::launcher::report
