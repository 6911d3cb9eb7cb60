// The daemon's inode table.
#include "fusefs/inode_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace cordon::fusefs {

void InodeTable::init_root(UniqueFd upper, UniqueFd lower, DevIno upper_key, DevIno lower_key) {
  std::lock_guard lk(mu_);
  auto node = std::make_unique<Inode>();
  node->id = 1;  // FUSE_ROOT_ID
  node->type = S_IFDIR;
  node->nlookup = 1;  // the kernel's own reference to the root, never forgotten
  node->upper = std::move(upper);
  node->lower = std::move(lower);
  node->has_upper = true;
  node->has_lower = node->lower.valid();
  node->key = upper_key;
  numbers_[upper_key] = 1;
  numbers_[lower_key] = 1;
  lower_dev_ = lower_key.dev;
  root_ = node.get();
  by_key_[upper_key] = root_;
  by_id_[1] = std::move(node);
}

Inode* InodeTable::find(uint64_t id) {
  std::lock_guard lk(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.get();
}

void InodeTable::store_sides_locked(Inode* n, Sides& sides) {
  n->has_upper = sides.has_upper;
  n->has_lower = sides.has_lower;
  if (S_ISDIR(n->type)) {
    n->upper = std::move(sides.upper);
    n->lower = std::move(sides.lower);
  } else {
    n->upper.reset();
    n->lower.reset();
  }
}

InodeView InodeTable::view_locked_then_open(std::unique_lock<std::mutex>& lk, Inode* n) {
  InodeView v;
  v.node = n;
  v.opaque = n->opaque;
  v.stale = n->stale;
  v.type = n->type;
  if (S_ISDIR(n->type) || n->parent == nullptr) {
    v.upper = n->upper.get();
    v.lower = n->lower.get();
    return v;
  }
  // The parent's fds stay open while this op runs: the child holds a reference on its parent,
  // and fds are only closed on free or under the exclusive layer lock (rollback).
  int pu = n->parent->upper.get();
  int pl = n->parent->lower.get();
  std::string name = n->name;
  bool hu = n->has_upper;
  bool hl = n->has_lower;
  DevIno key = n->key;
  // An open handle's fd, borrowed while the handle surely lives (drop_handle takes this lock).
  SharedFd handle;
  bool handle_is_it = false;
  if (hu && !n->handle_fds.empty()) {
    handle = n->handle_fds.back().fd;
    handle_is_it = n->handle_fds.back().key == key;
  }
  lk.unlock();
  auto open_checked = [&](int dirfd, bool check) -> int {
    if (dirfd < 0) {
      return -1;
    }
    int fd = ::openat(dirfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && check &&
        (::fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != key.dev ||
         st.st_ino != key.ino)) {
      ::close(fd);  // the name now leads elsewhere (renamed or replaced under us)
      return -1;
    }
    return fd;
  };
  // An open handle of the object itself (renamed or unlinked names included) spares the walk by
  // name; after a rollback the handle holds the old file, whose identity no longer matches.
  if (handle_is_it) {
    v.held = std::move(handle);
    v.upper = v.held.get();
    v.upper_open = true;
  } else if (hu) {
    v.own_upper.reset(open_checked(pu, true));
    v.upper = v.own_upper.get();
    if (!v.own_upper && handle) {
      v.held = std::move(handle);  // unlinked (or renamed away) but still open
      v.upper = v.held.get();
      v.upper_open = true;
    }
    v.stale = v.stale || v.upper < 0;
  } else if (hl) {
    v.own_lower.reset(open_checked(pl, true));
    v.lower = v.own_lower.get();
    v.stale = v.stale || v.lower < 0;
  } else {
    v.stale = true;
  }
  return v;
}

InodeView InodeTable::view(uint64_t id) {
  std::unique_lock lk(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return {};
  }
  return view_locked_then_open(lk, it->second.get());
}

bool InodeTable::has_upper(Inode* n) {
  std::lock_guard lk(mu_);
  return n->has_upper;
}

bool InodeTable::upper_ready(Inode* n) {
  std::lock_guard lk(mu_);
  return n->has_upper && !n->stale;
}

int InodeTable::stat(Inode* n, struct stat* st) {
  std::unique_lock lk(mu_);
  if (n->stale) {
    return -ESTALE;
  }
  if (S_ISDIR(n->type) || n->parent == nullptr) {
    int fd = n->upper ? n->upper.get() : n->lower.get();
    lk.unlock();  // directory fds live as long as the kernel's reference, which this op holds
    return ::fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
  }
  int dirfd = n->has_upper ? n->parent->upper.get() : n->parent->lower.get();
  std::string name = n->name;
  DevIno key = n->key;
  SharedFd handle;
  bool handle_is_it = false;
  if (n->has_upper && !n->handle_fds.empty()) {
    handle = n->handle_fds.back().fd;
    handle_is_it = n->handle_fds.back().key == key;
  }
  lk.unlock();
  if (handle_is_it) {
    return ::fstat(handle.get(), st) == 0 ? 0 : -errno;
  }
  // One fstatat by name, checked against the identity: what a view plus fstat would give, in one
  // syscall instead of four (getattr and every reply that carries attributes come here).
  if (dirfd >= 0 && ::fstatat(dirfd, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 &&
      st->st_dev == key.dev && st->st_ino == key.ino) {
    return 0;
  }
  if (handle) {
    return ::fstat(handle.get(), st) == 0 ? 0 : -errno;  // as view(): the open object
  }
  return -ESTALE;
}

InodeView InodeTable::view(Inode* n) {
  std::unique_lock lk(mu_);
  return view_locked_then_open(lk, n);
}

uint64_t InodeTable::number_locked(DevIno key) {
  auto [it, inserted] = numbers_.try_emplace(key, 0);
  if (inserted) {
    // An object of the lower filesystem shows its real inode number (and keeps it through
    // copy-up): an index a tool built on the real workspace (git's, by st_ino) stays valid in the
    // view. Everything else, and a real number already taken, gets one from above 2^32, where
    // no real number of ext4 or tmpfs lies.
    if (key.dev == lower_dev_ && key.ino > 1 && key.ino < kMadeUpBase &&
        low_numbers_.insert(key.ino).second) {
      it->second = key.ino;
    } else {
      it->second = next_id_++;
    }
  }
  return it->second;
}

uint64_t InodeTable::number_for(DevIno key) {
  std::lock_guard lk(mu_);
  return number_locked(key);
}

Inode* InodeTable::add_lookup(Inode* parent, const std::string& name, mode_t type, Sides sides) {
  std::lock_guard lk(mu_);
  DevIno key = sides.has_upper ? sides.upper_key : sides.lower_key;
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    Inode* n = it->second;
    n->nlookup++;
    if (n != root_ && (n->parent != parent || n->name != name)) {
      // A hard link looked up by another name, or a rename we did not see: follow the newest name.
      if (n->parent != nullptr) {
        n->parent->children--;
      }
      parent->children++;
      n->parent = parent;
      n->name = name;
    }
    if (S_ISDIR(n->type) && !n->lower && sides.lower && !n->opaque) {
      n->lower = std::move(sides.lower);  // a merged directory whose lower side we had not opened
      n->has_lower = true;
    }
    return n;
  }
  auto node = std::make_unique<Inode>();
  Inode* n = node.get();
  // A copied-up file keeps the number of the lower file it came from.
  uint64_t id = 0;
  if (sides.has_upper && sides.has_lower) {
    auto ln = numbers_.find(sides.lower_key);
    if (ln != numbers_.end()) {
      id = ln->second;
      numbers_[sides.upper_key] = id;
    }
  }
  if (id == 0) {
    id = number_locked(key);
  }
  // Two live Inodes must never share a nodeid (hard links of the lower layer copied up separately
  // end up as distinct upper files with the same origin): give the newcomer a fresh number.
  if (by_id_.count(id) != 0) {
    id = next_id_++;
    numbers_[key] = id;
  }
  n->id = id;
  n->type = type;
  n->parent = parent;
  parent->children++;
  n->name = name;
  n->nlookup = 1;
  store_sides_locked(n, sides);
  n->opaque = sides.opaque;
  n->key = key;
  by_key_[key] = n;
  by_id_[id] = std::move(node);
  return n;
}

void InodeTable::release_locked(Inode* n) {
  while (n != nullptr && n != root_ && n->nlookup == 0 && n->children == 0 && n->handles == 0) {
    Inode* parent = n->parent;
    auto k = by_key_.find(n->key);
    if (k != by_key_.end() && k->second == n) {
      by_key_.erase(k);
    }
    by_id_.erase(n->id);  // closes its fds
    if (parent == nullptr) {
      return;
    }
    parent->children--;
    n = parent;
  }
}

void InodeTable::forget(uint64_t id, uint64_t count) {
  std::lock_guard lk(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return;
  }
  Inode* n = it->second.get();
  n->nlookup = n->nlookup >= count ? n->nlookup - count : 0;
  release_locked(n);
}

void InodeTable::add_handle(Inode* node, const SharedFd& fd, DevIno key) {
  std::lock_guard lk(mu_);
  node->handles++;
  if (fd) {
    node->handle_fds.push_back({fd, key});
  }
}

void InodeTable::drop_handle(Inode* node, const SharedFd& fd) {
  std::lock_guard lk(mu_);
  node->handles--;
  if (fd) {
    std::erase_if(node->handle_fds, [&](const Inode::HandleFd& h) { return h.fd.same(fd); });
  }
  release_locked(node);
}

void InodeTable::set_no_caps(Inode* node, bool v) {
  std::lock_guard lk(mu_);
  node->no_caps = v;
}

bool InodeTable::no_caps(Inode* node) {
  std::lock_guard lk(mu_);
  return node->no_caps && !node->stale;
}

void InodeTable::set_upper(Inode* n, UniqueFd upper, DevIno upper_key, bool opaque) {
  std::lock_guard lk(mu_);
  auto num = numbers_.find(n->key);
  if (num != numbers_.end()) {
    numbers_[upper_key] = num->second;
  }
  auto k = by_key_.find(n->key);
  if (k != by_key_.end() && k->second == n) {
    by_key_.erase(k);
  }
  n->key = upper_key;
  by_key_[upper_key] = n;
  n->has_upper = true;
  n->no_caps = false;  // a copy-up copies the lower file's xattrs
  if (S_ISDIR(n->type)) {
    n->upper = std::move(upper);
  }
  n->opaque = opaque;
}

void InodeTable::detach(Inode* n) {
  std::lock_guard lk(mu_);
  auto k = by_key_.find(n->key);
  if (k != by_key_.end() && k->second == n) {
    by_key_.erase(k);
  }
}

void InodeTable::moved(Inode* n, Inode* new_parent, const std::string& new_name) {
  std::lock_guard lk(mu_);
  if (n->parent != nullptr) {
    n->parent->children--;
  }
  new_parent->children++;
  n->parent = new_parent;
  n->name = new_name;
}

Inode* InodeTable::by_key(DevIno key) {
  std::lock_guard lk(mu_);
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : it->second;
}

uint64_t InodeTable::held_child(Inode* parent, const std::string& name, DevIno key) {
  std::lock_guard lk(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    return 0;
  }
  const Inode* n = it->second;
  return n->nlookup > 0 && !n->stale && n->parent == parent && n->name == name ? n->id : 0;
}

std::pair<Inode*, std::string> InodeTable::parent_and_name(Inode* node) {
  std::lock_guard lk(mu_);
  return {node->parent, node->name};
}

std::string InodeTable::path_of(Inode* node) {
  std::lock_guard lk(mu_);
  std::vector<const std::string*> parts;
  for (Inode* n = node; n != nullptr && n != root_; n = n->parent) {
    parts.push_back(&n->name);
  }
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!out.empty()) {
      out += '/';
    }
    out += **it;
  }
  return out;
}

std::string InodeTable::child_path(Inode* dir, const std::string& name) {
  std::string p = path_of(dir);
  return p.empty() ? name : p + "/" + name;
}

std::vector<InodeTable::Entry> InodeTable::entries() {
  std::lock_guard lk(mu_);
  std::vector<Entry> out;
  out.reserve(by_id_.size());
  for (auto& [id, node] : by_id_) {
    out.push_back({node.get(), node->parent ? node->parent->id : 0, node->name});
  }
  return out;
}

void InodeTable::rebind(Inode* n, Sides sides) {
  std::lock_guard lk(mu_);
  auto k = by_key_.find(n->key);
  if (k != by_key_.end() && k->second == n) {
    by_key_.erase(k);
  }
  n->stale = !sides.has_upper && !sides.has_lower;
  n->key = sides.has_upper ? sides.upper_key : sides.lower_key;
  n->no_caps = false;  // the restored file is another one
  store_sides_locked(n, sides);
  n->opaque = sides.opaque;
  if (!n->stale && by_key_.count(n->key) == 0) {
    by_key_[n->key] = n;
  }
}

}  // namespace cordon::fusefs
