// The merged copy-on-write view: lookup/readdir merge the layers, every write copies up first.
//
// Each FUSE callback below goes through Impl::serve: the op's body inside an exception firewall
// with the layer lock held shared, every lock released, and only then exactly one reply.
#include "fusefs/cowfs.h"

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
#include <mutex>
#include <new>
#include <set>
#include <tuple>
#include <vector>

#include "fusefs/kernel/passthrough.h"
#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {

namespace {

DevIno key_of(const struct stat& st) { return {st.st_dev, st.st_ino}; }

bool exists_at(int dirfd, const std::string& name) {
  struct stat st;
  return dirfd >= 0 && ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

bool has_opaque_marker(int dirfd) { return exists_at(dirfd, std::string(kOpaqueMarker)); }

std::string proc_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// The daemon's effective uid never changes while it runs: asked once, not once per create.
bool daemon_is_root() {
  static const bool root = ::geteuid() == 0;
  return root;
}

// Runs `body` (returning 0 or -errno) so that no exception escapes into libfuse.
template <typename F>
int firewall(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  } catch (...) {
    return -EIO;
  }
}

struct FileHandle {
  Inode* node = nullptr;
  SharedFd fd;  // the fd the file was opened on (upper, or lower for read-only opens)
  DevIno key;   // the identity of the file fd is open on
  bool on_lower = false;
  bool tmpfile = false;   // made by O_TMPFILE: its quota goes back at release if never linked
  bool writable = false;  // counted in node->writers
  std::mutex mu;          // guards `upper_fd`
  UniqueFd upper_fd;      // a read-only reopen of the upper file once another opener copied it up
  // Its io mode (passthrough.h), counted in node->pt_opens or node->pt_cached_opens.
  bool passthrough = false;
  bool counted_cached = false;
};

struct DirEntry {
  std::string name;
  uint64_t ino;
  unsigned char type;
  DevIno key;  // the layer object the name was listed from
};

struct DirHandle {
  Inode* node = nullptr;
  std::vector<DirEntry> entries;
};

}  // namespace

// Everything about one op lives here; CowFs keeps only state.
struct CowFs::Impl {
  static CowFs* fs(fuse_req_t req) { return static_cast<CowFs*>(fuse_req_userdata(req)); }
  static Caller caller(fuse_req_t req) {
    const fuse_ctx* c = fuse_req_ctx(req);
    return {c->pid, c->uid, c->gid};
  }

  // The one way an op is served: `body` (returning 0 or -errno) runs inside the exception
  // firewall with the layer lock held shared; every lock is released before `reply(rc)` sends the
  // op's one reply (a reply can block on the kernel, which may be waiting on another of our ops).
  template <typename Body, typename Reply>
  static void serve(fuse_req_t req, Body&& body, Reply&& reply) {
    int rc;
    {
      std::shared_lock lk(fs(req)->layer_mu_);
      rc = firewall(std::forward<Body>(body));
    }
    reply(rc);
  }

  // The replies `serve` callers share: the error, or the op's answer when rc is 0.
  static void reply_err(fuse_req_t req, int rc) { fuse_reply_err(req, -rc); }
  static void reply_entry(fuse_req_t req, int rc, const fuse_entry_param& e) {
    if (rc != 0) {
      fuse_reply_err(req, -rc);
    } else {
      fuse_reply_entry(req, &e);
    }
  }
  static void reply_attr(fuse_req_t req, int rc, const struct stat& st) {
    if (rc != 0) {
      fuse_reply_err(req, -rc);
    } else {
      fuse_reply_attr(req, &st, fs(req)->config_.cache_timeout);
    }
  }
  // getxattr/listxattr: size 0 asks for the length only.
  static void reply_xattr(fuse_req_t req, int rc, size_t size, const std::vector<char>& buf,
                          ssize_t n) {
    if (rc != 0) {
      fuse_reply_err(req, -rc);
    } else if (size == 0) {
      fuse_reply_xattr(req, static_cast<size_t>(n));
    } else {
      fuse_reply_buf(req, buf.data(), static_cast<size_t>(n));
    }
  }

  // ---- resolution -------------------------------------------------------------------------

  // The layers' sides of the name (fds only for directories) and what the view shows of it.
  struct Found : InodeTable::Sides {
    struct stat st {};            // of the entry the view shows (upper's if any)
    bool whiteout = false;        // the name is deleted in the view over a lower entry
    bool lower_shadowed = false;  // lower has the name under the upper entry (or under a whiteout)
  };

  // Finds `name` in the directory `dir` of the view. 0 or -errno (-ENOENT when absent).
  static int resolve(const InodeView& dir, const std::string& name, Found* f) {
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
  static int stat_entry(int dirfd, const std::string& name, UniqueFd* dir_fd, struct stat* st) {
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
  static void show(CowFs* self, uint64_t id, struct stat* st) {
    st->st_ino = id;
    self->ids_.present(st);
  }

  // The ids a caller's new objects get on disk (id_map.h), as a Caller for give_to_caller.
  static Caller stored(CowFs* self, Caller who) {
    who.uid = self->ids_.store_uid(who.uid);
    who.gid = self->ids_.store_gid(who.gid);
    return who;
  }

  static void fill_entry(CowFs* self, Inode* n, const struct stat& st, fuse_entry_param* e) {
    std::memset(e, 0, sizeof(*e));
    e->ino = n->id;
    e->generation = 1;
    e->attr = st;
    show(self, n->id, &e->attr);
    e->attr_timeout = self->config_.cache_timeout;
    e->entry_timeout = self->config_.cache_timeout;
  }

  // lookup without the policy check; registers the result (nlookup+1).
  static int lookup_entry(CowFs* self, const InodeView& dir, const std::string& name,
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

  static int stat_inode(CowFs* self, Inode* n, struct stat* st) {
    if (n == nullptr) {
      return -ENOENT;
    }
    if (int rc = self->table_.stat(n, st); rc != 0) {
      return rc;
    }
    show(self, n->id, st);
    return 0;
  }

  // What the kernel would do on write and truncate by a caller without CAP_FSETID, which with
  // FUSE_CAP_HANDLE_KILLPRIV is ours to do (the daemon writes as itself, often root, for whom the
  // host kernel keeps the bits). A caller the view sees as uid 0 keeps them, like root natively.
  static void kill_suid_sgid(int fd, const Caller& who) {
    struct stat st;
    if (who.uid == 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      return;
    }
    mode_t kill = st.st_mode & S_ISUID;
    if ((st.st_mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP)) {
      kill |= S_ISGID;
    }
    if (kill != 0) {
      chmod_fd(fd, st.st_mode & 07777 & ~kill);  // fd may be O_PATH
    }
  }

  // Who changes a file's bytes through `fi`. Page-cache writeback (a shared mmap's pages) comes
  // with no writer's ids; under an owner map the writer can only be the agent, whose bytes must
  // not stay in a set-id file, so it counts as a caller that is not uid 0.
  static Caller writer(CowFs* self, fuse_req_t req, const fuse_file_info* fi) {
    Caller who = caller(req);
    if (fi->writepage && self->ids_.active()) {
      who.uid = static_cast<uid_t>(-1);
    }
    return who;
  }

  // ---- copy-up ------------------------------------------------------------------------------

  // Writes the origin record of a copied-up regular file: what commit compares against later.
  static int write_origin(int upper_dir, const std::string& name, const struct stat& lst) {
    std::string oname = origin_name(name);
    if (oname.size() > 255) {
      return 0;  // no room for a record: commit treats the file as having no known origin
    }
    std::string tmp = temp_name();
    UniqueFd fd(open_beneath(upper_dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
    if (!fd) {
      return -errno;
    }
    std::string line = std::to_string(lst.st_ino) + " " + std::to_string(lst.st_size) + " " +
                       std::to_string(static_cast<int64_t>(lst.st_mtim.tv_sec) * 1000000000 +
                                      lst.st_mtim.tv_nsec) +
                       "\n";
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
  static int record_origin_if_new(const InodeView& dir, const std::string& name) {
    if (dir.lower < 0 || dir.opaque || exists_at(dir.upper, origin_name(name))) {
      return 0;
    }
    struct stat lst;
    if (::fstatat(dir.lower, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0 ||
        S_ISDIR(lst.st_mode)) {
      return 0;
    }
    return write_origin(dir.upper, name, lst);
  }

  // Makes sure `node` exists in the upper layer, copying it (and its parents first) up from the
  // lower. `with_data` false skips the file's bytes (it is about to be truncated to 0).
  // The copy is built under a temp name and renamed into place: never half-visible, even after
  // a kill -9.
  static int ensure_upper(CowFs* self, Inode* node, bool with_data, const Caller& who) {
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
      self->access_.quota_hit(self->table_.path_of(node), "bytes", u.bytes,
                              self->quota_.byte_limit(), who);
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

  static std::pair<Inode*, std::string> parent_and_name(CowFs* self, Inode* node) {
    // InodeTable guards parent/name; entries() is heavy, so read them via a tiny locked copy.
    return self->table_.parent_and_name(node);
  }

  // Builds `name` in upper_dir as a copy of the lower object (O_PATH fd lfd, stat lst).
  static int copy_up_object(int upper_dir, const std::string& name, int lfd, const struct stat& lst,
                            bool with_data) {
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

  static int copy_attrs(int src, int dst, const struct stat& st) {
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
  static uint64_t& accounted(Inode* n, int upper_fd) {
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
  static uint64_t charge_growth(CowFs* self, Inode* n, int upper_fd, uint64_t start, uint64_t end,
                                bool allow_partial) {
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
  static void settle_size(CowFs* self, Inode* n, int fd) {
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

  static void quota_refused(CowFs* self, Inode* n, const char* what, const Caller& who) {
    Usage u = self->quota_.usage();
    bool bytes = std::strcmp(what, "bytes") == 0;
    self->access_.quota_hit(self->table_.path_of(n), what, bytes ? u.bytes : u.inodes,
                            bytes ? self->quota_.byte_limit() : self->quota_.inode_limit(), who);
  }

  // ---- helpers for creating names ---------------------------------------------------------

  // Checks that `name` in `dir` may be created: plain, not reserved, write allowed, absent.
  // `excl_decides`: the caller creates with O_EXCL semantics (EEXIST from the host call itself),
  // so in a directory that merges no lower side (upper-only or opaque: no whiteouts, no lower
  // names) absence is left to that call and not checked first. `inode` gets the new object's
  // inode reserved; null: the name will be another link to an existing inode.
  static int prepare_create(CowFs* self, fuse_req_t req, fuse_ino_t parent, const char* cname,
                            const char* op, InodeView* dir, std::string* path, Found* existing,
                            Quota::Reservation* inode, bool excl_decides = false) {
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
  static int give_to_caller(int upper_dir, const char* name, int fd, const Caller& who,
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
  static void finish_create(int upper_dir, const std::string& name, bool had_whiteout) {
    if (had_whiteout) {
      ::unlinkat(upper_dir, whiteout_name(name).c_str(), 0);
    }
  }

  static int make_whiteout(int upper_dir, const std::string& name) {
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
  static int check_empty(const Found& f) {
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
  static void release_for_unlink(CowFs* self, const struct stat& st) {
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

  // ---- the ops --------------------------------------------------------------------------------

  static int do_lookup(fuse_req_t req, fuse_ino_t parent, const char* cname, fuse_entry_param* e) {
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

  static int do_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct stat* st) {
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

  static int do_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
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
  static Ids chown_target(CowFs* self, const struct stat& attr, int to_set) {
    return {
        (to_set & FUSE_SET_ATTR_UID) ? self->ids_.store_uid(attr.st_uid) : static_cast<uid_t>(-1),
        (to_set & FUSE_SET_ATTR_GID) ? self->ids_.store_gid(attr.st_gid) : static_cast<gid_t>(-1)};
  }

  // The utimensat/futimens pair a setattr asks for (UTIME_OMIT for a time it leaves alone).
  static void setattr_times(const struct stat& attr, int to_set, timespec tv[2]) {
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

  static int setattr_fd(CowFs* self, Inode* n, int fd, struct stat* attr, int to_set,
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

  static int do_readlink(fuse_req_t req, fuse_ino_t ino, std::string* out) {
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

  static int do_mknod_like(fuse_req_t req, fuse_ino_t parent, const char* cname, mode_t mode,
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
    mode_t perm = self->ids_.settable(mode, mode & S_IFMT, who.uid);
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
        if (rc == 0 &&
            ::renameat2(dir.upper, tmp.c_str(), dir.upper, cname, RENAME_NOREPLACE) != 0) {
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
      int fd =
          ::openat(dir.upper, cname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perm);
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

  static int make_opaque_marker(int dirfd) {
    int fd = ::openat(dirfd, std::string(kOpaqueMarker).c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      return errno == EEXIST ? 0 : -errno;
    }
    ::close(fd);
    return 0;
  }

  static int do_remove(fuse_req_t req, fuse_ino_t parent, const char* cname, bool is_rmdir) {
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
  static int check_landing(CowFs* self, const Found& f, const std::string& from,
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

  static int do_rename(fuse_req_t req, fuse_ino_t parent, const char* cname, fuse_ino_t newparent,
                       const char* cnewname, unsigned int flags) {
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
      self->table_.set_upper(src_node, UniqueFd(::fcntl(sv.upper, F_DUPFD_CLOEXEC, 0)),
                             src_node->key, true);
    }
    self->table_.moved(src_node, dst_dir.node, newname);
    return 0;
  }

  static int do_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* cnewname,
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
    if (::linkat(AT_FDCWD, proc_path(v.upper).c_str(), dir.upper, cnewname, AT_SYMLINK_FOLLOW) !=
        0) {
      return -errno;
    }
    if (existing.whiteout) {
      ::unlinkat(dir.upper, whiteout_name(cnewname).c_str(), 0);
    }
    return lookup_entry(self, dir, cnewname, e);
  }

  // Chooses the io mode of an open (passthrough.h) and counts it on the inode; a passthrough
  // open registers the handle's own fd as the backing file (the fd safe_io opened, never a name
  // opened again) unless the inode has one, and arms the patch of its open reply. Policy was
  // decided before: passthrough changes only the data path.
  //
  // Writes through passthrough never reach the daemon, so they could not be charged to the byte
  // quota, nor could the daemon clear suid/sgid bits: a writable open is passthrough only when
  // the byte quota is unlimited and the file has neither bit. Small files opened read-only stay
  // cached (their first open primes the page cache: no READ at all). A lower (real workspace)
  // file is a backing only for read-only opens; a writer that comes while such handles are open
  // gets a new nodeid (open_node).
  // `known`: fh's file as the caller just saw it (spares an fstat), or null.
  static int set_io_mode(CowFs* self, Inode* n, FileHandle* fh, bool writing,
                         const std::string& path, fuse_file_info* fi,
                         const struct stat* known = nullptr) {
    namespace pt = passthrough;
    pt::OpenFacts f;
    struct stat st;
    bool have_st = known != nullptr || ::fstat(fh->fd.get(), &st) == 0;
    if (known != nullptr) {
      st = *known;
    }
    if (have_st) {
      fh->key = key_of(st);
    }
    f.enabled =
        have_st && self->session_ != nullptr && passthrough_enabled() && !(fi->flags & O_DIRECT);
    f.regular = have_st && S_ISREG(st.st_mode);
    f.writable = writing;
    f.writes_direct_ok = self->quota_.byte_limit() == 0 && !(st.st_mode & (S_ISUID | S_ISGID));
    f.on_lower = fh->on_lower;
    f.file = key_of(st);
    std::lock_guard lk(n->mu);
    pt::IoMode m = pt::choose_io_mode(*n, f);
    if (m == pt::IoMode::kNewBacking && !writing && st.st_size <= kPrimeMax) {
      m = pt::IoMode::kCached;
    }
    // A reader that opened the lower file just before another opener copied it up (copy-up holds
    // this mu): a lower backing now would only force the next writer through the ESTALE detour.
    if (m == pt::IoMode::kNewBacking && fh->on_lower && self->table_.has_upper(n)) {
      m = pt::IoMode::kCached;
    }
    if (m == pt::IoMode::kNewBacking) {
      int id = pt::open_backing(fuse_session_fd(self->session_), fh->fd.get());
      if (id < 0) {
        if (!self->pt_failure_logged_.exchange(true)) {
          std::fprintf(stderr,
                       "cordon-fs: FUSE_DEV_IOC_BACKING_OPEN for %s failed: %s; this and similar "
                       "opens take the daemon path (slower, same results)\n",
                       path.c_str(), std::strerror(-id));
        }
        m = pt::IoMode::kCached;
      } else {
        n->pt_backing_id = id;
        n->pt_backing_key = f.file;
        n->pt_backing_writable = !fh->on_lower;
        m = pt::IoMode::kPassthrough;
      }
    }
    switch (m) {
      case pt::IoMode::kRefuse:
        // A reader registered the lower file between open_node's check and here: the same
        // detour as there (the kernel retries the open by path on a new inode).
        self->table_.detach(n);
        return -ESTALE;
      case pt::IoMode::kCached:
      case pt::IoMode::kNewBacking:
        n->pt_cached_opens++;
        fh->counted_cached = true;
        if (n->pt_wrote) {
          // Passthrough writes went around the kernel's page cache of this inode: drop it.
          fi->keep_cache = 0;
          n->pt_wrote = false;
        }
        return 0;
      case pt::IoMode::kPassthrough:
      case pt::IoMode::kPassthroughDirect:
        n->pt_opens++;
        fh->passthrough = true;
        if (writing) {
          n->pt_wrote = true;
        }
        fi->keep_cache = 0;  // the kernel refuses FOPEN_KEEP_CACHE with FOPEN_PASSTHROUGH
        fi->direct_io = m == pt::IoMode::kPassthroughDirect;
        pt::expect_open_reply(n->pt_backing_id);
        self->pt_opens_.fetch_add(1, std::memory_order_relaxed);
        return 0;
    }
    return 0;
  }

  // Opens node for `flags` (copying up for writes); the FileHandle goes to fi->fh.
  static int open_node(CowFs* self, Inode* node, int flags, const Caller& who, fuse_file_info* fi,
                       const char* op) {
    InodeView v = self->table_.view(node);
    if (v.stale) {
      return -ESTALE;
    }
    int acc = flags & O_ACCMODE;
    bool writing = acc != O_RDONLY || (flags & O_TRUNC);
    std::string path = self->table_.path_of(node);
    if (int rc = self->access_.check_read(path, op, who); rc != 0) {
      return rc;
    }
    if (writing) {
      if (int rc = self->access_.check_write(path, op, who); rc != 0) {
        return rc;
      }
      if (int rc = ensure_upper(self, node, !(flags & O_TRUNC), who); rc != 0) {
        return rc;
      }
      {
        // Read-only passthrough handles of the lower file pin the kernel's inode to that backing
        // file, and the kernel opens a backing file with the opener's flags: a writer on this
        // inode would open the real workspace file for writing. The copy goes to a new nodeid
        // instead: ESTALE makes the kernel redo the path walk with LOOKUP_REVAL, whose LOOKUP
        // now returns the copied-up file as a new inode. The old readers keep reading the lower
        // bytes (as with overlayfs); the copy gets a new inode number.
        std::lock_guard lk(node->mu);
        if (node->pt_opens > 0 && !node->pt_backing_writable) {
          self->table_.detach(node);
          return -ESTALE;
        }
      }
      v = self->table_.view(node);
    }
    auto fh = std::make_unique<FileHandle>();
    fh->node = node;
    // The kernel does O_APPEND positioning itself and sends explicit offsets; O_APPEND on our fd
    // would make pwrite ignore them.
    int oflags = flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_APPEND | O_TRUNC);
    int fd = v.upper >= 0 ? v.upper : v.lower;
    fh->on_lower = v.upper < 0;
    fh->fd.reset(reopen_fd(fd, oflags));
    if (!fh->fd) {
      return -errno;
    }
    if (flags & O_TRUNC) {
      std::lock_guard lk(node->mu);
      int rc = ::ftruncate(fh->fd.get(), 0) == 0 ? 0 : -errno;
      settle_size(self, node, fh->fd.get());
      kill_suid_sgid(fh->fd.get(), who);
      if (rc != 0) {
        return rc;
      }
    }
    // The daemon is the only writer: the page cache stays valid across opens (not in direct
    // mode, where the host may write the file too).
    fi->keep_cache = self->config_.direct ? 0 : 1;
    // Our flush does nothing (writes are synchronous, no writeback cache): spare the kernel the
    // round trip at every close.
    fi->noflush = 1;
    if (int rc = set_io_mode(self, node, fh.get(), writing, path, fi); rc != 0) {
      return rc;
    }
    if (writing) {
      // Under mu: waits for a priming of this file's page cache in progress (prime_bytes), so no
      // write of ours can race with it.
      std::lock_guard lk(node->mu);
      node->writers++;
      fh->writable = true;
    }
    self->table_.add_handle(node, fh->on_lower ? SharedFd() : fh->fd, fh->key);
    fi->fh = reinterpret_cast<uint64_t>(fh.release());
    return 0;
  }

  static int do_create(fuse_req_t req, fuse_ino_t parent, const char* cname, mode_t mode,
                       fuse_file_info* fi, fuse_entry_param* e) {
    CowFs* self = fs(req);
    Caller who = caller(req);
    InodeView dir;
    std::string path;
    Found existing;
    // The name's absence in an upper-only directory is the host create's to say (O_EXCL).
    Quota::Reservation held(self->quota_);
    int rc = prepare_create(self, req, parent, cname, "create", &dir, &path, &existing, &held,
                            /*excl_decides=*/true);
    // The fd of the create itself becomes the handle: a file created read-only (git's 0444
    // objects) may still be written through the descriptor that created it, never reopened.
    int fd = -1;
    if (rc == 0) {
      int acc = fi->flags & O_ACCMODE;
      int cflags = (fi->flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_APPEND | O_TRUNC | O_ACCMODE)) |
                   (acc == O_WRONLY ? O_RDWR : acc) | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
      fd = ::openat(dir.upper, cname, cflags, self->ids_.settable(mode, S_IFREG, who.uid));
      if (fd < 0) {
        rc = -errno;
        held.cancel();  // before opening what is there: that open may copy up and reserve
      }
    }
    if (rc == -EEXIST && !(fi->flags & O_EXCL)) {
      // There already (or raced with another creator): open what is there.
      if (int rc2 = lookup_entry(self, dir, cname, e); rc2 != 0) {
        return rc2;
      }
      Inode* n = self->table_.find(e->ino);
      int rc3 = open_node(self, n, fi->flags, who, fi, "create");
      if (rc3 != 0) {
        self->table_.forget(e->ino, 1);
      }
      return rc3;
    }
    if (rc != 0) {
      return rc;
    }
    auto fh = std::make_unique<FileHandle>();
    fh->fd.reset(fd);
    // The new file's attributes from its own fd: no second lookup by name (the fd is the file
    // the name was made for; O_EXCL made it). It has no lower side: a whiteout may have hidden
    // one, but the upper file wins and non-directories never merge.
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::unlinkat(dir.upper, cname, 0);
      return -err;
    }
    if (daemon_is_root()) {
      if (int rc2 = give_to_caller(dir.upper, cname, fd, stored(self, who), &st); rc2 != 0) {
        ::unlinkat(dir.upper, cname, 0);
        return rc2;
      }
    }
    held.commit();
    finish_create(dir.upper, cname, existing.whiteout);
    InodeTable::Sides sides;
    sides.has_upper = true;
    sides.upper_key = key_of(st);
    Inode* n = self->table_.add_lookup(dir.node, cname, S_IFREG, std::move(sides));
    fill_entry(self, n, st, e);
    // O_EXCL made a file without xattrs: the kernel's security.capability probes (at the first
    // write and at chown) need no syscall while nobody sets one.
    self->table_.set_no_caps(n, true);
    fh->node = n;
    fi->keep_cache = self->config_.direct ? 0 : 1;
    fi->noflush = 1;
    if (int rc2 = set_io_mode(self, n, fh.get(), true, path, fi, &st); rc2 != 0) {
      self->table_.forget(e->ino, 1);
      return rc2;
    }
    {
      std::lock_guard lk(n->mu);
      n->size_known = true;
      n->accounted_size = 0;
      n->writers++;
      fh->writable = true;
    }
    self->table_.add_handle(n, fh->fd, fh->key);
    fi->fh = reinterpret_cast<uint64_t>(fh.release());
    return 0;
  }

  // O_TMPFILE: an unnamed file in the directory's upper side (linkat through /proc/self/fd gives
  // it a name later, through do_link). Registered with an empty name: no lookup by name can
  // reach it, every op goes through its open handle.
  static int do_tmpfile(CowFs* self, const TmpfileRequest& req, TmpfileReply* reply) {
    Caller who{static_cast<pid_t>(req.pid), req.uid, req.gid};
    InodeView dir = self->table_.view(req.parent);
    if (dir.node == nullptr) {
      return -ENOENT;
    }
    if (dir.stale) {
      return -ESTALE;
    }
    // Policy for the directory's future children: a name no rule targets, under "dir/**".
    if (int rc = self->access_.check_write(self->table_.child_path(dir.node, "#tmpfile"), "tmpfile",
                                           who);
        rc != 0) {
      return rc;
    }
    if (int rc = ensure_upper(self, dir.node, true, who); rc != 0) {
      return rc;
    }
    dir = self->table_.view(req.parent);
    Quota::Reservation held(self->quota_);
    if (!held.inode()) {
      quota_refused(self, dir.node, "inodes", who);
      return -EDQUOT;
    }
    int acc = static_cast<int>(req.flags) & O_ACCMODE;
    int oflags = O_TMPFILE | (acc == O_WRONLY ? O_RDWR : acc) | O_CLOEXEC |
                 (static_cast<int>(req.flags) & O_EXCL);
    UniqueFd fd(::openat(dir.upper, ".", oflags, self->ids_.settable(req.mode, S_IFREG, who.uid)));
    struct stat st;
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      return -errno;
    }
    held.commit();  // given back when the file dies unlinked (op_release) or by unlink
    if (daemon_is_root()) {
      Caller owner = stored(self, who);
      (void)!::fchown(fd.get(), owner.uid, owner.gid);
      ::fstat(fd.get(), &st);
    }
    InodeTable::Sides sides;
    sides.has_upper = true;
    sides.upper_key = key_of(st);
    Inode* n = self->table_.add_lookup(dir.node, "", S_IFREG, std::move(sides));
    self->table_.set_no_caps(n, true);  // a new file: no xattrs (see do_create)
    auto fh = std::make_unique<FileHandle>();
    {
      std::lock_guard lk(n->mu);
      n->size_known = true;
      n->accounted_size = 0;
      n->writers++;
      fh->writable = true;
      n->pt_cached_opens++;  // answered by kernel_init.cc without passthrough
      fh->counted_cached = true;
    }
    fh->node = n;
    fh->tmpfile = true;
    fh->fd = std::move(fd);
    fh->key = key_of(st);
    self->table_.add_handle(n, fh->fd, fh->key);
    fill_entry(self, n, st, &reply->entry);
    reply->keep_cache = true;
    reply->noflush = true;
    reply->fh = reinterpret_cast<uint64_t>(fh.release());
    return 0;
  }

  static int read_fd(FileHandle* fh, CowFs* self) {
    if (!fh->on_lower) {
      return fh->fd.get();
    }
    // Opened read-only before someone else copied the file up: read the upper copy from now on,
    // so every open of the file sees the same bytes.
    std::lock_guard lk(fh->mu);
    if (fh->upper_fd) {
      return fh->upper_fd.get();
    }
    // Most reads of an untouched file land here: skip the reopen-by-name of view() until a copy-up
    // has happened.
    if (!self->table_.has_upper(fh->node)) {
      return fh->fd.get();
    }
    InodeView v = self->table_.view(fh->node);
    if (v.upper >= 0) {
      fh->upper_fd.reset(reopen_fd(v.upper, O_RDONLY));
      if (fh->upper_fd) {
        return fh->upper_fd.get();
      }
    }
    return fh->fd.get();
  }

  static int do_write(fuse_req_t req, fuse_ino_t, fuse_bufvec* in, off_t off, fuse_file_info* fi,
                      size_t* written) {
    CowFs* self = fs(req);
    auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
    if (fh->on_lower) {
      return -EBADF;
    }
    size_t len = fuse_buf_size(in);
    Inode* n = fh->node;
    std::lock_guard lk(n->mu);
    uint64_t start = static_cast<uint64_t>(off);
    uint64_t end = charge_growth(self, n, fh->fd.get(), start, start + len, true);
    if (end <= start && len > 0) {
      quota_refused(self, n, "bytes", caller(req));
      return -EDQUOT;
    }
    size_t allowed = static_cast<size_t>(std::min<uint64_t>(end - start, len));
    fuse_bufvec out = FUSE_BUFVEC_INIT(allowed);
    out.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    out.buf[0].fd = fh->fd.get();
    out.buf[0].pos = off;
    in->buf[0].size = std::min(in->buf[0].size, allowed);  // short write at the quota edge
    if (in->count > 1 || fuse_buf_size(in) > allowed) {
      // Trim the whole vector to `allowed` bytes.
      size_t left = allowed;
      for (size_t i = 0; i < in->count; i++) {
        in->buf[i].size = std::min(in->buf[i].size, left);
        left -= in->buf[i].size;
      }
    }
    kill_suid_sgid(fh->fd.get(), writer(self, req, fi));
    ssize_t res = fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_NONBLOCK);
    if (res < 0 || static_cast<uint64_t>(res) < allowed) {
      settle_size(self, n, fh->fd.get());
    }
    if (res < 0) {
      return static_cast<int>(res);
    }
    *written = static_cast<size_t>(res);
    return 0;
  }

  static int do_fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t off, off_t len,
                          fuse_file_info* fi) {
    CowFs* self = fs(req);
    auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
    if (fh->on_lower) {
      return -EBADF;
    }
    Inode* n = fh->node;
    std::lock_guard lk(n->mu);
    uint64_t end = static_cast<uint64_t>(off) + static_cast<uint64_t>(len);
    if (!(mode & FALLOC_FL_KEEP_SIZE)) {
      if (charge_growth(self, n, fh->fd.get(), 0, end, false) < end) {
        quota_refused(self, n, "bytes", caller(req));
        return -EDQUOT;
      }
    }
    kill_suid_sgid(fh->fd.get(), caller(req));  // a punched hole or zeroed range is a write
    int rc = ::fallocate(fh->fd.get(), mode, off, len) == 0 ? 0 : -errno;
    settle_size(self, n, fh->fd.get());
    return rc;
  }

  static int do_copy_file_range(fuse_req_t req, fuse_file_info* fi_in, off_t off_in,
                                fuse_file_info* fi_out, off_t off_out, size_t len, int flags,
                                size_t* copied) {
    CowFs* self = fs(req);
    auto* in = reinterpret_cast<FileHandle*>(fi_in->fh);
    auto* out = reinterpret_cast<FileHandle*>(fi_out->fh);
    if (out->on_lower) {
      return -EBADF;
    }
    Inode* n = out->node;
    std::lock_guard lk(n->mu);
    uint64_t start = static_cast<uint64_t>(off_out);
    uint64_t end = charge_growth(self, n, out->fd.get(), start, start + len, true);
    if (end <= start && len > 0) {
      quota_refused(self, n, "bytes", caller(req));
      return -EDQUOT;
    }
    size_t allowed = static_cast<size_t>(std::min<uint64_t>(end - start, len));
    kill_suid_sgid(out->fd.get(), caller(req));
    loff_t oi = off_in, oo = off_out;
    ssize_t res = ::copy_file_range(read_fd(in, self), &oi, out->fd.get(), &oo, allowed,
                                    static_cast<unsigned>(flags));
    int e = errno;
    settle_size(self, n, out->fd.get());
    if (res < 0) {
      return -e;
    }
    *copied = static_cast<size_t>(res);
    return 0;
  }

  static void build_dir(CowFs* self, DirHandle* dh, const InodeView& v, int* err) {
    dh->entries.clear();
    dh->entries.push_back({".", v.node->id, DT_DIR, {}});
    dh->entries.push_back({"..", 1, DT_DIR, {}});
    std::set<std::string> seen;
    std::string dir_path = self->table_.path_of(v.node);
    auto visible = [&](const std::string& n) {
      return self->access_.visible(dir_path.empty() ? n : dir_path + "/" + n);
    };
    auto add_from = [&](int layer_fd, bool is_upper) {
      // "." relative to the directory's own O_PATH fd: the directory itself, without the path
      // walk through /proc/self/fd that reopen_fd takes (once per listing, twice when merged).
      UniqueFd d(::openat(layer_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!d) {
        *err = errno;
        return;
      }
      struct stat dst;
      stat_fd(d.get(), &dst);
      DIR* dp = ::fdopendir(d.release());
      if (dp == nullptr) {
        *err = errno;
        return;
      }
      while (dirent* de = ::readdir(dp)) {
        std::string n = de->d_name;
        if (n == "." || n == "..") {
          continue;
        }
        if (is_reserved_name(n)) {
          if (is_upper) {
            std::string_view t = whiteout_target(n);
            if (!t.empty()) {
              seen.insert(std::string(t));  // deleted: hides the lower entry
            }
          }
          continue;
        }
        if (!seen.insert(n).second) {
          continue;
        }
        if (!visible(n)) {
          continue;
        }
        DevIno key{dst.st_dev, de->d_ino};
        dh->entries.push_back({n, self->table_.number_for(key), de->d_type, key});
      }
      ::closedir(dp);
    };
    if (v.upper >= 0) {
      add_from(v.upper, true);
    }
    if (v.lower >= 0 && !v.opaque) {
      add_from(v.lower, false);
    }
  }

  static int do_statfs(fuse_req_t req, struct statvfs* out) {
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
  static int xattr_target(CowFs* self, fuse_ino_t ino, bool write, const char* op,
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
  static ssize_t xattr_get(const InodeView& v, const char* name, void* buf, size_t size) {
    if (v.upper_open) {
      return ::fgetxattr(v.upper, name, buf, size);
    }
    return ::getxattr(proc_path(v.primary()).c_str(), name, buf, size);
  }
  static ssize_t xattr_list(const InodeView& v, char* buf, size_t size) {
    if (v.upper_open) {
      return ::flistxattr(v.upper, buf, size);
    }
    return ::listxattr(proc_path(v.primary()).c_str(), buf, size);
  }
  static int xattr_set(const InodeView& v, const char* name, const char* value, size_t size,
                       int flags) {
    if (v.upper_open) {
      return ::fsetxattr(v.upper, name, value, size, flags);
    }
    return ::setxattr(proc_path(v.primary()).c_str(), name, value, size, flags);
  }
  static int xattr_remove(const InodeView& v, const char* name) {
    if (v.upper_open) {
      return ::fremovexattr(v.upper, name);
    }
    return ::removexattr(proc_path(v.primary()).c_str(), name);
  }

  // The kernel asks for security.capability before the first write to a file and at every chown
  // (to know whether to drop it). For a file the daemon made and nobody gave xattrs since, the
  // answer is known: none. True when `ino` is such a node.
  static bool known_without_caps(CowFs* self, fuse_ino_t ino, const char* name) {
    if (std::strcmp(name, "security.capability") != 0) {
      return false;
    }
    Inode* n = self->table_.find(ino);
    return n != nullptr && self->table_.no_caps(n);
  }

  // ---- trampolines: one reply each, sent after every lock is released ----------------------

  // Forgets an open FileHandle (release, or an open whose reply found the opener gone).
  static void drop_file_handle(CowFs* self, FileHandle* fh) {
    {
      Inode* n = fh->node;
      std::lock_guard nl(n->mu);
      if (fh->writable) {
        n->writers--;
      }
      if (fh->counted_cached) {
        n->pt_cached_opens--;
      }
      if (fh->passthrough) {
        if (fh->writable && !fh->on_lower) {
          // Its writes went around the daemon: the quota's count of this file catches up here.
          Impl::settle_size(self, n, fh->fd.get());
        }
        // The last passthrough handle: the kernel already dropped the inode's backing (it sends
        // RELEASE after), and every open that could still name the id went through this lock.
        if (--n->pt_opens == 0 && n->pt_backing_id >= 0) {
          if (self->session_ != nullptr) {
            passthrough::close_backing(fuse_session_fd(self->session_), n->pt_backing_id);
          }
          n->pt_backing_id = -1;
          n->pt_backing_key = {};
        }
      }
    }
    self->table_.drop_handle(fh->node, fh->on_lower ? SharedFd() : fh->fd);
    delete fh;
  }

  static void op_init(void*, fuse_conn_info* conn) { ask_view_capabilities(conn); }

  static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
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

  static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    serve(
        req,
        [&] {
          fs(req)->table_.forget(ino, nlookup);
          return 0;
        },
        [&](int) { fuse_reply_none(req); });
  }

  static void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
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

  static void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    struct stat st;
    serve(
        req, [&] { return do_getattr(req, ino, fi, &st); },
        [&](int rc) { reply_attr(req, rc, st); });
  }

  static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                         fuse_file_info* fi) {
    struct stat st;
    serve(
        req, [&] { return do_setattr(req, ino, attr, to_set, fi, &st); },
        [&](int rc) { reply_attr(req, rc, st); });
  }

  static void op_readlink(fuse_req_t req, fuse_ino_t ino) {
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

  static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t) {
    fuse_entry_param e;
    serve(
        req, [&] { return do_mknod_like(req, parent, name, mode, nullptr, &e, "mknod"); },
        [&](int rc) { reply_entry(req, rc, e); });
  }

  static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
    fuse_entry_param e;
    serve(
        req, [&] { return do_mknod_like(req, parent, name, mode | S_IFDIR, nullptr, &e, "mkdir"); },
        [&](int rc) { reply_entry(req, rc, e); });
  }

  static void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
    fuse_entry_param e;
    serve(
        req, [&] { return do_mknod_like(req, parent, name, S_IFLNK | 0777, link, &e, "symlink"); },
        [&](int rc) { reply_entry(req, rc, e); });
  }

  static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
    serve(
        req, [&] { return do_remove(req, parent, name, false); },
        [&](int rc) { reply_err(req, rc); });
  }

  static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
    serve(
        req, [&] { return do_remove(req, parent, name, true); },
        [&](int rc) { reply_err(req, rc); });
  }

  static void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                        const char* newname, unsigned int flags) {
    serve(
        req, [&] { return do_rename(req, parent, name, newparent, newname, flags); },
        [&](int rc) { reply_err(req, rc); });
  }

  static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
    fuse_entry_param e;
    serve(
        req, [&] { return do_link(req, ino, newparent, newname, &e); },
        [&](int rc) { reply_entry(req, rc, e); });
  }

  // A small file opened for reading gets its bytes pushed into the kernel's page cache with the
  // open (FUSE_NOTIFY_STORE, then the reply with keep_cache): the program's read(2) then finds them
  // there instead of costing a READ round trip. The view's data only changes through the kernel's
  // own page cache (writes are write-through) or a rollback (which invalidates every inode), so
  // what is stored stays right. Once per inode; a page the kernel evicts is simply read again.
  //
  // Never while the file is open for writing: a write(2) updates the page cache before its WRITE
  // reaches us, and storing bytes read a moment earlier would put old data back over it. The
  // check, the read and the store happen under the node's mu, which every open for writing takes
  // before it returns (no write can start meanwhile, and no write request waits on a page lock
  // that the store would need).
  static constexpr off_t kPrimeMax = 64 * 1024;

  static void prime_page_cache(CowFs* self, fuse_ino_t ino, Inode* n, fuse_file_info* fi) {
    auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
    // Passthrough reads never touch this inode's page cache; an open that drops it (no keep_cache)
    // would throw the stored bytes away.
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_DIRECT) ||
        self->session_ == nullptr || fh->passthrough || !fi->keep_cache) {
      return;
    }
    std::lock_guard nl(n->mu);
    if (n->cache_primed || n->writers != 0) {
      return;
    }
    n->cache_primed = true;
    int fd = Impl::read_fd(fh, self);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        st.st_size > kPrimeMax) {
      return;
    }
    char data[kPrimeMax];
    if (::pread(fd, data, static_cast<size_t>(st.st_size), 0) != st.st_size) {
      return;  // changed size under us: reads go the usual way
    }
    fuse_bufvec bv = FUSE_BUFVEC_INIT(static_cast<size_t>(st.st_size));
    bv.buf[0].mem = data;
    fuse_lowlevel_notify_store(self->session_, ino, 0, &bv, FUSE_BUF_NO_SPLICE);
  }

  static void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    CowFs* self = fs(req);
    serve(
        req,
        [&] {
          Inode* n = self->table_.find(ino);
          if (n == nullptr) {
            return -ENOENT;
          }
          int r = open_node(self, n, fi->flags, caller(req), fi, "open");
          if (r == 0) {
            prime_page_cache(self, ino, n, fi);
          }
          return r;
        },
        [&](int rc) {
          if (rc != 0) {
            fuse_reply_err(req, -rc);
          } else if (fuse_reply_open(req, fi) == -ENOENT) {
            // The opener was interrupted: nobody will release this handle.
            std::shared_lock lk(self->layer_mu_);
            drop_file_handle(self, reinterpret_cast<FileHandle*>(fi->fh));
          }
        });
  }

  static void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                        fuse_file_info* fi) {
    CowFs* self = fs(req);
    fuse_entry_param e;
    serve(
        req, [&] { return do_create(req, parent, name, mode, fi, &e); },
        [&](int rc) {
          if (rc != 0) {
            fuse_reply_err(req, -rc);
          } else if (fuse_reply_create(req, &e, fi) == -ENOENT) {
            std::shared_lock lk(self->layer_mu_);
            drop_file_handle(self, reinterpret_cast<FileHandle*>(fi->fh));
            self->table_.forget(e.ino, 1);
          }
        });
  }

  static void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
    CowFs* self = fs(req);
    auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
    self->reads_.fetch_add(1, std::memory_order_relaxed);
    fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    serve(
        req,
        [&] {
          buf.buf[0].fd = read_fd(fh, self);
          return 0;
        },
        [&](int rc) {
          if (rc != 0) {
            fuse_reply_err(req, -rc);
            return;
          }
          // Spliced straight from our fd into /dev/fuse when the kernel allows it: no copy
          // through us.
          buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
          buf.buf[0].pos = off;
          fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
        });
  }

  static void op_write_buf(fuse_req_t req, fuse_ino_t ino, fuse_bufvec* in, off_t off,
                           fuse_file_info* fi) {
    fs(req)->writes_.fetch_add(1, std::memory_order_relaxed);
    size_t written = 0;
    serve(
        req, [&] { return do_write(req, ino, in, off, fi, &written); },
        [&](int rc) {
          if (rc != 0) {
            fuse_reply_err(req, -rc);
          } else {
            fuse_reply_write(req, written);
          }
        });
  }

  static void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

  static void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    CowFs* self = fs(req);
    auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
    serve(
        req,
        [&] {
          struct stat st;
          if (fh->tmpfile && ::fstat(fh->fd.get(), &st) == 0 && st.st_nlink == 0 &&
              self->table_.parent_and_name(fh->node).second.empty()) {
            // Never linked (a link gives the node its name): the file dies with this last
            // handle. A name that was linked and then unlinked released its share at unlink.
            std::lock_guard nl(fh->node->mu);
            self->quota_.release_inode();
            self->quota_.release_bytes(accounted(fh->node, fh->fd.get()));
            accounted(fh->node, fh->fd.get()) = 0;
          }
          drop_file_handle(self, fh);
          return 0;
        },
        [&](int rc) { reply_err(req, rc); });
  }

  static void op_fsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
    auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
    int rc = datasync ? ::fdatasync(fh->fd.get()) : ::fsync(fh->fd.get());
    fuse_reply_err(req, rc == 0 ? 0 : errno);
  }

  static void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    CowFs* self = fs(req);
    serve(
        req,
        [&] {
          InodeView v = self->table_.view(ino);
          if (v.node == nullptr) {
            return -ENOENT;
          }
          if (v.stale) {
            return -ESTALE;
          }
          auto dh = std::make_unique<DirHandle>();
          dh->node = v.node;
          self->table_.add_handle(v.node);
          fi->fh = reinterpret_cast<uint64_t>(dh.release());
          return 0;
        },
        [&](int rc) {
          if (rc != 0) {
            fuse_reply_err(req, -rc);
            return;
          }
          fi->keep_cache = self->config_.direct ? 0 : 1;
          fi->cache_readdir = self->config_.direct ? 0 : 1;
          if (fuse_reply_open(req, fi) == -ENOENT) {
            auto* dh = reinterpret_cast<DirHandle*>(fi->fh);
            self->table_.drop_handle(dh->node);
            delete dh;
          }
        });
  }

  static void do_readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                                fuse_file_info* fi, bool plus) {
    CowFs* self = Impl::fs(req);
    auto* dh = reinterpret_cast<DirHandle*>(fi->fh);
    std::vector<char> buf(size);
    size_t used = 0;
    serve(
        req,
        [&] {
          InodeView v = self->table_.view(ino);
          if (v.stale) {
            return -ESTALE;
          }
          if (off == 0 || dh->entries.empty()) {
            int err = 0;
            Impl::build_dir(self, dh, v, &err);
            if (err != 0) {
              return -err;
            }
          }
          // Offsets are indexes into the listing taken at offset 0: stable while the handle lives.
          // The directory's path is walked once per request, not once per entry.
          std::string dir_path = plus ? self->table_.path_of(v.node) : std::string();
          auto child_of = [](const std::string& dir, const std::string& name) {
            return dir.empty() ? name : dir + "/" + name;
          };
          for (size_t i = static_cast<size_t>(off); i < dh->entries.size(); i++) {
            const DirEntry& de = dh->entries[i];
            size_t rem = buf.size() - used;
            size_t n;
            if (plus) {
              fuse_entry_param e;
              std::memset(&e, 0, sizeof(e));
              bool looked_up = false;
              // A name the kernel holds already (looked up before: `git status` stats every file,
              // then lists every directory) keeps its dentry and attributes: listed without them,
              // no host stat and no lookup count.
              bool dot = de.name == "." || de.name == "..";
              uint64_t held = dot ? 0 : self->table_.held_child(v.node, de.name, de.key);
              if (held == 0 && !dot && self->access_.readable(child_of(dir_path, de.name)) &&
                  Impl::lookup_entry(self, v, de.name, &e) == 0) {
                looked_up = true;
              } else {
                // Listed without attributes (names the kernel holds, dot entries, read-denied names
                // shown as EACCES): nodeid 0 tells the kernel not to make or refresh a dentry from
                // it.
                e.attr.st_ino = held != 0 ? held : de.ino;
                e.attr.st_mode = static_cast<mode_t>(de.type) << 12;
              }
              n = fuse_add_direntry_plus(req, buf.data() + used, rem, de.name.c_str(), &e,
                                         static_cast<off_t>(i + 1));
              if (n > rem) {
                if (looked_up) {
                  self->table_.forget(e.ino, 1);  // not sent: the kernel never saw this lookup
                }
                break;
              }
            } else {
              struct stat st {};
              st.st_ino = de.ino;
              st.st_mode = static_cast<mode_t>(de.type) << 12;
              n = fuse_add_direntry(req, buf.data() + used, rem, de.name.c_str(), &st,
                                    static_cast<off_t>(i + 1));
              if (n > rem) {
                break;
              }
            }
            used += n;
          }
          return 0;
        },
        [&](int rc) {
          if (rc != 0) {
            fuse_reply_err(req, -rc);
          } else {
            fuse_reply_buf(req, buf.data(), used);
          }
        });
  }

  static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         fuse_file_info* fi) {
    do_readdir_common(req, ino, size, off, fi, false);
  }

  static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                             fuse_file_info* fi) {
    do_readdir_common(req, ino, size, off, fi, true);
  }

  static void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    auto* dh = reinterpret_cast<DirHandle*>(fi->fh);
    serve(
        req,
        [&] {
          fs(req)->table_.drop_handle(dh->node);
          delete dh;
          return 0;
        },
        [&](int rc) { reply_err(req, rc); });
  }

  static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    serve(
        req,
        [&] {
          InodeView v = fs(req)->table_.view(ino);
          if (v.upper < 0) {
            return 0;
          }
          UniqueFd d(::openat(v.upper, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
          return (d && ::fsync(d.get()) == 0) ? 0 : -errno;
        },
        [&](int rc) { reply_err(req, rc); });
  }

  static void op_statfs(fuse_req_t req, fuse_ino_t) {
    struct statvfs st;
    int rc = firewall([&] { return Impl::do_statfs(req, &st); });
    if (rc != 0) {
      fuse_reply_err(req, -rc);
    } else {
      fuse_reply_statfs(req, &st);
    }
  }

  static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                          size_t size, int flags) {
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

  static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
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

  static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
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

  static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
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

  static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                           fuse_file_info* fi) {
    serve(
        req, [&] { return do_fallocate(req, ino, mode, off, len, fi); },
        [&](int rc) { reply_err(req, rc); });
  }

  static void op_lseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info* fi) {
    auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
    off_t res = 0;
    serve(
        req,
        [&] {
          res = ::lseek(read_fd(fh, fs(req)), off, whence);
          return res < 0 ? -errno : 0;
        },
        [&](int rc) {
          if (rc != 0) {
            fuse_reply_err(req, -rc);
          } else {
            fuse_reply_lseek(req, res);
          }
        });
  }

  static void op_copy_file_range(fuse_req_t req, fuse_ino_t, off_t off_in, fuse_file_info* fi_in,
                                 fuse_ino_t, off_t off_out, fuse_file_info* fi_out, size_t len,
                                 int flags) {
    size_t copied = 0;
    serve(
        req,
        [&] {
          return do_copy_file_range(req, fi_in, off_in, fi_out, off_out, len, flags, &copied);
        },
        [&](int rc) {
          if (rc != 0) {
            fuse_reply_err(req, -rc);
          } else {
            fuse_reply_write(req, copied);
          }
        });
  }

  static fuse_lowlevel_ops make_ops() {
    fuse_lowlevel_ops ops{};
    ops.init = op_init;
    ops.lookup = op_lookup;
    ops.forget = op_forget;
    ops.forget_multi = op_forget_multi;
    ops.getattr = op_getattr;
    ops.setattr = op_setattr;
    ops.readlink = op_readlink;
    ops.mknod = op_mknod;
    ops.mkdir = op_mkdir;
    ops.symlink = op_symlink;
    ops.unlink = op_unlink;
    ops.rmdir = op_rmdir;
    ops.rename = op_rename;
    ops.link = op_link;
    ops.open = op_open;
    ops.create = op_create;
    ops.read = op_read;
    ops.write_buf = op_write_buf;
    ops.flush = op_flush;
    ops.release = op_release;
    ops.fsync = op_fsync;
    ops.opendir = op_opendir;
    ops.readdir = op_readdir;
    ops.readdirplus = op_readdirplus;
    ops.releasedir = op_releasedir;
    ops.fsyncdir = op_fsyncdir;
    ops.statfs = op_statfs;
    ops.setxattr = op_setxattr;
    ops.getxattr = op_getxattr;
    ops.listxattr = op_listxattr;
    ops.removexattr = op_removexattr;
    ops.fallocate = op_fallocate;
    ops.lseek = op_lseek;
    ops.copy_file_range = op_copy_file_range;
    return ops;
  }
};  // struct CowFs::Impl

TmpfileHandler CowFs::tmpfile_handler() {
  return [](void* userdata, const TmpfileRequest& req, TmpfileReply* reply) -> int {
    auto* self = static_cast<CowFs*>(userdata);
    std::shared_lock lk(self->layer_mu_);
    return firewall([&] { return Impl::do_tmpfile(self, req, reply); });
  };
}

const fuse_lowlevel_ops& CowFs::operations() {
  static const fuse_lowlevel_ops ops = Impl::make_ops();
  return ops;
}

CowFs::CowFs(FsConfig config, UniqueFd lower, UniqueFd upper, Usage usage, IdMap ids)
    : config_(std::move(config)),
      lower_root_(std::move(lower)),
      upper_root_(std::move(upper)),
      access_(config_.policy, config_.events, config_.view_root,
              config_.view_root.empty() ? (config_.direct ? config_.upper : config_.lower) : ""),
      ids_(ids),
      quota_(config_.policy.quota.bytes, config_.policy.quota.inodes, usage) {}

CowFs::~CowFs() = default;

CowFs::IoStats CowFs::io_stats() const {
  IoStats s;
  s.passthrough = passthrough_enabled();
  s.reads = reads_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  s.passthrough_opens = pt_opens_.load(std::memory_order_relaxed);
  return s;
}

// Lives here rather than in cowfs_layers.cc because it re-resolves names with Impl::resolve.
//
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
