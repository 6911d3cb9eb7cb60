// Whose files the view shows as the agent's: in cow mode the workspace's owner's files appear as
// the sandbox user's, and what the agent makes is stored under the ids its owner's files have.
#pragma once

#include <errno.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <string_view>

#include "base/result.h"

namespace cordon::fusefs {

struct Ids {
  uid_t uid = 0;
  gid_t gid = 0;
  bool operator==(const Ids&) const = default;
};

// "UID:GID", both decimal; `flag` names the option in the error.
Result<Ids> parse_ids(std::string_view text, std::string_view flag);

// The identity map (the default) shows the host's owners as they are. An active map:
//  - shows an object owned by the workspace's owner, or by the ids the daemon stores the agent's
//    objects under, as owned by the agent (and its group, when it is the owner's, as the agent's
//    group), so the kernel's permission checks (default_permissions) let the agent do what an
//    owner can;
//  - stores what the agent creates or chowns to itself under `stored` (the owner's ids when the
//    daemon may give them, else the daemon's own): the upper layer never holds an object owned by
//    the sandbox's id, and the view's presentation is a function of the layer alone;
//  - never lets a caller other than uid 0 set S_ISUID, or S_ISGID on a non-directory: those
//    files are stored under the owner's ids (root's, for a root-owned workspace);
//  - lets a caller other than uid 0 set only user.* xattrs: a POSIX ACL would be stored for
//    the host (the view does not enforce ACLs) and grant there what the mode bits do not show.
// Objects of every other owner keep their ids (group included), and the kernel's checks keep
// applying to them.
class IdMap {
 public:
  IdMap() = default;
  IdMap(Ids agent, Ids owner, Ids stored)
      : active_(true), agent_(agent), owner_(owner), stored_(stored) {}

  bool active() const { return active_; }
  const Ids& agent() const { return agent_; }
  const Ids& owner() const { return owner_; }
  const Ids& stored() const { return stored_; }

  void present(struct stat* st) const {
    if (!active_) {
      return;
    }
    // Another owner's object keeps its group too: a group write bit meant for the owner's group
    // does not open it to the agent.
    if (st->st_uid != owner_.uid && st->st_uid != stored_.uid) {
      return;
    }
    st->st_uid = agent_.uid;
    if (st->st_gid == owner_.gid || st->st_gid == stored_.gid) {
      st->st_gid = agent_.gid;
    }
  }
  // The ids to give an object on disk for a caller's uid/gid (a create's, or a chown's target).
  uid_t store_uid(uid_t uid) const { return active_ && uid == agent_.uid ? stored_.uid : uid; }
  gid_t store_gid(gid_t gid) const { return active_ && gid == agent_.gid ? stored_.gid : gid; }
  // The permission bits a caller may set on an object of type `type` (S_IFMT bits).
  mode_t settable(mode_t mode, mode_t type, uid_t caller_uid) const {
    mode &= 07777;
    if (!active_ || caller_uid == 0) {
      return mode;
    }
    return mode & ~(S_ISUID | (type == S_IFDIR ? 0 : S_ISGID));
  }
  // 0, or the -errno refusing a caller's setxattr of `name`: EOPNOTSUPP for an ACL (as on a
  // filesystem without ACLs, which the view is), EPERM for other namespaces (security.*,
  // trusted.*: the kernel refuses them to the agent already; a daemon that is root must not
  // store them when it does not).
  int refuse_xattr(std::string_view name, uid_t caller_uid) const {
    if (!active_ || caller_uid == 0 || name.starts_with("user.")) {
      return 0;
    }
    return name.starts_with("system.posix_acl_") ? -EOPNOTSUPP : -EPERM;
  }

 private:
  bool active_ = false;
  Ids agent_, owner_, stored_;
};

}  // namespace cordon::fusefs
