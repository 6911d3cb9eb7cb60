// The daemon's inode table: one Inode per object the kernel knows, stable inode numbers for the
// whole session, exact lookup counts.
//
// Lock order (outermost first): CowFs::layer_mu_ (shared by every op, exclusive by rollback) ->
// Inode::mu (copy-up, size accounting, writes of one file, priming its page cache; parents before
// children, never two siblings) -> a FileHandle's mu (its upper reopen) -> InodeTable::mu_ (a
// leaf: nothing is acquired while holding it, no syscall blocks under it except close() of O_PATH
// fds).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/unique_fd.h"

namespace cordon::fusefs {

struct DevIno {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const DevIno&) const = default;
};
struct DevInoHash {
  size_t operator()(const DevIno& k) const {
    return std::hash<uint64_t>()(static_cast<uint64_t>(k.ino) * 1000003u ^ k.dev);
  }
};

// An open file's fd, shared by its FileHandle and the ops that borrow it through the table: it is
// closed when the handle is gone and the last op holding it is done. Ops borrow it instead of
// duplicating it (an F_DUPFD and a close per op), and a release racing with an op cannot close
// it under the op.
class SharedFd {
 public:
  SharedFd() = default;
  int get() const { return p_ ? p_->get() : -1; }
  explicit operator bool() const { return get() >= 0; }
  // Takes ownership of fd (-1: empty). Leaves errno alone when fd is -1.
  void reset(int fd) {
    if (fd < 0) {
      p_.reset();
    } else {
      p_ = std::make_shared<const UniqueFd>(fd);
    }
  }
  SharedFd& operator=(UniqueFd&& fd) {
    reset(fd.release());
    return *this;
  }
  bool same(const SharedFd& o) const { return p_ == o.p_; }

 private:
  std::shared_ptr<const UniqueFd> p_;
};

struct Inode {
  uint64_t id = 0;  // the FUSE nodeid, also the st_ino the view shows
  mode_t type = 0;  // S_IFMT bits

  // Guarded by InodeTable::mu_.
  Inode* parent = nullptr;  // holds a `children` reference on the parent
  std::string name;
  uint64_t nlookup = 0;   // kernel references (lookup counts, exact)
  uint32_t children = 0;  // Inodes whose `parent` is this one
  uint32_t handles = 0;   // open FileHandles / DirHandles
  // Directories hold O_PATH|O_NOFOLLOW fds of their upper and lower sides. Other objects hold
  // none (a 20k-file tree would exhaust RLIMIT_NOFILE): they are reopened by name from their
  // parent's fds for each op and checked against `key`.
  UniqueFd upper;
  UniqueFd lower;
  bool has_upper = false;
  bool has_lower = false;
  // Open upper FileHandles' fds (the object even once unlinked), each with the identity of the
  // file it is open on (an fd's file never changes: comparing it with `key` is what an fstat of
  // the fd would tell, without the syscall).
  struct HandleFd {
    SharedFd fd;
    DevIno key;
  };
  std::vector<HandleFd> handle_fds;
  // The upper file provably has no security.capability xattr: the daemon created it (O_EXCL, so
  // no xattrs) and no setxattr/removexattr reached it since. Lets the kernel's per-write and
  // per-chown capability probes be answered without a syscall. Cleared by any xattr write on
  // the node, copy-up and rollback. Guarded by InodeTable::mu_.
  bool no_caps = false;
  bool opaque = false;  // dir: lower not merged
  bool stale = false;   // removed by a rollback; every op answers ESTALE
  DevIno key;           // identity in the table (upper's when there is one)

  // Guarded by mu.
  std::mutex mu;
  bool size_known = false;
  bool cache_primed = false;    // a small file's bytes were pushed into the kernel's page cache
  uint32_t writers = 0;         // open handles that may write (priming waits for none)
  uint64_t accounted_size = 0;  // bytes of this upper file charged to the quota
  // The kernel's io mode of this inode as the daemon chose it (passthrough.h). The counts drop at
  // RELEASE, which the kernel sends after it dropped its own count: they lag the kernel's in the
  // safe direction (the daemon keeps answering with the mode the kernel may still be in).
  uint32_t pt_cached_opens = 0;  // handles answered without FOPEN_PASSTHROUGH
  uint32_t pt_opens = 0;         // handles answered with FOPEN_PASSTHROUGH (all on pt_backing_id)
  int32_t pt_backing_id = -1;    // registered while pt_opens > 0, closed by the last release
  DevIno pt_backing_key;         // the file pt_backing_id stands for
  bool pt_backing_writable = false;  // it is an upper file (lower backings never see writers)
  bool pt_wrote = false;  // written while in passthrough mode: the kernel's page cache may be stale
};

// The fds and flags of an Inode, copied out under the table lock. The ints stay valid while the
// op runs: fds are closed only when the kernel forgets the inode (never during an op on it) or
// under the exclusive layer lock (rollback).
struct InodeView {
  Inode* node = nullptr;
  int upper = -1;
  int lower = -1;
  bool opaque = false;
  bool stale = false;
  mode_t type = 0;
  UniqueFd own_upper, own_lower;  // opened for this view (non-directories keep no fds)
  SharedFd held;                  // an open handle's fd borrowed as `upper`
  // `upper` is an fd open on the file (a handle's), not O_PATH: f*xattr and fchmod work on it.
  bool upper_open = false;
  int primary() const { return upper >= 0 ? upper : lower; }
};

class InodeTable {
 public:
  // The root Inode (nodeid 1), with its upper and lower fds.
  void init_root(UniqueFd upper, UniqueFd lower, DevIno upper_key, DevIno lower_key);
  Inode* root() const { return root_; }

  // nodeid -> Inode, or null if unknown.
  Inode* find(uint64_t id);
  // The node's fds for one op: a directory's own, or a non-directory reopened by name from its
  // parent (stale when the name no longer leads to the same object).
  InodeView view(uint64_t id);
  InodeView view(Inode* node);
  // Whether the node has an upper copy yet: a lock and a load, no syscalls (for per-read checks).
  bool has_upper(Inode* node);
  // Whether the node has a live upper copy (no copy-up needed): a lock and two loads.
  bool upper_ready(Inode* node);
  // The attributes of the object the view shows for node (st_ino not yet replaced): 0, -errno,
  // or -ESTALE when its name no longer leads to it and no open handle holds it.
  int stat(Inode* node, struct stat* st);

  // What a lookup found: which layers hold the name, their identities, and (directories only:
  // other objects keep no fds) their O_PATH fds.
  struct Sides {
    UniqueFd upper, lower;
    bool has_upper = false, has_lower = false;
    DevIno upper_key, lower_key;
    bool opaque = false;
  };
  // Registers a looked-up entry: an existing Inode with the same identity gets nlookup+1 (and its
  // new parent/name); otherwise a new one is made from the sides. Returns the Inode.
  Inode* add_lookup(Inode* parent, const std::string& name, mode_t type, Sides sides);
  // Drops `n` lookups; frees the Inode (and unreferenced ancestors) at zero references.
  void forget(uint64_t id, uint64_t n);
  // `fd`: the handle's upper fd, if any, open on the file `key` (lets ops reach an open file
  // whose name is gone, and spares them the reopen by name).
  void add_handle(Inode* node, const SharedFd& fd = {}, DevIno key = {});
  void drop_handle(Inode* node, const SharedFd& fd = {});
  // The security.capability fast path (Inode::no_caps).
  void set_no_caps(Inode* node, bool v);
  bool no_caps(Inode* node);

  // A copy-up finished: node now has `upper`; its identity and number carry over.
  void set_upper(Inode* node, UniqueFd upper, DevIno upper_key, bool opaque);
  // The kernel must see node's object under a new nodeid from the next lookup on (its inode is
  // pinned in passthrough mode on an older file): node stays valid for what the kernel still
  // holds, but lookups no longer find it by identity and make a new Inode (with a new number).
  void detach(Inode* node);
  // A rename moved `node` to parent/name.
  void moved(Inode* node, Inode* new_parent, const std::string& new_name);
  // The Inode currently registered for an identity, or null.
  Inode* by_key(DevIno key);
  // The nodeid of the object `key` when the kernel holds it (nlookup > 0) as `name` in `parent`,
  // else 0: a READDIRPLUS entry for it may then go without attributes (nodeid 0), since the
  // kernel has them already.
  uint64_t held_child(Inode* parent, const std::string& name, DevIno key);
  // The stable number for an identity (made up on first sight), for readdir's d_ino.
  uint64_t number_for(DevIno key);

  // node's parent and name, copied under the lock.
  std::pair<Inode*, std::string> parent_and_name(Inode* node);
  // The workspace-relative path of node ("" for the root), for policy decisions and events.
  std::string path_of(Inode* node);
  std::string child_path(Inode* dir, const std::string& name);

  // Every live Inode with its parent id and name (rollback re-resolves and invalidates them).
  struct Entry {
    Inode* node;
    uint64_t parent_id;
    std::string name;
  };
  std::vector<Entry> entries();
  // Rollback: re-points node at what a new lookup found (or marks it stale when neither layer
  // holds it).
  void rebind(Inode* node, Sides sides);

 private:
  void release_locked(Inode* node);
  void store_sides_locked(Inode* n, Sides& sides);
  InodeView view_locked_then_open(std::unique_lock<std::mutex>& lk, Inode* n);
  uint64_t number_locked(DevIno key);

  std::mutex mu_;
  Inode* root_ = nullptr;
  static constexpr uint64_t kMadeUpBase = 1ull << 32;
  uint64_t next_id_ = kMadeUpBase;
  dev_t lower_dev_ = 0;
  std::unordered_set<uint64_t> low_numbers_;  // real inode numbers handed out as they are
  std::unordered_map<uint64_t, std::unique_ptr<Inode>> by_id_;
  std::unordered_map<DevIno, Inode*, DevInoHash> by_key_;
  // Never shrinks: a file keeps its number for the whole session, across forget and copy-up.
  std::unordered_map<DevIno, uint64_t, DevInoHash> numbers_;
};

}  // namespace cordon::fusefs
