// Path policy inside the workspace: read-deny, write-deny and protect, decided on
// workspace-relative paths at every lookup/open/create/rename/link, with an fs.refused event per
// refusal.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "policy/policy.h"
#include "record/events.h"

namespace cordon::fusefs {

// Who asked: from fuse_req_ctx.
struct Caller {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class AccessControl {
 public:
  // `view_root`: the view shows this host directory outside the workspace (a filesystem.write
  // grant) and paths are decided as view_root + "/" + path; empty: workspace-relative paths,
  // whose host paths under `workspace_root` (when given) absolute rules decide too.
  AccessControl(policy::FilesystemPolicy policy, const record::EventLog* events,
                std::string view_root = {}, std::string workspace_root = {})
      : policy_(std::move(policy)),
        events_(events),
        view_root_(std::move(view_root)),
        workspace_root_(std::move(workspace_root)) {}

  // 0 if `path` may be read/looked up; otherwise -EACCES or (deny_style hide) -ENOENT, after an
  // fs.refused event. `op` names the FUSE operation ("lookup", "open", "rename", ...).
  int check_read(std::string_view path, std::string_view op, const Caller& who) const;
  // 0 if `path` may be written/created/removed; -EACCES (or -EROFS in ro mode) after an event.
  int check_write(std::string_view path, std::string_view op, const Caller& who) const;
  // check_write for an entry about to exist at `path` (create, mkdir, symlink, link, the target
  // of a rename): a file or symlink at a protected directory name (a `.git` gitdir pointer) is
  // refused as protect would refuse what it stands for.
  int check_create(std::string_view path, bool is_dir, std::string_view op,
                   const Caller& who) const;
  // A directory (the open directory `dirfd`, which has no lower side) about to be renamed from
  // `from` to `to`: every entry it carries leaves one path and lands on another, so each must be
  // removable where it is and creatable where it goes (and readable at both). `mv prepared
  // state` then cannot plant a state/config.json that writing it directly could not, nor
  // `mv .git .git.old` carry a protected .git/config away. 0, -EACCES/-ENOENT after an event, or
  // -EXDEV past kMaxMovedTree entries (mv(1) then copies, and every copy is checked).
  int check_tree_move(int dirfd, std::string_view from, std::string_view to,
                      const Caller& who) const;
  static constexpr size_t kMaxMovedTree = 20000;
  // Whether readdir shows `path` (false only for read-denied paths in hide style). No event.
  bool visible(std::string_view path) const;
  // Whether `path` may be read, without an event (readdirplus decides whether to look it up).
  bool readable(std::string_view path) const;

  // An fs.quota event, at most one per second so a writer looping on EDQUOT cannot flood the log.
  void quota_hit(std::string_view path, std::string_view what, uint64_t used, uint64_t limit,
                 const Caller& who) const;

  const policy::FilesystemPolicy& policy() const { return policy_; }
  bool read_only() const { return policy_.mode == policy::WorkspaceMode::Ro; }

 private:
  void refused(std::string_view path, std::string_view op, const std::string& rule,
               const Caller& who) const;
  // The path the policy decides: workspace-relative, or absolute under view_root_.
  std::string decided_path(std::string_view path) const;
  // A workspace path's host path, for the absolute rules ("" for grants or when unknown).
  std::string host_path(std::string_view path) const;

  policy::FilesystemPolicy policy_;
  const record::EventLog* events_;
  std::string view_root_;
  std::string workspace_root_;
  mutable std::atomic<int64_t> last_quota_event_s_{0};
};

// readlink("/proc/PID/exe") from the daemon side; "" when the process is gone or not ours to read.
std::string exe_of(pid_t pid);

}  // namespace cordon::fusefs
