// cordon-fs as a process: options, preflight checks, mounting, the session loop, the control
// socket.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "fusefs/id_map.h"

namespace cordon::fusefs {

struct DaemonOptions {
  std::string lower;        // --lower: the real workspace
  std::string upper;        // --upper: the session's layer directory (--direct: the real one)
  bool direct = false;      // --direct: a pass-through view of --upper, no lower layer
  std::string view_root;    // --view-root: decide paths as absolute host paths under this one
  std::string home;         // --home: what "~" means in the policy (default: $HOME)
  std::string mountpoint;   // --mountpoint
  std::string policy_file;  // --policy: a policy JSON; default: the embedded default policy
  std::string events_file;  // --events: append events.jsonl here
  int events_fd = -1;       // --events-fd: an inherited O_APPEND fd instead
  int events_head_fd = -1;  // --events-head-fd: the record's head, with --events-fd
  std::string session = "standalone";  // --session: the id put in every event
  std::string control;                 // --control: unix socket for snapshot/rollback while mounted
  std::string snapshots;       // --snapshots: where snapshots go (default: <upper>/../snapshots)
  int ready_fd = -1;           // --ready-fd: one byte written here once mounted, then closed
  bool allow_other = false;    // --allow-other
  bool debug = false;          // -d: libfuse request tracing on stderr
  bool no_io_uring = false;    // --no-io-uring: serve through /dev/fuse even where the ring works
  unsigned uring_entries = 4;  // --io-uring-entries: ring entries per CPU queue
  std::optional<Ids> agent;    // --agent-ids UID:GID: the sandbox's ids (cow: the copy is theirs)
  std::optional<Ids> owner;    // --owner-ids UID:GID: the workspace's owner (default: --lower's)
};

// Parses argv; on --help or an error fills *exit_code and returns an error message ("" for help).
Result<DaemonOptions> parse_daemon_options(int argc, char** argv, int* exit_code);
// The kernel's switch for FUSE over io_uring (off by default; read once per mount at INIT).
bool kernel_uring_enabled();
// Mounts and serves until unmounted (or SIGTERM/SIGINT/SIGHUP); returns the process exit code.
int run_daemon(const DaemonOptions& opts);

}  // namespace cordon::fusefs
