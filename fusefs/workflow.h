// The session workflow on a stopped (or running) session's layers: diff, snapshot, rollback and
// discard as library functions (commit: commit.h). `cordon diff/snapshot/rollback/discard` are
// thin wrappers; while cordon-fs runs, snapshot/rollback go through its control socket instead
// (CowFs::snapshot_to / rollback_to) so the kernel's caches are invalidated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "fusefs/layer_format.h"
#include "policy/policy.h"

namespace cordon::fusefs {

enum class ChangeKind { Added, Modified, Deleted };

struct Change {
  ChangeKind kind;
  std::string path;  // workspace-relative, '/'-separated
  // Of the new object (the old one for Deleted): f regular, d directory, l symlink, p fifo,
  // s unix socket, c/b device node.
  char type = 'f';
  char old_type = 0;          // Modified: the type of what the workspace has there ('f', 'd', ...)
  uint64_t size = 0;          // new size for Added/Modified files
  uint64_t old_size = 0;      // the workspace file's size; Modified/Deleted files
  uint32_t mode = 0;          // permission bits (07777) of the new object; Added/Modified
  uint32_t old_mode = 0;      // permission bits of the workspace's object; Modified/Deleted
  bool is_protected = false;  // filesystem.protect covers it: would run code on the host
  std::string protect_rule;   // "filesystem.protect[N]" when is_protected
};

const char* change_kind_name(ChangeKind k);  // "added" | "modified" | "deleted"
const char* change_letter(ChangeKind k);     // "A" | "M" | "D"

// What the upper layer changes relative to the lower directory, sorted by path. A file whose
// bytes and mode equal the lower's (a metadata-only copy-up, e.g. touch) is not a change. A
// deleted or replaced directory lists every entry beneath it as deleted too. `policy` (may be
// null) marks protected paths (FilesystemPolicy::protect_rule, by the type of what is there).
// `lower` is opened without following symlinks (workspace_root.h).
Result<std::vector<Change>> diff_layers(const std::string& lower, const std::string& upper,
                                        const policy::FilesystemPolicy* policy = nullptr,
                                        LayerFormat format = LayerFormat::CordonFs);
// The same against the workspace already open as `lower_fd` (open_workspace); `lower` names it
// in messages only.
Result<std::vector<Change>> diff_layers(int lower_fd, const std::string& lower,
                                        const std::string& upper,
                                        const policy::FilesystemPolicy* policy = nullptr,
                                        LayerFormat format = LayerFormat::CordonFs);

// Marks the changes `policy` protects (diff_layers does it when given a policy).
void mark_protected(std::vector<Change>* changes, const policy::FilesystemPolicy& policy);

// Copies the upper layer into `dest` (must not exist), reflinking where possible.
Status snapshot_layer(const std::string& upper, const std::string& dest);
// Replaces the upper layer's contents with a copy of `snapshot` ("" = empty: the start).
Status restore_layer(const std::string& upper, const std::string& snapshot);
// Drops every change: the same as restore_layer(upper, "").
Status discard_layer(const std::string& upper);

}  // namespace cordon::fusefs
