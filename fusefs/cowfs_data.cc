// Data: open, create, O_TMPFILE, read, write, fallocate, copy_file_range, release.
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
namespace {

constexpr off_t kPrimeMax = 64 * 1024;

}  // namespace

// What the kernel would do on write and truncate by a caller without CAP_FSETID, which with
// FUSE_CAP_HANDLE_KILLPRIV is ours to do (the daemon writes as itself, often root, for whom the
// host kernel keeps the bits). A caller the view sees as uid 0 keeps them, like root natively.
void CowFs::Impl::kill_suid_sgid(int fd, const Caller& who) {
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
Caller CowFs::Impl::writer(CowFs* self, fuse_req_t req, const fuse_file_info* fi) {
  Caller who = caller(req);
  if (fi->writepage && self->ids_.active()) {
    who.uid = static_cast<uid_t>(-1);
  }
  return who;
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
int CowFs::Impl::set_io_mode(CowFs* self, Inode* n, FileHandle* fh, bool writing,
                             const std::string& path, fuse_file_info* fi,
                             const struct stat* known) {
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
int CowFs::Impl::open_node(CowFs* self, Inode* node, int flags, const Caller& who,
                           fuse_file_info* fi, const char* op) {
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

int CowFs::Impl::do_create(fuse_req_t req, fuse_ino_t parent, const char* cname, mode_t mode,
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
    fd = ::openat(dir.upper, cname, cflags, create_mode(self, mode, S_IFREG, who.uid));
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
int CowFs::Impl::do_tmpfile(CowFs* self, const TmpfileRequest& req, TmpfileReply* reply) {
  Caller who{static_cast<pid_t>(req.pid), req.uid, req.gid};
  InodeView dir = self->table_.view(req.parent);
  if (dir.node == nullptr) {
    return -ENOENT;
  }
  if (dir.stale) {
    return -ESTALE;
  }
  // Policy for the directory's future children: a name no rule targets, under "dir/**".
  if (int rc =
          self->access_.check_write(self->table_.child_path(dir.node, "#tmpfile"), "tmpfile", who);
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
  UniqueFd fd(::openat(dir.upper, ".", oflags, create_mode(self, req.mode, S_IFREG, who.uid)));
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

int CowFs::Impl::read_fd(FileHandle* fh, CowFs* self) {
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

int CowFs::Impl::do_write(fuse_req_t req, fuse_ino_t, fuse_bufvec* in, off_t off,
                          fuse_file_info* fi, size_t* written) {
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

int CowFs::Impl::do_fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t off, off_t len,
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

int CowFs::Impl::do_copy_file_range(fuse_req_t req, fuse_file_info* fi_in, off_t off_in,
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

// Forgets an open FileHandle (release, or an open whose reply found the opener gone).
void CowFs::Impl::drop_file_handle(CowFs* self, FileHandle* fh) {
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

void CowFs::Impl::prime_page_cache(CowFs* self, fuse_ino_t ino, Inode* n, fuse_file_info* fi) {
  auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
  // Passthrough reads never touch this inode's page cache; an open that drops it (no keep_cache)
  // would throw the stored bytes away.
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_DIRECT) || self->session_ == nullptr ||
      fh->passthrough || !fi->keep_cache) {
    return;
  }
  std::lock_guard nl(n->mu);
  if (n->cache_primed || n->writers != 0) {
    return;
  }
  n->cache_primed = true;
  int fd = Impl::read_fd(fh, self);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > kPrimeMax) {
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

void CowFs::Impl::op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
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

void CowFs::Impl::op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
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

void CowFs::Impl::op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
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

void CowFs::Impl::op_write_buf(fuse_req_t req, fuse_ino_t ino, fuse_bufvec* in, off_t off,
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

void CowFs::Impl::op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void CowFs::Impl::op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
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

void CowFs::Impl::op_fsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  auto* fh = reinterpret_cast<FileHandle*>(fi->fh);
  int rc = datasync ? ::fdatasync(fh->fd.get()) : ::fsync(fh->fd.get());
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

void CowFs::Impl::op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                               fuse_file_info* fi) {
  serve(
      req, [&] { return do_fallocate(req, ino, mode, off, len, fi); },
      [&](int rc) { reply_err(req, rc); });
}

void CowFs::Impl::op_lseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info* fi) {
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

void CowFs::Impl::op_copy_file_range(fuse_req_t req, fuse_ino_t, off_t off_in,
                                     fuse_file_info* fi_in, fuse_ino_t, off_t off_out,
                                     fuse_file_info* fi_out, size_t len, int flags) {
  size_t copied = 0;
  serve(
      req,
      [&] { return do_copy_file_range(req, fi_in, off_in, fi_out, off_out, len, flags, &copied); },
      [&](int rc) {
        if (rc != 0) {
          fuse_reply_err(req, -rc);
        } else {
          fuse_reply_write(req, copied);
        }
      });
}

}  // namespace cordon::fusefs
