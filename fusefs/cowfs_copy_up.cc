// Copy-up: a lower object made an upper one before its first change, and the quota it costs.
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

// Writes the origin record of a copied-up regular file: what commit compares against later.
int CowFs::Impl::write_origin(int upper_dir, const std::string& name, const struct stat& lst) {
  std::string oname = origin_name(name);
  if (oname.size() > 255) {
    return 0;  // no room for a record: commit treats the file as having no known origin
  }
  std::string tmp = temp_name();
  UniqueFd fd(open_beneath(upper_dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
  if (!fd) {
    return -errno;
  }
  std::string line =
      std::to_string(lst.st_ino) + " " + std::to_string(lst.st_size) + " " +
      std::to_string(static_cast<int64_t>(lst.st_mtim.tv_sec) * 1000000000 + lst.st_mtim.tv_nsec) +
      " " + std::to_string(lst.st_mode & 07777) + " " + std::to_string(lst.st_uid) + " " +
      std::to_string(lst.st_gid) + "\n";
  if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    int e = errno;
    ::unlinkat(upper_dir, tmp.c_str(), 0);
    return -(e ? e : EIO);
  }
  // The first record of a name wins: it describes the real file when the session first touched
  // it.
  if (::renameat2(upper_dir, tmp.c_str(), upper_dir, oname.c_str(), RENAME_NOREPLACE) != 0) {
    int e = errno;
    ::unlinkat(upper_dir, tmp.c_str(), 0);
    return e == EEXIST ? 0 : -e;
  }
  return 0;
}

// An origin record belongs to a name: what the lower file there looked like when the session
// first shadowed it (copy-up, delete, rename over). Commit compares the real file against it.
int CowFs::Impl::record_origin_if_new(const InodeView& dir, const std::string& name) {
  if (dir.lower < 0 || dir.opaque || exists_at(dir.upper, origin_name(name))) {
    return 0;
  }
  struct stat lst;
  if (::fstatat(dir.lower, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(lst.st_mode)) {
    return 0;
  }
  return write_origin(dir.upper, name, lst);
}

// Makes sure `node` exists in the upper layer, copying it (and its parents first) up from the
// lower. `with_data` false skips the file's bytes (it is about to be truncated to 0).
// The copy is built under a temp name and renamed into place: never half-visible, even after
// a kill -9.
int CowFs::Impl::ensure_upper(CowFs* self, Inode* node, bool with_data, const Caller& who) {
  if (self->table_.upper_ready(node)) {
    return 0;  // the common case: no reopen by name just to learn that
  }
  InodeView v = self->table_.view(node);
  if (v.stale) {
    return -ESTALE;
  }
  if (v.upper >= 0) {
    return 0;
  }
  Inode* parent;
  std::string name;
  {
    std::tie(parent, name) = parent_and_name(self, node);
    if (parent == nullptr) {
      return -ESTALE;
    }
    if (int rc = ensure_upper(self, parent, true, who); rc != 0) {
      return rc;
    }
  }
  std::lock_guard lk(node->mu);
  v = self->table_.view(node);
  if (v.upper >= 0) {
    return 0;  // another thread copied it up while we waited
  }
  std::tie(parent, name) = parent_and_name(self, node);
  InodeView pv = self->table_.view(parent);
  if (pv.upper < 0 || v.lower < 0) {
    return -ESTALE;
  }
  struct stat lst;
  if (stat_fd(v.lower, &lst) != 0) {
    return -errno;
  }
  bool is_reg = S_ISREG(lst.st_mode);
  uint64_t charge = (is_reg && with_data) ? static_cast<uint64_t>(lst.st_size) : 0;
  Quota::Reservation held(self->quota_);
  if (!held.inode()) {
    Usage u = self->quota_.usage();
    self->access_.quota_hit(self->table_.path_of(node), "inodes", u.inodes,
                            self->quota_.inode_limit(), who);
    return -EDQUOT;
  }
  if (!held.bytes(charge)) {
    Usage u = self->quota_.usage();
    self->access_.quota_hit(self->table_.path_of(node), "bytes", u.bytes, self->quota_.byte_limit(),
                            who);
    return -EDQUOT;
  }
  if (int rc = copy_up_object(pv.upper, name, v.lower, lst, with_data); rc != 0) {
    return rc;
  }
  held.commit();  // the copy is in the upper layer now, whatever happens next
  int fd = ::openat(pv.upper, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  struct stat ust;
  if (fd < 0 || stat_fd(fd, &ust) != 0) {
    int e = errno;
    if (fd >= 0) {
      ::close(fd);
    }
    return -e;
  }
  node->size_known = is_reg;
  node->accounted_size = charge;
  // A copied-up directory still merges its lower side (it is not opaque).
  self->table_.set_upper(node, UniqueFd(fd), key_of(ust), false);
  return 0;
}

// Builds `name` in upper_dir as a copy of the lower object (O_PATH fd lfd, stat lst).
int CowFs::Impl::copy_up_object(int upper_dir, const std::string& name, int lfd,
                                const struct stat& lst, bool with_data) {
  std::string tmp = temp_name();
  int rc = 0;
  auto cleanup = [&] { remove_tree_at(upper_dir, tmp); };
  if (S_ISDIR(lst.st_mode)) {
    if (::mkdirat(upper_dir, tmp.c_str(), 0700) != 0) {
      return -errno;
    }
    UniqueFd d(open_beneath(upper_dir, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    UniqueFd s(reopen_fd(lfd, O_RDONLY | O_DIRECTORY));
    if (!d || !s) {
      rc = -errno;
    } else {
      rc = copy_attrs(s.get(), d.get(), lst);
    }
  } else if (S_ISREG(lst.st_mode)) {
    UniqueFd d(open_beneath(upper_dir, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
    UniqueFd s(reopen_fd(lfd, O_RDONLY));
    if (!d || !s) {
      rc = -errno;
    } else {
      if (with_data) {
        rc = copy_data(s.get(), d.get());
      }
      if (rc == 0) {
        rc = copy_attrs(s.get(), d.get(), lst);
      }
      if (rc == 0) {
        rc = write_origin(upper_dir, name, lst);
      }
    }
  } else if (S_ISLNK(lst.st_mode)) {
    if (int r = copy_symlink(lfd, "", lst, upper_dir, tmp); r != 0) {
      return r;
    }
  } else if (S_ISFIFO(lst.st_mode) || S_ISSOCK(lst.st_mode)) {
    if (int r = copy_node(lst, upper_dir, tmp); r != 0) {
      return r;
    }
  } else {
    return -EPERM;  // device nodes of the workspace are not copied
  }
  if (rc == 0 && !S_ISDIR(lst.st_mode) && !S_ISREG(lst.st_mode)) {
    rc = write_origin(upper_dir, name, lst);
  }
  if (rc == 0 &&
      ::renameat2(upper_dir, tmp.c_str(), upper_dir, name.c_str(), RENAME_NOREPLACE) != 0) {
    rc = -errno;
  }
  if (rc != 0) {
    cleanup();
  }
  return rc;
}

int CowFs::Impl::copy_attrs(int src, int dst, const struct stat& st) {
  if (::fchown(dst, st.st_uid, st.st_gid) != 0 && errno != EPERM) {
    return -errno;
  }
  if (::fchmod(dst, st.st_mode & 07777) != 0) {
    return -errno;
  }
  if (int rc = copy_xattrs(src, dst); rc != 0) {
    return rc;
  }
  timespec times[2] = {st.st_atim, st.st_mtim};
  return ::futimens(dst, times) == 0 ? 0 : -errno;
}

// The file's bytes currently charged to the quota (lazily read from the upper file).
uint64_t& CowFs::Impl::accounted(Inode* n, int upper_fd) {
  if (!n->size_known) {
    struct stat st;
    n->accounted_size = (upper_fd >= 0 && stat_fd(upper_fd, &st) == 0 && S_ISREG(st.st_mode))
                            ? static_cast<uint64_t>(st.st_size)
                            : 0;
    n->size_known = true;
  }
  return n->accounted_size;
}

// Charges growth of `n` to `end` bytes (holding n->mu). Returns the end actually granted: less
// than asked when the quota is nearly full (a short write), == start when nothing is left.
uint64_t CowFs::Impl::charge_growth(CowFs* self, Inode* n, int upper_fd, uint64_t start,
                                    uint64_t end, bool allow_partial) {
  uint64_t& acc = accounted(n, upper_fd);
  if (end <= acc) {
    return end;
  }
  uint64_t want = end - acc;
  uint64_t got = allow_partial ? self->quota_.reserve_bytes_upto(want)
                               : (self->quota_.reserve_bytes(want) ? want : 0);
  if (got == 0) {
    return std::max(start, acc);  // only what overwrites bytes already paid for
  }
  acc += got;
  return acc;
}

// After a size change settles, give back what the file no longer holds.
void CowFs::Impl::settle_size(CowFs* self, Inode* n, int fd) {
  struct stat st;
  if (stat_fd(fd, &st) != 0) {
    return;
  }
  uint64_t& acc = accounted(n, fd);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < acc) {
    self->quota_.release_bytes(acc - size);
    acc = size;
  } else if (size > acc) {
    // Grew by a path that could not reserve first (should not happen): charge it anyway.
    self->quota_.reserve_bytes_upto(size - acc);
    acc = size;
  }
}

void CowFs::Impl::quota_refused(CowFs* self, Inode* n, const char* what, const Caller& who) {
  Usage u = self->quota_.usage();
  bool bytes = std::strcmp(what, "bytes") == 0;
  self->access_.quota_hit(self->table_.path_of(n), what, bytes ? u.bytes : u.inodes,
                          bytes ? self->quota_.byte_limit() : self->quota_.inode_limit(), who);
}

}  // namespace cordon::fusefs
