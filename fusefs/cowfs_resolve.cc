// Resolution: a name in the merged view, its attributes, lookup and forget.
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

// Finds `name` in the directory `dir` of the view. 0 or -errno (-ENOENT when absent).
int CowFs::Impl::resolve(const InodeView& dir, const std::string& name, Found* f) {
  if (!is_plain_name(name)) {
    return name.size() > 255 ? -ENAMETOOLONG : -ENOENT;
  }
  if (is_reserved_name(name)) {
    return -ENOENT;
  }
  bool merge_lower = dir.lower >= 0 && !dir.opaque;
  if (dir.upper >= 0) {
    int rc = stat_entry(dir.upper, name, &f->upper, &f->st);
    if (rc == 0) {
      f->has_upper = true;
      f->upper_key = key_of(f->st);
      if (merge_lower) {
        struct stat lst;
        if (::fstatat(dir.lower, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0) {
          f->lower_shadowed = true;
          if (S_ISDIR(f->st.st_mode) && S_ISDIR(lst.st_mode) &&
              !has_opaque_marker(f->upper.get())) {
            int lfd = ::openat(dir.lower, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
            if (lfd >= 0) {
              f->lower.reset(lfd);
              f->has_lower = true;
              f->lower_key = key_of(lst);
            }
          }
        }
      }
      f->opaque = S_ISDIR(f->st.st_mode) && !f->lower;
      return 0;
    }
    if (rc != -ENOENT) {
      return rc;
    }
    // Whiteouts exist only where a lower side is merged: an upper-only or opaque directory is
    // never given one (deletes and renames whiteout only lower_shadowed names), so its
    // absent names cost one syscall.
    if (merge_lower && exists_at(dir.upper, whiteout_name(name))) {
      f->whiteout = true;
      f->lower_shadowed = exists_at(dir.lower, name);
      return -ENOENT;
    }
  }
  if (!merge_lower) {
    return -ENOENT;
  }
  if (int rc = stat_entry(dir.lower, name, &f->lower, &f->st); rc != 0) {
    return rc;
  }
  f->has_lower = true;
  f->lower_key = key_of(f->st);
  f->lower_shadowed = true;
  return 0;
}

// The attributes of `name` in a layer directory, and for a directory an O_PATH fd of it (what
// the Inode keeps). Other objects need no fd: one fstatat, not an open + fstat + close; later
// ops reopen them by name and check the identity recorded here. 0 or -errno.
int CowFs::Impl::stat_entry(int dirfd, const std::string& name, UniqueFd* dir_fd, struct stat* st) {
  if (::fstatat(dirfd, name.c_str(), st, AT_SYMLINK_NOFOLLOW) != 0) {
    return -errno;
  }
  if (!S_ISDIR(st->st_mode)) {
    return 0;
  }
  int fd = ::openat(dirfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return -errno;
  }
  dir_fd->reset(fd);
  // What the fd holds is the truth (the name may have been replaced between the two calls).
  return stat_fd(fd, st) == 0 ? 0 : -errno;
}

// What the view shows of an object's attributes: its number, and its owner as the id map
// presents it (the kernel checks permissions against these: default_permissions).
void CowFs::Impl::show(CowFs* self, uint64_t id, struct stat* st) {
  st->st_ino = id;
  self->ids_.present(st);
}

// The ids a caller's new objects get on disk (id_map.h), as a Caller for give_to_caller.
Caller CowFs::Impl::stored(CowFs* self, Caller who) {
  who.uid = self->ids_.store_uid(who.uid);
  who.gid = self->ids_.store_gid(who.gid);
  return who;
}

void CowFs::Impl::fill_entry(CowFs* self, Inode* n, const struct stat& st, fuse_entry_param* e) {
  std::memset(e, 0, sizeof(*e));
  e->ino = n->id;
  e->generation = 1;
  e->attr = st;
  show(self, n->id, &e->attr);
  e->attr_timeout = self->config_.cache_timeout;
  e->entry_timeout = self->config_.cache_timeout;
}

// lookup without the policy check; registers the result (nlookup+1).
int CowFs::Impl::lookup_entry(CowFs* self, const InodeView& dir, const std::string& name,
                              fuse_entry_param* e) {
  Found f;
  if (int rc = resolve(dir, name, &f); rc != 0) {
    return rc;
  }
  Inode* n = self->table_.add_lookup(dir.node, name, f.st.st_mode & S_IFMT,
                                     std::move(static_cast<InodeTable::Sides&>(f)));
  fill_entry(self, n, f.st, e);
  return 0;
}

int CowFs::Impl::stat_inode(CowFs* self, Inode* n, struct stat* st) {
  if (n == nullptr) {
    return -ENOENT;
  }
  if (int rc = self->table_.stat(n, st); rc != 0) {
    return rc;
  }
  show(self, n->id, st);
  return 0;
}

std::pair<Inode*, std::string> CowFs::Impl::parent_and_name(CowFs* self, Inode* node) {
  // InodeTable guards parent/name; entries() is heavy, so read them via a tiny locked copy.
  return self->table_.parent_and_name(node);
}

int CowFs::Impl::do_lookup(fuse_req_t req, fuse_ino_t parent, const char* cname,
                           fuse_entry_param* e) {
  CowFs* self = fs(req);
  InodeView dir = self->table_.view(parent);
  if (dir.node == nullptr) {
    return -ENOENT;
  }
  if (dir.stale) {
    return -ESTALE;
  }
  std::string name(cname);
  if (is_plain_name(name) && !is_reserved_name(name)) {
    if (int rc = self->access_.check_read(self->table_.child_path(dir.node, name), "lookup",
                                          caller(req));
        rc != 0) {
      return rc;
    }
  }
  return lookup_entry(self, dir, name, e);
}

int CowFs::Impl::do_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct stat* st) {
  if (fi != nullptr && fi->fh != 0) {
    // fstat of an open file: its own fd answers, even after its name was unlinked.
    auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
    if (!fh->on_lower) {
      if (::fstat(fh->fd.get(), st) != 0) {
        return -errno;
      }
      show(fs(req), fh->node->id, st);
      return 0;
    }
  }
  CowFs* self = fs(req);
  return stat_inode(self, self->table_.find(ino), st);
}

int CowFs::Impl::do_readlink(fuse_req_t req, fuse_ino_t ino, std::string* out) {
  InodeView v = fs(req)->table_.view(ino);
  if (v.node == nullptr || v.stale) {
    return -ESTALE;
  }
  char buf[PATH_MAX + 1];
  ssize_t n = ::readlinkat(v.primary(), "", buf, sizeof(buf) - 1);
  if (n < 0) {
    return -errno;
  }
  out->assign(buf, static_cast<size_t>(n));
  return 0;
}

void CowFs::Impl::op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_entry_param e;
  serve(
      req,
      [&] {
        int rc = do_lookup(req, parent, name, &e);
        if (rc == -ENOENT) {
          // A negative entry (ino 0) the kernel caches like a positive one. No bookkeeping:
          // names appear in the view only through the kernel's own create/mkdir/link/rename,
          // which replace negative dentries, or through a rollback, which invalidates every name
          // the restored view can hold under every directory the kernel knows (rollback_to says
          // why that is complete).
          std::memset(&e, 0, sizeof(e));
          e.entry_timeout = fs(req)->config_.cache_timeout;
          rc = 0;
        }
        return rc;
      },
      [&](int rc) { reply_entry(req, rc, e); });
}

void CowFs::Impl::op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  serve(
      req,
      [&] {
        fs(req)->table_.forget(ino, nlookup);
        return 0;
      },
      [&](int) { fuse_reply_none(req); });
}

void CowFs::Impl::op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  serve(
      req,
      [&] {
        for (size_t i = 0; i < count; i++) {
          fs(req)->table_.forget(forgets[i].ino, forgets[i].nlookup);
        }
        return 0;
      },
      [&](int) { fuse_reply_none(req); });
}

void CowFs::Impl::op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  struct stat st;
  serve(
      req, [&] { return do_getattr(req, ino, fi, &st); }, [&](int rc) { reply_attr(req, rc, st); });
}

void CowFs::Impl::op_readlink(fuse_req_t req, fuse_ino_t ino) {
  std::string target;
  serve(
      req, [&] { return do_readlink(req, ino, &target); },
      [&](int rc) {
        if (rc != 0) {
          fuse_reply_err(req, -rc);
        } else {
          fuse_reply_readlink(req, target.c_str());
        }
      });
}

}  // namespace cordon::fusefs
