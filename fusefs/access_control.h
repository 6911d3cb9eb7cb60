// Path policy inside the workspace: read-deny, write-deny and protect, decided on workspace-relative
// paths at every lookup/open/create/rename/link, with an fs.refused event per refusal.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "policy/policy.h"
#include "policy/record/events.h"

namespace cordon::fusefs {

// Who asked: from fuse_req_ctx.
struct Caller {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class AccessControl {
 public:
  AccessControl(policy::FilesystemPolicy policy, const record::EventLog* events)
      : policy_(std::move(policy)), events_(events) {}

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
  // A directory tree (the open upper-layer directory `dirfd`) about to appear at `path`, by
  // rename: every entry it carries is checked as if created there, so `mv gitdir .git` cannot
  // plant what `.git/hooks/x` written directly could not. Visits at most kMaxMovedTree entries;
  // a bigger tree gets -EXDEV (mv(1) then copies, and each copy is checked as it is created).
  int check_moved_tree(int dirfd, std::string_view path, std::string_view op,
                       const Caller& who) const;
  static constexpr size_t kMaxMovedTree = 20000;

  // Whether readdir shows `path` (false only for read-denied paths in hide style). No event.
  bool visible(std::string_view path) const;

  // An fs.quota event, at most one per second so a writer looping on EDQUOT cannot flood the log.
  void quota_hit(std::string_view path, std::string_view what, uint64_t used, uint64_t limit,
                 const Caller& who) const;

  const policy::FilesystemPolicy& policy() const { return policy_; }
  bool read_only() const { return policy_.mode == policy::WorkspaceMode::Ro; }

 private:
  void refused(std::string_view path, std::string_view op, const std::string& rule,
               const Caller& who) const;

  policy::FilesystemPolicy policy_;
  const record::EventLog* events_;
  mutable std::atomic<int64_t> last_quota_event_s_{0};
};

// readlink("/proc/PID/exe") from the daemon side; "" when the process is gone or not ours to read.
std::string exe_of(pid_t pid);

}  // namespace cordon::fusefs
