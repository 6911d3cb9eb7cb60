// `diff -u` of two open files through diff(1), line by line: shared by `cordon diff` and the
// HTML report.
#pragma once

#include <functional>
#include <string_view>

namespace cordon::launcher {

// Runs diff(1) on `old_fd` and `new_fd` (as its fd 3 and 4) and hands each line of its output,
// without the newline and without diff's own "---"/"+++" lines (they name /dev/fd/N), to `line`.
// Returns false when diff could not run or failed (exit status above 1).
bool unified_diff_lines(int old_fd, int new_fd, const std::function<void(std::string_view)>& line);

}  // namespace cordon::launcher
