// Rename detection for `cordon diff`: an added file holding the same bytes as a deleted one is
// shown as a rename. Near-linear: candidates meet only in (size, content hash) buckets, and a
// file is hashed only when some file of the other side has its size.
#pragma once

#include <string>
#include <vector>

#include "fusefs/workflow.h"

namespace cordon::fusefs {

struct DiffEntry {
  Change change;
  std::string renamed_from;  // set: a deleted file with the same bytes (change.kind is Added)
};

// The changes with each matched (added, deleted) pair of regular files folded into one entry,
// in the input's order. `lower_fd`/`upper_fd`: the workspace and the upper layer.
std::vector<DiffEntry> pair_renames(const std::vector<Change>& changes, int lower_fd, int upper_fd);

}  // namespace cordon::fusefs
