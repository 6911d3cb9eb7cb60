// What a reviewer must be told about a change beyond its kind, name and mode: changes that look
// harmless in a listing but open the host to someone. `cordon diff` prints them on the change's
// line and `cordon commit` beside what it applied; they hold nothing back on their own.
#pragma once

#include <string>
#include <vector>

#include "fusefs/workflow.h"

namespace cordon::fusefs {

// The warnings for `c`, each a short phrase ("world-writable: ..."); none for a deletion.
// `lower_fd`/`upper_fd`: the workspace and the session's layer (files are read, never followed).
// Warned: a mode that makes a file or directory world-writable (new, or widened to o+w); a
// symlink whose target leaves the workspace; a FIFO or socket where a file was; a file with a
// NUL byte in its first 8000 bytes (diff shows it as binary) that starts with "#!" or is
// executable and was text before, or whose bytes before the NUL are lines of text.
std::vector<std::string> review_warnings(const Change& c, int lower_fd, int upper_fd);

}  // namespace cordon::fusefs
