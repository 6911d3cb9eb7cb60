// cow mode through cordon-fs: finding the binary, spawning it for a session, stopping it, and
// detaching a session's mount that a crash left behind.
//
// Mount approach: cordon-fs mounts the view on the host at <session>/mnt (inside the session's
// 0700 directory), the sandbox's child clones that mount (open_tree) before it drops host ids and
// moves it onto the workspace path in its new root. Chosen over handing the child's own
// /dev/fuse fd to the daemon ("/dev/fd/N") because cordon-fs's preflight insists on a directory
// mountpoint; the costs are allow_other when the sandbox's uid is not the daemon's, and a host
// mount to clean up: SIGTERM + reap + MNT_DETACH at session end, PR_SET_PDEATHSIG(SIGTERM) so the
// daemon unmounts itself if cordon dies, and detach_stale_cow_mount() for a daemon that was
// SIGKILLed (every workflow command and every `cordon run` sweep).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "fusefs/workspace_root.h"
#include "launcher/child_process.h"

namespace cordon::launcher {

// Where cordon-fs is: $CORDON_FS_BIN, else beside `cordon` (installed libexec layout or the build
// tree's ../fusefs/), else CORDON_LIBEXECDIR. Empty when none is executable.
std::string find_cowfs_binary();

// Why cow mode cannot go through cordon-fs on this host ("" when it can): $CORDON_COW_BACKEND set
// to "overlay", no cordon-fs binary, /dev/fuse not usable by this uid (this host keeps it 0600:
// rootless FUSE is impossible there, and cow falls back to kernel overlayfs), or a setuid
// fusermount3 that cannot gain the privilege to mount (no_new_privs, no CAP_SYS_ADMIN in the
// bounding set).
std::string cowfs_unavailable_reason();
// The same without the choice of backend: whether cordon-fs can mount here at all.
std::string cordon_fs_unavailable_reason();

struct CowFsSpawn {
  std::string binary;       // find_cowfs_binary()
  std::string lower;        // the real workspace
  std::string session_dir;  // upper/, snapshots/, mnt/, control.sock, policy.json live here
  std::string session_id;
  int events_fd = -1;        // O_APPEND fd of events.jsonl; dup'ed into the daemon
  int events_head_fd = -1;   // events.jsonl.head (record/chain_head.h), with events_fd
  bool allow_other = false;  // the sandbox's uid differs from ours
  // The ids the sandbox runs as: cordon-fs shows them the workspace owner's files as theirs
  // (--agent-ids), so the copy-on-write workspace is the agent's to change.
  uid_t agent_uid = 0;
  gid_t agent_gid = 0;
  std::string home;  // what "~" means in the policy (--home): the sandbox user's home
  // A direct view (fs_views.h) instead of the session's cow view: the real directory it shows,
  // the host path its paths are decided under ("" for the workspace), and its index, which
  // names its mountpoint (<session>/views/N) and log and pid files beside it.
  std::string direct_dir;
  std::string view_root;
  int view_index = -1;
};

// How the daemon ended, for the summary.
struct CowFsExit {
  bool died_early = false;  // it was gone before cordon asked it to stop: the view failed
  std::string how;          // "exit 1", "signal 9", ...
};

// A running cordon-fs with its view mounted at mountpoint(). Destruction stops it (SIGTERM, a
// bounded wait, SIGKILL), reaps it and detaches the mount if it is still there.
class CowFsProcess {
 public:
  CowFsProcess() = default;
  CowFsProcess(CowFsProcess&& o) noexcept { *this = std::move(o); }
  CowFsProcess& operator=(CowFsProcess&& o) noexcept;
  ~CowFsProcess() { stop(); }

  const std::string& mountpoint() const { return mountpoint_; }
  pid_t pid() const { return child_.pid(); }
  // Waits (bounded) for the daemon's ready byte: its view is mounted. A no-op when there is no
  // daemon or it was ready already. On failure the daemon is stopped and the error quotes the
  // tail of its log. Split from spawn_cowfs so its start-up overlaps cordon's own.
  Status wait_ready();
  // Asks the daemon to unmount and exit (SIGTERM) without waiting, noting whether it was gone
  // already; stop() then waits. Lets cordon's own end-of-session work overlap the daemon's.
  void begin_stop();
  // Idempotent; the first call's answer is kept.
  CowFsExit stop();

 private:
  friend Result<CowFsProcess> spawn_cowfs(const CowFsSpawn& s);
  ChildProcess child_;
  UniqueFd ready_;  // read end of --ready-fd until wait_ready()
  std::string mountpoint_;
  std::string binary_, log_, pidfile_;
  std::optional<CowFsExit> exit_;
  std::optional<CowFsExit> early_;  // set by begin_stop()
};

// Starts cordon-fs (call wait_ready() before relying on the mount). Its stderr goes to
// <session>/cordon-fs.log, whose tail is quoted if it fails to start.
Result<CowFsProcess> spawn_cowfs(const CowFsSpawn& s);

// The session's cow record (<session>/cow.json): the workspace and which backend ran. The
// workflow commands need both; written before the program starts, so a crash keeps it.
struct CowRecord {
  std::string workspace;
  std::string backend;  // "cordon-fs" | "overlay"
  // The workspace directory itself (device, inode) when the session started: the review
  // commands refuse a directory swapped in at that path since. Unset in older records.
  std::optional<fusefs::WorkspaceIdentity> workspace_id;
};
Status write_cow_record(const std::string& session_dir, const CowRecord& r);
Result<CowRecord> read_cow_record(int session_dir_fd);

// `cordon run`'s part, once the session exists (a no-op outside cow mode): records the backend in
// cow.json and, when plan.cow_fuse, sweeps stale mounts, starts cordon-fs for the session and
// points plan.cow_mount at its view (mounted once wait_ready() succeeds). The returned process
// stops the daemon when destroyed.
class Session;
struct LaunchPlan;
Result<CowFsProcess> start_cow_backend(const Session& session, LaunchPlan& plan);

// Entries cordon-fs's upper layer changes against the workspace (fusefs::diff_layers), for the
// summary; nullopt if the layers cannot be read.
std::optional<uint64_t> count_cowfs_changes(const std::string& lower, const std::string& upper);

// Whether the cordon-fs recorded in <session_dir>/cordon-fs.pid still runs (a daemon that
// outlived its cordon still serves the session).
bool cowfs_daemon_alive(const std::string& session_dir);

// Detaches <session_dir>/mnt and <session_dir>/views/N if they are FUSE mounts whose daemon is
// gone (ENOTCONN). Returns true if it detached something.
bool detach_stale_cow_mount(const std::string& session_dir);
// The same for every session mount of this user listed in /proc/self/mountinfo under `root`.
void detach_stale_cow_mounts(const std::string& sessions_root);

}  // namespace cordon::launcher
