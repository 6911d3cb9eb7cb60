// The session workflow on a stopped (or running) session's layers: diff, commit, snapshot,
// rollback and discard as library functions. `cordon diff/commit/rollback/snapshot/discard` are
// thin wrappers; while cordon-fs runs, snapshot/rollback go through its control socket instead
// (CowFs::snapshot_to / rollback_to) so the kernel's caches are invalidated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/base/result.h"
#include "policy/policy.h"

namespace cordon::fusefs {

enum class ChangeKind { Added, Modified, Deleted };

struct Change {
  ChangeKind kind;
  std::string path;     // workspace-relative, '/'-separated
  char type = 'f';      // f regular, d directory, l symlink, p fifo (of the new object; old for Deleted)
  uint64_t size = 0;    // new size for Added/Modified files
  bool is_protected = false;  // matches filesystem.protect: would run code on the host; review it
};

const char* change_kind_name(ChangeKind k);  // "added" | "modified" | "deleted"

// What the upper layer changes relative to the lower directory, sorted by path. A file whose
// bytes and mode equal the lower's (a metadata-only copy-up, e.g. touch) is not a change.
// `policy` (may be null) marks protected paths.
Result<std::vector<Change>> diff_layers(const std::string& lower, const std::string& upper,
                                        const policy::FilesystemPolicy* policy = nullptr);

struct CommitReport {
  std::vector<std::string> applied;    // paths written to / removed from the real workspace
  std::vector<std::string> conflicts;  // "path: why" — nothing was applied when non-empty
};

// Applies the changes (only those at or under `only` paths; empty = all) to the real workspace:
// each file written under a temp name in its directory and renamed into place, deletions
// removed. Refuses (applying nothing, listing them in `conflicts`) when a real file changed since
// the session first touched it (its origin record: inode, size, mtime) or appeared since.
// Committed entries are then dropped from the upper layer. Never follows symlinks in either tree.
// Must not run while cordon-fs serves the session.
Result<CommitReport> commit_layers(const std::string& lower, const std::string& upper,
                                   const std::vector<std::string>& only = {});

// Copies the upper layer into `dest` (must not exist), reflinking where possible.
Status snapshot_layer(const std::string& upper, const std::string& dest);
// Replaces the upper layer's contents with a copy of `snapshot` ("" = empty: the start).
Status restore_layer(const std::string& upper, const std::string& snapshot);
// Drops every change: the same as restore_layer(upper, "").
Status discard_layer(const std::string& upper);

}  // namespace cordon::fusefs
