// `diff -u` of two open files through diff(1), line by line: shared by `cordon diff` and the
// HTML report.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "base/unique_fd.h"
#include "fusefs/workflow.h"

namespace cordon::launcher {

// Runs diff(1) on `old_fd` and `new_fd` (as its fd 3 and 4) and hands each line of its output,
// without the newline and without diff's own "---"/"+++" lines (they name /dev/fd/N), to `line`.
// Returns false when diff could not run or failed (exit status above 1).
bool unified_diff_lines(int old_fd, int new_fd, const std::function<void(std::string_view)>& line);

// The two sides of a regular file's change, each opened beneath its layer without following a
// symlink (the agent chose the names): the old one under `lower_fd`, the new one under
// `upper_fd`; an added file has no old side, a deleted one no new side.
struct DiffSides {
  UniqueFd old_side, new_side;
  bool binary = false;  // a side holds a NUL byte in its first 8000 bytes, as diff(1) judges
};
// nullopt, with errno set, when a side the change has cannot be opened.
std::optional<DiffSides> open_diff_sides(const fusefs::Change& ch, int lower_fd, int upper_fd);

}  // namespace cordon::launcher
