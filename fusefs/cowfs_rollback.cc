// Live rollback: the upper layer replaced while mounted, every known inode re-resolved, and the
// kernel's caches of the view invalidated.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fusefs/cowfs_impl.h"
#include "fusefs/kernel/passthrough.h"
#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {

// Which dentries a rollback must invalidate, and why this list is complete. The kernel caches a
// dentry (positive or negative) only under a parent directory dentry it holds, and every inode it
// holds has a lookup count with us: every such parent is a directory in the table. Under each
// one, a cached dentry goes wrong only if its name exists in the view before or after the
// rollback (a name absent from both stays correctly negative). So it is enough to invalidate,
// under every known directory, every name of its upper side before the rollback, and of its
// upper and lower sides after it (a whiteout counts as the name it hides). A superset: names the
// kernel never looked up cost one notification that finds nothing. Positive entries are in that
// set (or are the table's own parent/name pairs, added too, for inodes whose directory has no
// upper side yet), so hard links' other names are covered as well.
Status CowFs::rollback_to(const std::string& snapshot_dir) {
  std::set<std::pair<uint64_t, std::string>> names;
  std::vector<uint64_t> inodes;
  // Adds the view names a layer directory holds (whiteouts mapped to what they hide, internal
  // records skipped). A directory that cannot be listed adds nothing: it has no names to serve.
  auto add_names_of = [&names](uint64_t dir_id, int layer_fd) {
    if (layer_fd < 0) {
      return;
    }
    int err = 0;
    for (auto& n : list_dir(layer_fd, &err)) {
      if (!is_reserved_name(n)) {
        names.emplace(dir_id, std::move(n));
      } else if (std::string_view t = whiteout_target(n); !t.empty()) {
        names.emplace(dir_id, std::string(t));
      }
    }
  };
  {
    std::unique_lock lk(layer_mu_);
    UniqueFd snap;
    if (!snapshot_dir.empty()) {
      snap.reset(::open(snapshot_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!snap) {
        return sys_error("open(\"" + snapshot_dir + "\") to roll back",
                         "name an existing snapshot");
      }
    }
    // The names of the view before the rollback (the upper sides: lower ones are listed after).
    for (auto& e : table_.entries()) {
      if (e.node->type == S_IFDIR) {
        InodeView v = table_.view(e.node);
        if (!v.stale) {
          add_names_of(e.node->id, v.upper);
        }
      }
    }
    if (int rc = clear_dir(upper_root_.get()); rc != 0) {
      errno = -rc;
      return sys_error("clearing the upper layer " + config_.upper);
    }
    if (snap) {
      if (int rc = copy_tree(snap.get(), upper_root_.get()); rc != 0) {
        errno = -rc;
        return sys_error("copying snapshot " + snapshot_dir + " into the upper layer",
                         "run the rollback again: the snapshot itself is untouched");
      }
    }
    quota_.reset(scan_usage(upper_root_.get()));

    // Re-resolve every inode the kernel knows, parents before children.
    auto all = table_.entries();
    std::vector<std::pair<size_t, InodeTable::Entry>> ordered;
    for (auto& e : all) {
      std::string p = table_.path_of(e.node);
      ordered.push_back({static_cast<size_t>(std::count(p.begin(), p.end(), '/')) +
                             (e.node == table_.root() ? 0 : 1),
                         e});
    }
    std::sort(ordered.begin(), ordered.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [depth, e] : ordered) {
      inodes.push_back(e.node->id);
      if (e.node == table_.root()) {
        continue;
      }
      names.emplace(e.parent_id, e.name);
      InodeView pv = table_.view(e.parent_id);
      Impl::Found f;
      if (pv.node == nullptr || pv.stale || Impl::resolve(pv, e.name, &f) != 0 ||
          (f.st.st_mode & S_IFMT) != e.node->type) {
        table_.rebind(e.node, InodeTable::Sides{});
      } else {
        table_.rebind(e.node, std::move(static_cast<InodeTable::Sides&>(f)));
      }
      std::lock_guard nl(e.node->mu);
      e.node->size_known = false;
      e.node->cache_primed = false;
    }
    // The names of the restored view under every directory the kernel knows.
    for (auto& [depth, e] : ordered) {
      if (e.node->type == S_IFDIR) {
        InodeView v = table_.view(e.node);
        if (!v.stale) {
          add_names_of(e.node->id, v.upper);
          add_names_of(e.node->id, v.lower);
        }
      }
    }
  }
  // Outside every lock: the kernel may call back into us while it invalidates.
  if (session_ != nullptr) {
    for (auto& [parent, name] : names) {
      fuse_lowlevel_notify_inval_entry(session_, parent, name.c_str(), name.size());
    }
    for (uint64_t ino : inodes) {
      fuse_lowlevel_notify_inval_inode(session_, ino, 0, 0);
    }
  }
  return {};
}

}  // namespace cordon::fusefs
