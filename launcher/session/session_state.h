// What a session's record says about it now, for `cordon ls` and `cordon prune`: whether it still
// runs, whether and when it ended, whether its copy-on-write layer holds changes not yet committed
// or discarded, and its size on disk. Read relative to directory fds, never following a symlink
// or crossing a mount.
#pragma once

#include <cstdint>
#include <string>

namespace cordon::launcher {

struct SessionState {
  bool running = false;    // a live cordon holds its lock, or its cordon-fs still serves it
  bool ended = false;      // it recorded its end (summary.json, or session.end last in its log)
  int64_t last_write = 0;  // unix seconds of the record's last write: its end, or where it stopped
  bool pending = false;    // upper/ holds changes, or cannot be read (which counts as holding some)
  uint64_t bytes = 0;      // disk usage of the record (not of a mount inside it)
  bool bytes_more = false;  // the walk stopped at its bound: at least `bytes`
};

// `dir_fd` is the session directory (store::open_session_dir), `dir_path` its path (for the
// cordon-fs pid file). A session nobody holds is locked through `dir_fd` on the way (held until
// every duplicate of it is closed), so a prune working on it keeps other prunes away. `measure`:
// walk the record for its size, at most kMaxMeasured entries.
inline constexpr uint64_t kMaxMeasured = 200000;
SessionState read_session_state(int dir_fd, const std::string& dir_path, bool measure);

}  // namespace cordon::launcher
