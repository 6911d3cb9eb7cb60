// A cow session as the review commands (diff, commit, snapshot, rollback, discard) see it: its
// layers, their format, whether its program still runs, when it started; and the few helpers
// every one of those commands prints with.
#pragma once

#include <time.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "fusefs/layer_format.h"
#include "fusefs/workspace_root.h"
#include "policy/policy.h"

namespace cordon::launcher {

// Exit codes of the review commands (documented in `cordon --help`): done; refused (conflicts,
// wrong state, no such snapshot); cordon failed (bad id, unreadable session, I/O error).
inline constexpr int kReviewDone = 0;
inline constexpr int kReviewRefused = 1;

// An empty directory of its own (under $TMPDIR), removed with the last copy of the handle: what
// an imported session with no workspace is compared against.
class EmptyDir;

struct CowSession {
  // `workspace`: the real directory the layer applies to; "" for an imported session that was
  // given none (`cordon import --workspace`). `lower`: what diff compares the layer with, the
  // workspace or an empty directory.
  std::string id, dir, upper, snapshots, control, workspace, lower;
  bool imported = false;
  std::string origin;  // of an imported session: the workspace its archive named, for display
  std::shared_ptr<EmptyDir> empty_lower;
  fusefs::LayerFormat format = fusefs::LayerFormat::CordonFs;
  bool running = false;  // its program still runs (cordon-fs answers, or the overlay's init lives)
  bool live_control = false;      // cordon-fs's control socket answers: snapshot/rollback go there
  std::optional<timespec> since;  // when the session started (its cow.json was written)
  // The workspace directory the session ran on (cow.json); unset for a session recorded before
  // cordon noted it, and for an imported one (a directory of the machine it ran on).
  std::optional<fusefs::WorkspaceIdentity> workspace_id;
};

// Resolves ID and reads its cow record. *refused is set when the session exists but has no
// layer to review (ro/rw sessions).
Result<CowSession> open_cow_session(const std::string& id_text, bool* refused);

// The deletions of the layer, as paths: a whiteout's name, or "DIR/" for an opaque directory
// (everything that was beneath it goes). Against no workspace they cannot be compared with
// anything, so an imported session's diff lists them from here.
Result<std::vector<std::string>> layer_deletions(const CowSession& s);

// The message of a command that would write to the workspace of an imported session with none.
std::string no_workspace_message(const CowSession& s);

// The session's policy as it ran; on failure, the default protect list, and *note says so. Of an
// imported session, the default protect list is always added to the archive's.
policy::FilesystemPolicy review_policy(const CowSession& s, std::string* note);

// A name, symlink target or message from the session, made safe for a terminal
// (text::escaped, backslashes too): printed output cannot lie about what it shows.
std::string shown(const std::string& s);

// The session's workspace, opened once without following symlinks and, when the session noted
// it, proven to be the directory it ran on (fusefs::open_workspace).
Result<UniqueFd> open_session_workspace(const CowSession& s);

// A connection to cordon-fs's control socket at `path`.
Result<UniqueFd> connect_control(const std::string& path);

int say_failed(const std::string& cmd, const Error& e);
int say_refused(const std::string& cmd, const std::string& msg);

}  // namespace cordon::launcher
