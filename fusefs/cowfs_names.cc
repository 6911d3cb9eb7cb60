// Names: mknod/mkdir/symlink, unlink/rmdir with whiteouts, rename, link.
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

// Checks that `name` in `dir` may be created: plain, not reserved, write allowed, absent.
// `excl_decides`: the caller creates with O_EXCL semantics (EEXIST from the host call itself),
// so in a directory that merges no lower side (upper-only or opaque: no whiteouts, no lower
// names) absence is left to that call and not checked first. `inode` gets the new object's
// inode reserved; null: the name will be another link to an existing inode.
int CowFs::Impl::prepare_create(CowFs* self, fuse_req_t req, fuse_ino_t parent, const char* cname,
                                const char* op, InodeView* dir, std::string* path, Found* existing,
                                Quota::Reservation* inode, bool excl_decides) {
  std::string name(cname);
  if (!is_plain_name(name)) {
    return name.size() > 255 ? -ENAMETOOLONG : -EINVAL;
  }
  if (is_reserved_name(name)) {
    return -EPERM;  // ".wh.*" names belong to the layer format
  }
  *dir = self->table_.view(parent);
  if (dir->node == nullptr) {
    return -ENOENT;
  }
  if (dir->stale) {
    return -ESTALE;
  }
  *path = self->table_.child_path(dir->node, name);
  Caller who = caller(req);
  if (int rc = self->access_.check_create(*path, std::string_view(op) == "mkdir", op, who);
      rc != 0) {
    return rc;
  }
  bool merges_lower = dir->lower >= 0 && !dir->opaque;
  bool checked = !(excl_decides && dir->upper >= 0 && !merges_lower);
  if (checked) {
    int rc = resolve(*dir, name, existing);
    if (rc == 0) {
      return -EEXIST;
    }
    if (rc != -ENOENT) {
      return rc;
    }
    if (int rc2 = ensure_upper(self, dir->node, true, who); rc2 != 0) {
      return rc2;
    }
    *dir = self->table_.view(parent);
  }
  if (inode != nullptr && !inode->inode()) {
    // An existing name is EEXIST (or opened), never a quota refusal: check it now.
    if (!checked && resolve(*dir, name, existing) == 0) {
      return -EEXIST;
    }
    quota_refused(self, dir->node, "inodes", who);
    return -EDQUOT;
  }
  return 0;
}

// An object a root daemon just created (as root: `st` is its stat) gets the owner and group
// the caller would have got natively: the caller's uid, and the caller's gid or, in a setgid
// directory, the directory's. The host kernel applied that directory rule already (the upper
// directory carries the view's mode, and a new directory inherits its setgid bit there too),
// so the group the object has is the directory's exactly when it is not the daemon's own, or
// when it is and the directory is setgid: only that case asks the directory. Nothing to change
// (a root caller, the common case): no syscall. A chown clears S_ISUID (and may clear S_ISGID)
// of a regular file, which a native create keeps: put back. Acts on `fd` when >= 0, else on
// `name` in upper_dir (never following it). `st` is updated. 0 or -errno (of the stat; a failed
// chown leaves the object as it is, as it always has).
int CowFs::Impl::give_to_caller(int upper_dir, const char* name, int fd, const Caller& who,
                                struct stat* st) {
  static const gid_t daemon_gid = ::getegid();
  gid_t gid = who.gid;
  if (st->st_gid != who.gid) {
    struct stat dst;
    if (st->st_gid != daemon_gid ||
        (stat_fd(upper_dir, &dst) == 0 && (dst.st_mode & S_ISGID) != 0)) {
      gid = st->st_gid;
    }
  }
  if (st->st_uid == who.uid && st->st_gid == gid) {
    return 0;
  }
  mode_t setid = S_ISREG(st->st_mode) ? st->st_mode & (S_ISUID | S_ISGID) : 0;
  if (fd >= 0) {
    if (::fchown(fd, who.uid, gid) == 0 && setid != 0) {
      ::fchmod(fd, st->st_mode & 07777);
    }
    return ::fstat(fd, st) == 0 ? 0 : -errno;
  }
  if (::fchownat(upper_dir, name, who.uid, gid, AT_SYMLINK_NOFOLLOW) == 0 && setid != 0) {
    ::fchmodat(upper_dir, name, st->st_mode & 07777, 0);  // regular file: not a symlink
  }
  return ::fstatat(upper_dir, name, st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

// After creating `name` in the upper dir (and giving it to the caller): the whiteout goes.
void CowFs::Impl::finish_create(int upper_dir, const std::string& name, bool had_whiteout) {
  if (had_whiteout) {
    ::unlinkat(upper_dir, whiteout_name(name).c_str(), 0);
  }
}

int CowFs::Impl::make_whiteout(int upper_dir, const std::string& name) {
  std::string wh = whiteout_name(name);
  if (wh.size() > 255) {
    return -ENAMETOOLONG;  // documented limit: lower names over 251 bytes cannot be deleted
  }
  int fd =
      ::openat(upper_dir, wh.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return errno == EEXIST ? 0 : -errno;
  }
  ::close(fd);
  return 0;
}

// Merged emptiness of a directory (whiteouts and internal records do not count).
int CowFs::Impl::check_empty(const Found& f) {
  std::set<std::string> upper_names;
  int err = 0;
  if (f.upper) {
    for (auto& n : list_dir(f.upper.get(), &err)) {
      if (!is_reserved_name(n)) {
        return -ENOTEMPTY;
      }
      upper_names.insert(n);
    }
    if (err) {
      return -err;
    }
  }
  if (f.lower) {
    for (auto& n : list_dir(f.lower.get(), &err)) {
      if (is_reserved_name(n)) {
        continue;
      }
      if (upper_names.count(whiteout_name(n)) == 0) {
        return -ENOTEMPTY;
      }
    }
    if (err) {
      return -err;
    }
  }
  return 0;
}

// Releases quota of an upper object about to lose a name (only its last name frees it). `st`:
// the upper entry as this op's resolve() saw it. It still holds at the unlink: the daemon is the
// upper layer's only writer, and the kernel keeps the directory's and the victim's inode locks
// across UNLINK/RMDIR/RENAME (LINK takes the source's), so no other op changes that name or its
// link count in between.
void CowFs::Impl::release_for_unlink(CowFs* self, const struct stat& st) {
  if (S_ISDIR(st.st_mode) || st.st_nlink <= 1) {
    self->quota_.release_inode();
    if (S_ISREG(st.st_mode)) {
      Inode* n = self->table_.by_key(key_of(st));
      if (n != nullptr) {
        std::lock_guard lk(n->mu);
        uint64_t& acc = accounted(n, -1);
        if (!n->size_known) {
          acc = static_cast<uint64_t>(st.st_size);
        }
        self->quota_.release_bytes(acc);
        acc = 0;
        n->size_known = true;
      } else {
        self->quota_.release_bytes(static_cast<uint64_t>(st.st_size));
      }
    }
  }
}

int CowFs::Impl::do_mknod_like(fuse_req_t req, fuse_ino_t parent, const char* cname, mode_t mode,
                               const char* link_target, fuse_entry_param* e, const char* op) {
  CowFs* self = fs(req);
  InodeView dir;
  std::string path;
  Found existing;
  if (link_target == nullptr && !S_ISDIR(mode) && !S_ISFIFO(mode) && !S_ISREG(mode) &&
      !S_ISSOCK(mode)) {
    return -EPERM;  // no device nodes through the view
  }
  Quota::Reservation held(self->quota_);
  if (int rc = prepare_create(self, req, parent, cname, op, &dir, &path, &existing, &held);
      rc != 0) {
    return rc;
  }
  std::string name(cname);
  Caller who = caller(req);
  bool had_whiteout = existing.whiteout;
  mode_t perm = create_mode(self, mode, mode & S_IFMT, who.uid);
  int rc = 0;
  if (link_target != nullptr) {
    rc = ::symlinkat(link_target, dir.upper, cname) == 0 ? 0 : -errno;
  } else if (S_ISDIR(mode)) {
    // Built under a temp name with its opaque marker, then renamed in: a directory that
    // replaces a deleted lower one must never show the old lower contents, even for an instant.
    std::string tmp = temp_name();
    if (::mkdirat(dir.upper, tmp.c_str(), perm) != 0) {
      rc = -errno;
    } else {
      if (existing.lower_shadowed) {
        UniqueFd d(open_beneath(dir.upper, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
        if (!d || make_opaque_marker(d.get()) != 0) {
          rc = -EIO;
        }
      }
      if (rc == 0 && ::renameat2(dir.upper, tmp.c_str(), dir.upper, cname, RENAME_NOREPLACE) != 0) {
        rc = -errno;
      }
      if (rc != 0) {
        remove_tree_at(dir.upper, tmp);
      }
    }
  } else if (S_ISFIFO(mode) || S_ISSOCK(mode)) {
    // A socket's node is a name in the upper layer; the kernel binds the socket to the view's
    // inode, so connect(2) through the view reaches it while the binder lives.
    rc = ::mknodat(dir.upper, cname, (mode & S_IFMT) | perm, 0) == 0 ? 0 : -errno;
  } else {
    int fd = ::openat(dir.upper, cname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perm);
    rc = fd >= 0 ? 0 : -errno;
    if (fd >= 0) {
      ::close(fd);
    }
  }
  if (rc != 0) {
    return rc;
  }
  held.commit();
  if (daemon_is_root()) {
    struct stat st;
    if (::fstatat(dir.upper, cname, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      give_to_caller(dir.upper, cname, -1, stored(self, who), &st);
    }
  }
  finish_create(dir.upper, name, had_whiteout);
  return lookup_entry(self, dir, name, e);
}

int CowFs::Impl::make_opaque_marker(int dirfd) {
  int fd = ::openat(dirfd, std::string(kOpaqueMarker).c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return errno == EEXIST ? 0 : -errno;
  }
  ::close(fd);
  return 0;
}

int CowFs::Impl::do_remove(fuse_req_t req, fuse_ino_t parent, const char* cname, bool is_rmdir) {
  CowFs* self = fs(req);
  Caller who = caller(req);
  InodeView dir = self->table_.view(parent);
  if (dir.node == nullptr) {
    return -ENOENT;
  }
  if (dir.stale) {
    return -ESTALE;
  }
  std::string name(cname);
  std::string path = self->table_.child_path(dir.node, name);
  if (int rc = self->access_.check_write(path, is_rmdir ? "rmdir" : "unlink", who); rc != 0) {
    return rc;
  }
  Found f;
  if (int rc = resolve(dir, name, &f); rc != 0) {
    return rc;
  }
  bool is_dir = S_ISDIR(f.st.st_mode);
  if (is_rmdir && !is_dir) {
    return -ENOTDIR;
  }
  if (!is_rmdir && is_dir) {
    return -EISDIR;
  }
  if (is_rmdir) {
    if (int rc = check_empty(f); rc != 0) {
      return rc;
    }
  }
  if (int rc = ensure_upper(self, dir.node, true, who); rc != 0) {
    return rc;
  }
  dir = self->table_.view(parent);
  // Whiteout first: if the daemon dies between the two steps, the upper entry still wins and
  // the view shows the old state, never a resurrected lower file under a half-removed one.
  if (f.lower_shadowed) {
    if (int rc = record_origin_if_new(dir, name); rc != 0) {
      return rc;
    }
    if (int rc = make_whiteout(dir.upper, name); rc != 0) {
      return rc;
    }
  }
  if (f.has_upper) {
    release_for_unlink(self, f.st);
    if (is_dir) {
      // Move the (merged-empty) upper directory aside, then clear out its whiteouts.
      std::string tmp = temp_name();
      if (::renameat(dir.upper, cname, dir.upper, tmp.c_str()) != 0) {
        return -errno;
      }
      remove_tree_at(dir.upper, tmp);
    } else if (::unlinkat(dir.upper, cname, 0) != 0) {
      return -errno;
    }
  }
  return 0;
}

// An entry about to appear at `path` by rename: checked as created there, and a directory
// (upper-only: one with lower content was refused with EXDEV) with its whole tree.
int CowFs::Impl::check_landing(CowFs* self, const Found& f, const std::string& from,
                               const std::string& path, const Caller& who) {
  bool is_dir = S_ISDIR(f.st.st_mode);
  if (int rc = self->access_.check_create(path, is_dir, "rename", who); rc != 0) {
    return rc;
  }
  if (!is_dir || !f.has_upper) {
    return 0;
  }
  UniqueFd d(reopen_fd(f.upper.get(), O_RDONLY | O_DIRECTORY));
  return d ? self->access_.check_tree_move(d.get(), from, path, who) : -EIO;
}

int CowFs::Impl::do_rename(fuse_req_t req, fuse_ino_t parent, const char* cname,
                           fuse_ino_t newparent, const char* cnewname, unsigned int flags) {
  CowFs* self = fs(req);
  Caller who = caller(req);
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
    return -EINVAL;  // RENAME_WHITEOUT is overlayfs's business, not the sandbox's
  }
  std::string name(cname), newname(cnewname);
  if (!is_plain_name(newname)) {
    return newname.size() > 255 ? -ENAMETOOLONG : -EINVAL;
  }
  if (is_reserved_name(newname) || is_reserved_name(name)) {
    return -EPERM;
  }
  InodeView src_dir = self->table_.view(parent);
  InodeView dst_dir = self->table_.view(newparent);
  if (src_dir.node == nullptr || dst_dir.node == nullptr) {
    return -ENOENT;
  }
  if (src_dir.stale || dst_dir.stale) {
    return -ESTALE;
  }
  std::string src_path = self->table_.child_path(src_dir.node, name);
  std::string dst_path = self->table_.child_path(dst_dir.node, newname);
  // Into or out of a denied name is refused both ways: `mv .env x` must not make it readable,
  // `mv x .git/hooks/pre-commit` must not plant a hook.
  for (const std::string* p : {&src_path, &dst_path}) {
    if (int rc = self->access_.check_read(*p, "rename", who); rc != 0) {
      return rc;
    }
    if (int rc = self->access_.check_write(*p, "rename", who); rc != 0) {
      return rc;
    }
  }
  Found src, dst;
  if (int rc = resolve(src_dir, name, &src); rc != 0) {
    return rc;
  }
  int drc = resolve(dst_dir, newname, &dst);
  if (drc != 0 && drc != -ENOENT) {
    return drc;
  }
  bool dst_exists = drc == 0;
  if ((flags & RENAME_NOREPLACE) && dst_exists) {
    return -EEXIST;
  }
  if ((flags & RENAME_EXCHANGE) && !dst_exists) {
    return -ENOENT;
  }
  if (dst_exists && src.upper_key == dst.upper_key && src.lower_key == dst.lower_key) {
    return 0;  // same object (hard links): rename(2) does nothing
  }
  bool src_dir_is = S_ISDIR(src.st.st_mode);
  // Directories with lower content would have to move their whole lower subtree: refuse with
  // EXDEV like kernel overlayfs without redirect_dir; mv(1) falls back to copy + delete.
  if (src_dir_is && src.lower_shadowed) {
    return -EXDEV;
  }
  if ((flags & RENAME_EXCHANGE) && S_ISDIR(dst.st.st_mode) && dst.lower_shadowed) {
    return -EXDEV;
  }
  // What lands at a name must be creatable there, with all it carries: `mv gitdir .git` must
  // not plant the .git/config and hooks that writing them directly may not, and what a
  // directory carries must be removable where it was.
  if (int rc = check_landing(self, src, src_path, dst_path, who); rc != 0) {
    return rc;
  }
  if (flags & RENAME_EXCHANGE) {
    if (int rc = check_landing(self, dst, dst_path, src_path, who); rc != 0) {
      return rc;
    }
  }
  if (dst_exists && !(flags & RENAME_EXCHANGE)) {
    bool dst_is_dir = S_ISDIR(dst.st.st_mode);
    if (src_dir_is && !dst_is_dir) {
      return -ENOTDIR;
    }
    if (!src_dir_is && dst_is_dir) {
      return -EISDIR;
    }
    if (dst_is_dir) {
      if (int rc = check_empty(dst); rc != 0) {
        return rc;
      }
    }
  }
  // Copy the source up (files keep their bytes), and both parents. The lookups made here hold
  // their Inodes until the rename is done (forgotten on every return path).
  struct LookupRef {
    InodeTable* table;
    uint64_t id = 0;
    ~LookupRef() {
      if (id != 0) {
        table->forget(id, 1);
      }
    }
  };
  LookupRef src_ref{&self->table_}, dst_ref{&self->table_};
  Inode* src_node = nullptr;
  {
    fuse_entry_param e;
    if (int rc = lookup_entry(self, src_dir, name, &e); rc != 0) {
      return rc;
    }
    src_ref.id = e.ino;
    src_node = self->table_.find(e.ino);
    if (int rc = ensure_upper(self, src_node, true, who); rc != 0) {
      return rc;
    }
  }
  Inode* dst_node = nullptr;
  if (flags & RENAME_EXCHANGE) {
    fuse_entry_param e;
    if (int rc = lookup_entry(self, dst_dir, newname, &e); rc != 0) {
      return rc;
    }
    dst_ref.id = e.ino;
    dst_node = self->table_.find(e.ino);
    if (int rc = ensure_upper(self, dst_node, true, who); rc != 0) {
      return rc;
    }
  }
  if (int rc = ensure_upper(self, dst_dir.node, true, who); rc != 0) {
    return rc;
  }
  src_dir = self->table_.view(parent);
  dst_dir = self->table_.view(newparent);
  if (flags & RENAME_EXCHANGE) {
    if (::renameat2(src_dir.upper, cname, dst_dir.upper, cnewname, RENAME_EXCHANGE) != 0) {
      return -errno;
    }
    self->table_.moved(src_node, dst_dir.node, newname);
    self->table_.moved(dst_node, src_dir.node, name);
    return 0;
  }
  // The source's old name must stay deleted where a lower entry sits under it: whiteout first.
  if (src.lower_shadowed) {
    if (int rc = make_whiteout(src_dir.upper, name); rc != 0) {
      return rc;
    }
  }
  if (dst.lower_shadowed) {
    if (int rc = record_origin_if_new(dst_dir, newname); rc != 0) {
      return rc;
    }
  }
  if (dst_exists && dst.has_upper) {
    release_for_unlink(self, dst.st);
    if (S_ISDIR(dst.st.st_mode)) {
      // rename(2) replaces only empty directories: drop the target's whiteouts first.
      UniqueFd d(reopen_fd(dst.upper.get(), O_RDONLY | O_DIRECTORY));
      if (!d || clear_dir(d.get()) != 0) {
        return -EIO;
      }
    }
  }
  if (src_dir_is && dst.lower_shadowed) {
    // The moved directory lands over a lower directory: it must not merge with it.
    UniqueFd d(reopen_fd(self->table_.view(src_node).upper, O_RDONLY | O_DIRECTORY));
    if (!d || make_opaque_marker(d.get()) != 0) {
      return -EIO;
    }
  }
  if (::renameat2(src_dir.upper, cname, dst_dir.upper, cnewname, flags & RENAME_NOREPLACE) != 0) {
    return -errno;
  }
  if (dst.whiteout) {
    ::unlinkat(dst_dir.upper, whiteout_name(newname).c_str(), 0);
  }
  if (src_dir_is && dst.lower_shadowed) {
    InodeView sv = self->table_.view(src_node);
    self->table_.set_upper(src_node, UniqueFd(::fcntl(sv.upper, F_DUPFD_CLOEXEC, 0)), src_node->key,
                           true);
  }
  self->table_.moved(src_node, dst_dir.node, newname);
  return 0;
}

int CowFs::Impl::do_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* cnewname,
                         fuse_entry_param* e) {
  CowFs* self = fs(req);
  Caller who = caller(req);
  InodeView v = self->table_.view(ino);
  if (v.node == nullptr || v.stale) {
    return -ESTALE;
  }
  // A second name is a second way to write the same bytes: the source must be writable too.
  std::string src_path = self->table_.path_of(v.node);
  if (int rc = self->access_.check_read(src_path, "link", who); rc != 0) {
    return rc;
  }
  if (int rc = self->access_.check_write(src_path, "link", who); rc != 0) {
    return rc;
  }
  InodeView dir;
  std::string path;
  Found existing;
  // A new name, not a new inode: no inode charged.
  if (int rc =
          prepare_create(self, req, newparent, cnewname, "link", &dir, &path, &existing, nullptr);
      rc != 0) {
    return rc;
  }
  if (int rc = ensure_upper(self, v.node, true, who); rc != 0) {
    return rc;
  }
  v = self->table_.view(ino);
  if (::linkat(AT_FDCWD, proc_path(v.upper).c_str(), dir.upper, cnewname, AT_SYMLINK_FOLLOW) != 0) {
    return -errno;
  }
  if (existing.whiteout) {
    ::unlinkat(dir.upper, whiteout_name(cnewname).c_str(), 0);
  }
  return lookup_entry(self, dir, cnewname, e);
}

void CowFs::Impl::op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                           dev_t) {
  fuse_entry_param e;
  serve(
      req, [&] { return do_mknod_like(req, parent, name, mode, nullptr, &e, "mknod"); },
      [&](int rc) { reply_entry(req, rc, e); });
}

void CowFs::Impl::op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  fuse_entry_param e;
  serve(
      req, [&] { return do_mknod_like(req, parent, name, mode | S_IFDIR, nullptr, &e, "mkdir"); },
      [&](int rc) { reply_entry(req, rc, e); });
}

void CowFs::Impl::op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent,
                             const char* name) {
  fuse_entry_param e;
  serve(
      req, [&] { return do_mknod_like(req, parent, name, S_IFLNK | 0777, link, &e, "symlink"); },
      [&](int rc) { reply_entry(req, rc, e); });
}

void CowFs::Impl::op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  serve(
      req, [&] { return do_remove(req, parent, name, false); },
      [&](int rc) { reply_err(req, rc); });
}

void CowFs::Impl::op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  serve(
      req, [&] { return do_remove(req, parent, name, true); }, [&](int rc) { reply_err(req, rc); });
}

void CowFs::Impl::op_rename(fuse_req_t req, fuse_ino_t parent, const char* name,
                            fuse_ino_t newparent, const char* newname, unsigned int flags) {
  serve(
      req, [&] { return do_rename(req, parent, name, newparent, newname, flags); },
      [&](int rc) { reply_err(req, rc); });
}

void CowFs::Impl::op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                          const char* newname) {
  fuse_entry_param e;
  serve(
      req, [&] { return do_link(req, ino, newparent, newname, &e); },
      [&](int rc) { reply_entry(req, rc, e); });
}

}  // namespace cordon::fusefs
