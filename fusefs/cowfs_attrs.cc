// Attributes: setattr (truncate, chmod, chown, times), statfs, extended attributes.
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

int CowFs::Impl::do_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                            fuse_file_info* fi, struct stat* out) {
  CowFs* self = fs(req);
  Caller who = caller(req);
  Inode* node = self->table_.find(ino);
  if (node == nullptr) {
    return -ENOENT;
  }
  if (int rc = self->access_.check_write(self->table_.path_of(node), "setattr", who); rc != 0) {
    return rc;
  }
  if (int rc = refuse_setid(self, *attr, to_set, node->type); rc != 0) {
    return rc;
  }
  FileHandle* open_fh =
      (fi != nullptr && fi->fh != 0) ? reinterpret_cast<FileHandle*>(fi->fh) : nullptr;
  if (open_fh != nullptr && !open_fh->on_lower) {
    // ftruncate/fchmod/futimens on an open upper file: act on its fd (it may be unlinked).
    return setattr_fd(self, node, open_fh->fd.get(), attr, to_set, who, out);
  }
  // ensure_upper answers ESTALE for a node whose name no longer leads to it.
  bool truncating_to_zero = (to_set & FUSE_SET_ATTR_SIZE) && attr->st_size == 0;
  if (int rc = ensure_upper(self, node, !truncating_to_zero, who); rc != 0) {
    return rc;
  }
  InodeView v = self->table_.view(node);
  if (v.stale) {
    return -ESTALE;
  }
  int fd = v.upper;
  bool is_lnk = S_ISLNK(v.type);
  if (to_set & FUSE_SET_ATTR_MODE) {
    if (is_lnk) {
      return -EOPNOTSUPP;
    }
    if (chmod_fd(fd, self->ids_.settable(attr->st_mode, v.type, who.uid)) != 0) {
      return -errno;
    }
  }
  if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    Ids to = chown_target(self, *attr, to_set);
    if (::fchownat(fd, "", to.uid, to.gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
      return -errno;
    }
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (!S_ISREG(v.type)) {
      return -EINVAL;
    }
    std::lock_guard lk(v.node->mu);
    uint64_t want = static_cast<uint64_t>(attr->st_size);
    if (charge_growth(self, v.node, fd, 0, want, false) < want) {
      quota_refused(self, v.node, "bytes", who);
      return -EDQUOT;
    }
    FileHandle* fh = fi ? reinterpret_cast<FileHandle*>(fi->fh) : nullptr;
    int rc;
    if (fh != nullptr && !fh->on_lower) {
      rc = ::ftruncate(fh->fd.get(), attr->st_size);
    } else {
      UniqueFd w(reopen_fd(fd, O_WRONLY));
      rc = w ? ::ftruncate(w.get(), attr->st_size) : -1;
    }
    int e = errno;
    if (rc == 0) {
      kill_suid_sgid(fd, who);
    }
    settle_size(self, v.node, fd);
    if (rc != 0) {
      return -e;
    }
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME)) {
    timespec tv[2];
    setattr_times(*attr, to_set, tv);
    if (tv[0].tv_nsec != UTIME_OMIT || tv[1].tv_nsec != UTIME_OMIT) {
      // On the object itself, the symlink included (AT_EMPTY_PATH, never its target).
      if (utimens_fd(fd, tv) != 0) {
        return -errno;
      }
    }
  }
  // fd is the object (checked by identity, or an open handle of it): no second resolution.
  if (stat_fd(fd, out) != 0) {
    return -errno;
  }
  show(self, v.node->id, out);
  return 0;
}

// The ids a chown sets on disk (-1: left alone): the agent's own become the stored ones.
mode_t CowFs::Impl::create_mode(CowFs* self, mode_t mode, mode_t type, uid_t caller_uid) {
  mode_t perm = self->ids_.settable(mode, type, caller_uid);
  if (self->config_.direct) {
    // A directory's setgid only passes its group on; on anything else both bits run as another.
    perm &= ~(S_ISUID | (type == S_IFDIR ? 0 : S_ISGID));
  }
  return perm;
}

int CowFs::Impl::refuse_setid(CowFs* self, const struct stat& attr, int to_set, mode_t type) {
  if (!self->config_.direct || (to_set & FUSE_SET_ATTR_MODE) == 0) {
    return 0;
  }
  mode_t setid = S_ISUID | (type == S_IFDIR ? 0 : S_ISGID);
  return (attr.st_mode & setid) != 0 ? -EPERM : 0;
}

Ids CowFs::Impl::chown_target(CowFs* self, const struct stat& attr, int to_set) {
  return {
      (to_set & FUSE_SET_ATTR_UID) ? self->ids_.store_uid(attr.st_uid) : static_cast<uid_t>(-1),
      (to_set & FUSE_SET_ATTR_GID) ? self->ids_.store_gid(attr.st_gid) : static_cast<gid_t>(-1)};
}

// The utimensat/futimens pair a setattr asks for (UTIME_OMIT for a time it leaves alone).
void CowFs::Impl::setattr_times(const struct stat& attr, int to_set, timespec tv[2]) {
  tv[0].tv_nsec = UTIME_OMIT;
  tv[1].tv_nsec = UTIME_OMIT;
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    tv[0].tv_nsec = UTIME_NOW;
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    tv[0] = attr.st_atim;
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    tv[1].tv_nsec = UTIME_NOW;
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    tv[1] = attr.st_mtim;
  }
}

int CowFs::Impl::setattr_fd(CowFs* self, Inode* n, int fd, struct stat* attr, int to_set,
                            const Caller& who, struct stat* out) {
  if ((to_set & FUSE_SET_ATTR_MODE) &&
      ::fchmod(fd, self->ids_.settable(attr->st_mode, n->type, who.uid)) != 0) {
    return -errno;
  }
  if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    Ids to = chown_target(self, *attr, to_set);
    if (::fchown(fd, to.uid, to.gid) != 0) {
      return -errno;
    }
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    std::lock_guard lk(n->mu);
    uint64_t want = static_cast<uint64_t>(attr->st_size);
    if (charge_growth(self, n, fd, 0, want, false) < want) {
      quota_refused(self, n, "bytes", who);
      return -EDQUOT;
    }
    int rc = ::ftruncate(fd, attr->st_size) == 0 ? 0 : -errno;
    settle_size(self, n, fd);
    if (rc == 0) {
      kill_suid_sgid(fd, who);
    }
    if (rc != 0) {
      return rc;
    }
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
    timespec tv[2];
    setattr_times(*attr, to_set, tv);
    if (::futimens(fd, tv) != 0) {
      return -errno;
    }
  }
  if (::fstat(fd, out) != 0) {
    return -errno;
  }
  show(self, n->id, out);
  return 0;
}

int CowFs::Impl::do_statfs(fuse_req_t req, struct statvfs* out) {
  CowFs* self = fs(req);
  if (::fstatvfs(self->upper_root_.get(), out) != 0) {
    return -errno;
  }
  Usage u = self->quota_.usage();
  uint64_t bs = out->f_frsize ? out->f_frsize : 4096;
  if (self->quota_.byte_limit() != 0) {
    uint64_t limit = self->quota_.byte_limit();
    out->f_blocks = limit / bs;
    uint64_t free_bytes = limit > u.bytes ? limit - u.bytes : 0;
    out->f_bfree = std::min<uint64_t>(free_bytes / bs, out->f_bfree);
    out->f_bavail = std::min<uint64_t>(free_bytes / bs, out->f_bavail);
  }
  if (self->quota_.inode_limit() != 0) {
    uint64_t limit = self->quota_.inode_limit();
    out->f_files = limit;
    out->f_ffree = limit > u.inodes ? limit - u.inodes : 0;
    out->f_favail = out->f_ffree;
  }
  out->f_namemax = 255 - kWhiteoutPrefix.size();  // whiteouts need room for their prefix
  return 0;
}

// The object an xattr op acts on, in `*view` (which keeps its fd open until the caller is done).
int CowFs::Impl::xattr_target(CowFs* self, fuse_ino_t ino, bool write, const char* op,
                              const Caller& who, InodeView* view) {
  InodeView& v = *view;
  v = self->table_.view(ino);
  if (v.node == nullptr || v.stale) {
    return -ESTALE;
  }
  if (S_ISLNK(v.type)) {
    return -EOPNOTSUPP;  // user xattrs are not allowed on symlinks anyway
  }
  if (write) {
    // Whatever this op sets, the node no longer provably lacks security.capability. Cleared
    // before the write, so a concurrent probe answered from the flag is ordered before it.
    self->table_.set_no_caps(v.node, false);
    if (int rc = self->access_.check_write(self->table_.path_of(v.node), op, who); rc != 0) {
      return rc;
    }
    if (int rc = ensure_upper(self, v.node, true, who); rc != 0) {
      return rc;
    }
    v = self->table_.view(ino);
  }
  return 0;
}

// The xattr syscalls on a view's object: on an open handle's fd directly; an O_PATH fd (which
// the f*xattr calls and getxattrat refuse with EBADF) through its /proc/self/fd magic link,
// which leads to the fd's own inode and resolves no name of the view.
ssize_t CowFs::Impl::xattr_get(const InodeView& v, const char* name, void* buf, size_t size) {
  if (v.upper_open) {
    return ::fgetxattr(v.upper, name, buf, size);
  }
  return ::getxattr(proc_path(v.primary()).c_str(), name, buf, size);
}

ssize_t CowFs::Impl::xattr_list(const InodeView& v, char* buf, size_t size) {
  if (v.upper_open) {
    return ::flistxattr(v.upper, buf, size);
  }
  return ::listxattr(proc_path(v.primary()).c_str(), buf, size);
}

int CowFs::Impl::xattr_set(const InodeView& v, const char* name, const char* value, size_t size,
                           int flags) {
  if (v.upper_open) {
    return ::fsetxattr(v.upper, name, value, size, flags);
  }
  return ::setxattr(proc_path(v.primary()).c_str(), name, value, size, flags);
}

int CowFs::Impl::xattr_remove(const InodeView& v, const char* name) {
  if (v.upper_open) {
    return ::fremovexattr(v.upper, name);
  }
  return ::removexattr(proc_path(v.primary()).c_str(), name);
}

// The kernel asks for security.capability before the first write to a file and at every chown
// (to know whether to drop it). For a file the daemon made and nobody gave xattrs since, the
// answer is known: none. True when `ino` is such a node.
bool CowFs::Impl::known_without_caps(CowFs* self, fuse_ino_t ino, const char* name) {
  if (std::strcmp(name, "security.capability") != 0) {
    return false;
  }
  Inode* n = self->table_.find(ino);
  return n != nullptr && self->table_.no_caps(n);
}

// A view that keeps no xattrs answers every xattr op ENOSYS, on which the kernel sets
// no_setxattr/no_getxattr/no_listxattr/no_removexattr for the whole mount and never sends that op
// again (fs/fuse/xattr.c). That is the point: the two security.capability GETXATTRs the capability
// LSM asks for every written or chowned file are round trips no other answer stops. Userspace
// sees EOPNOTSUPP from all four calls, this first one included (the kernel maps ENOSYS to it), and
// the capability LSM reads EOPNOTSUPP as "no file capabilities". True when the op was answered.
bool CowFs::Impl::refuse_xattrs(fuse_req_t req) {
  if (fs(req)->keeps_xattrs()) {
    return false;
  }
  fuse_reply_err(req, ENOSYS);
  return true;
}

void CowFs::Impl::op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                             fuse_file_info* fi) {
  struct stat st;
  serve(
      req, [&] { return do_setattr(req, ino, attr, to_set, fi, &st); },
      [&](int rc) { reply_attr(req, rc, st); });
}

void CowFs::Impl::op_statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs st;
  int rc = firewall([&] { return Impl::do_statfs(req, &st); });
  if (rc != 0) {
    fuse_reply_err(req, -rc);
  } else {
    fuse_reply_statfs(req, &st);
  }
}

void CowFs::Impl::op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                              size_t size, int flags) {
  if (refuse_xattrs(req)) {
    return;
  }
  CowFs* self = fs(req);
  serve(
      req,
      [&] {
        InodeView v;
        const Caller who = caller(req);
        if (int r = self->ids_.refuse_xattr(name, who.uid); r != 0) {
          return r;
        }
        if (int r = xattr_target(self, ino, true, "setxattr", who, &v); r) {
          return r;
        }
        return xattr_set(v, name, value, size, flags) == 0 ? 0 : -errno;
      },
      [&](int rc) { reply_err(req, rc); });
}

void CowFs::Impl::op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  if (refuse_xattrs(req)) {
    return;
  }
  CowFs* self = fs(req);
  std::vector<char> buf(size);
  ssize_t n = 0;
  serve(
      req,
      [&] {
        if (known_without_caps(self, ino, name)) {
          return -ENODATA;
        }
        InodeView v;
        if (int r = xattr_target(self, ino, false, "getxattr", caller(req), &v); r) {
          return r == -EOPNOTSUPP ? -ENODATA : r;
        }
        n = xattr_get(v, name, size ? buf.data() : nullptr, size);
        return n < 0 ? -errno : 0;
      },
      [&](int rc) { reply_xattr(req, rc, size, buf, n); });
}

void CowFs::Impl::op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  if (refuse_xattrs(req)) {
    return;
  }
  CowFs* self = fs(req);
  std::vector<char> buf(size);
  ssize_t n = 0;
  serve(
      req,
      [&] {
        InodeView v;
        if (int r = xattr_target(self, ino, false, "listxattr", caller(req), &v); r) {
          if (r == -EOPNOTSUPP) {
            n = 0;
            return 0;
          }
          return r;
        }
        n = xattr_list(v, size ? buf.data() : nullptr, size);
        return n < 0 ? -errno : 0;
      },
      [&](int rc) { reply_xattr(req, rc, size, buf, n); });
}

void CowFs::Impl::op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  if (refuse_xattrs(req)) {
    return;
  }
  CowFs* self = fs(req);
  serve(
      req,
      [&] {
        InodeView v;
        if (int r = xattr_target(self, ino, true, "removexattr", caller(req), &v); r) {
          return r;
        }
        return xattr_remove(v, name) == 0 ? 0 : -errno;
      },
      [&](int rc) { reply_err(req, rc); });
}

}  // namespace cordon::fusefs
