// `cordon commit` as a library: a cow session's changes applied to the real workspace as one
// transaction. The way back into the host is a security boundary, often crossed as root:
//   - everything is validated before the first byte reaches the workspace: selection, protected
//     paths, unsupported types, path lengths, and conflicts for every path a change touches
//     (below a deleted or replaced directory too);
//   - every new object is built hidden, in a private 0700 staging directory on the workspace's
//     own filesystem, with its final owner set before its mode, setuid/setgid stripped, only
//     user.* xattrs copied (never security.capability), fsynced, and only then renamed into
//     place; an existing file keeps its owner, a new one gets its directory's (as root);
//   - all or nothing: what was renamed is put back if anything fails, the originals kept in the
//     staging directory until the end; a journal in the session directory lets the next commit
//     or discard complete or undo a commit that was killed.
#pragma once

#include <time.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "fusefs/layer_format.h"
#include "fusefs/workflow.h"
#include "fusefs/workspace_root.h"
#include "policy/policy.h"

namespace cordon::fusefs {

struct CommitOptions {
  // PATH arguments, workspace-relative: only changes at or beneath them ("." = all). Empty = all.
  std::vector<std::string> only;
  // Protected changes go only when this is set, or when a PATH names them (the path itself, or a
  // protected directory above it: ".git/hooks", ".github/workflows").
  bool include_protected = false;
  const policy::FilesystemPolicy* policy = nullptr;  // filesystem.protect; null: nothing protected
  LayerFormat format = LayerFormat::CordonFs;
  std::string session_dir;  // holds the journal (commit.journal)
  std::string session_id;   // names the staging directories: .cordon-commit-<id>
  // When the session started. A workspace entry changed after it (its ctime) is a conflict where
  // no origin record says what the session saw; unset: such entries are not time-checked.
  std::optional<timespec> since;
  // The workspace directory the session ran on. The workspace is opened once, without following
  // symlinks, and refused unless it is this directory; unset: any directory at the path.
  std::optional<WorkspaceIdentity> workspace_id;
  // Tests: called with the index of each journaled op just before it runs, then once more with
  // the number of ops once the commit point is written.
  std::function<void(size_t)> before_step;
};

// A change left in the session, and why.
struct Held {
  std::string path;
  std::string why;
};

struct CommitReport {
  std::vector<Change> applied;         // written to / removed from the workspace
  std::vector<Held> held;              // protected, sockets, device nodes, too long, ...
  std::vector<std::string> conflicts;  // "path: why"; when non-empty nothing was applied
  std::string recovered;               // what an interrupted earlier commit left, and what was done
  // Review warnings (review_warnings.h) of applied changes, "path: warning", as validated.
  std::vector<std::string> warnings;
};

// The journal's and the validated records' names in the session directory (commit_journal.h),
// and the staging directories' name.
inline constexpr const char* kCommitJournal = "commit.journal";
inline constexpr const char* kCommitValidated = "commit.validated";
std::string staging_dir_name(const std::string& session_id);

// Applies the session's changes; first completes or undoes an interrupted earlier commit. An
// error means nothing of this commit stayed in the workspace, unless its message says otherwise
// (an undo that failed names what it could not put back and where the originals are kept).
// Must not run while the session's view is mounted. The workspace is opened once
// (open_workspace with opts.workspace_id) and only that fd is used.
Result<CommitReport> commit_layers(const std::string& lower, const std::string& upper,
                                   const CommitOptions& opts);

// Completes or undoes an interrupted commit (`cordon discard` runs it first, so its claim holds).
// "" when there was none; otherwise one sentence saying what was found and done.
Result<std::string> recover_commit(const std::string& lower, const std::string& upper,
                                   const CommitOptions& opts);

}  // namespace cordon::fusefs
