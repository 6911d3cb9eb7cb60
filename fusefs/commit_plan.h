// Internal to commit*.cc: the validated plan of a commit. Decides for every change whether it is
// applied, held back (and why) or not asked for, and checks every applied change against the
// real workspace as it is now, before anything is written.
#pragma once

#include <sys/stat.h>

#include <map>
#include <string>
#include <vector>

#include "fusefs/commit.h"
#include "fusefs/workflow.h"

namespace cordon::fusefs {

enum class EntryState { Apply, Held, Skip };

struct PlannedEntry {
  Change change;
  EntryState state = EntryState::Apply;
  std::string why;           // Held: the reason, for the report
  bool covered = false;      // applied by an ancestor's single op (a staged tree, a moved-away dir)
  bool real_exists = false;  // the workspace has an object at the path (Modified, Deleted)
  struct stat real {};       // that object, as validated
};

struct CommitPlan {
  std::vector<PlannedEntry> entries;  // the diff's order (sorted by path)
  std::map<std::string, size_t> index;
  std::vector<std::string> conflicts;  // "path: why"

  // The entry at `path`, or null.
  const PlannedEntry* find(const std::string& path) const;
  // Whether the change at `e` replaces a real directory with something else or deletes one:
  // everything beneath it goes with it.
  static bool removes_directory(const Change& c);
  // Whether it puts a new directory where none was: everything beneath it comes with it.
  static bool creates_directory(const Change& c);
};

// Builds and validates the plan. `lower_root`/`upper_root`: open directory fds of the workspace
// and the upper layer; `lower_path`: the workspace's path (for PATH_MAX).
Result<CommitPlan> plan_commit(int lower_root, int upper_root, const std::string& lower_path,
                               std::vector<Change> changes, const CommitOptions& opts);

// "a/b/c" -> {"a/b", "c"}; "c" -> {"", "c"}.
std::pair<std::string, std::string> split_path(const std::string& path);

}  // namespace cordon::fusefs
