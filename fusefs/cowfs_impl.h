// cordon-fs's ops, shared by the cowfs_*.cc files that define them (internal: not an API).
//
// Lock order (outermost first): CowFs::layer_mu_ (shared by every op, exclusive by rollback) ->
// Inode::mu (copy-up, size accounting, writes of one file, priming its page cache; parents before
// children, never two siblings) -> FileHandle::mu (its upper reopen) -> InodeTable::mu_ (a leaf).
//
// One reply, after unlock: every FUSE callback goes through Impl::serve, which runs the op's body
// with layer_mu_ held shared inside an exception firewall, releases every lock, and only then sends
// exactly one reply. A reply may block on the kernel, which may be waiting on another of our ops;
// no exception may cross into libfuse.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "fusefs/cowfs.h"
#include "fusefs/layer_names.h"

namespace cordon::fusefs {

inline DevIno key_of(const struct stat& st) { return {st.st_dev, st.st_ino}; }

inline bool exists_at(int dirfd, const std::string& name) {
  struct stat st;
  return dirfd >= 0 && ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

inline bool has_opaque_marker(int dirfd) { return exists_at(dirfd, std::string(kOpaqueMarker)); }

inline std::string proc_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// The daemon's effective uid never changes while it runs: asked once, not once per create.
inline bool daemon_is_root() {
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

// Everything about one op lives in Impl; CowFs keeps only state.
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

  // The layers' sides of the name (fds only for directories) and what the view shows of it.
  struct Found : InodeTable::Sides {
    struct stat st {};            // of the entry the view shows (upper's if any)
    bool whiteout = false;        // the name is deleted in the view over a lower entry
    bool lower_shadowed = false;  // lower has the name under the upper entry (or under a whiteout)
  };

  // ---- cowfs_resolve.cc ----
  static int resolve(const InodeView& dir, const std::string& name, Found* f);
  static int stat_entry(int dirfd, const std::string& name, UniqueFd* dir_fd, struct stat* st);
  static void show(CowFs* self, uint64_t id, struct stat* st);
  static Caller stored(CowFs* self, Caller who);
  static void fill_entry(CowFs* self, Inode* n, const struct stat& st, fuse_entry_param* e);
  static int lookup_entry(CowFs* self, const InodeView& dir, const std::string& name,
                          fuse_entry_param* e);
  static int stat_inode(CowFs* self, Inode* n, struct stat* st);
  static std::pair<Inode*, std::string> parent_and_name(CowFs* self, Inode* node);
  static int do_lookup(fuse_req_t req, fuse_ino_t parent, const char* cname, fuse_entry_param* e);
  static int do_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct stat* st);
  static int do_readlink(fuse_req_t req, fuse_ino_t ino, std::string* out);
  static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
  static void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets);
  static void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void op_readlink(fuse_req_t req, fuse_ino_t ino);

  // ---- cowfs_copy_up.cc ----
  static int write_origin(int upper_dir, const std::string& name, const struct stat& lst);
  static int record_origin_if_new(const InodeView& dir, const std::string& name);
  static int ensure_upper(CowFs* self, Inode* node, bool with_data, const Caller& who);
  static int copy_up_object(int upper_dir, const std::string& name, int lfd, const struct stat& lst,
                            bool with_data);
  static int copy_attrs(int src, int dst, const struct stat& st);
  static uint64_t& accounted(Inode* n, int upper_fd);
  static uint64_t charge_growth(CowFs* self, Inode* n, int upper_fd, uint64_t start, uint64_t end,
                                bool allow_partial);
  static void settle_size(CowFs* self, Inode* n, int fd);
  static void quota_refused(CowFs* self, Inode* n, const char* what, const Caller& who);

  // ---- cowfs_names.cc ----
  static int prepare_create(CowFs* self, fuse_req_t req, fuse_ino_t parent, const char* cname,
                            const char* op, InodeView* dir, std::string* path, Found* existing,
                            Quota::Reservation* inode, bool excl_decides = false);
  static int give_to_caller(int upper_dir, const char* name, int fd, const Caller& who,
                            struct stat* st);
  static void finish_create(int upper_dir, const std::string& name, bool had_whiteout);
  static int make_whiteout(int upper_dir, const std::string& name);
  static int check_empty(const Found& f);
  static void release_for_unlink(CowFs* self, const struct stat& st);
  static int do_mknod_like(fuse_req_t req, fuse_ino_t parent, const char* cname, mode_t mode,
                           const char* link_target, fuse_entry_param* e, const char* op);
  static int make_opaque_marker(int dirfd);
  static int do_remove(fuse_req_t req, fuse_ino_t parent, const char* cname, bool is_rmdir);
  static int check_landing(CowFs* self, const Found& f, const std::string& from,
                           const std::string& path, const Caller& who);
  static int do_rename(fuse_req_t req, fuse_ino_t parent, const char* cname, fuse_ino_t newparent,
                       const char* cnewname, unsigned int flags);
  static int do_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* cnewname,
                     fuse_entry_param* e);
  static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t);
  static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
  static void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name);
  static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name);
  static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name);
  static void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                        const char* newname, unsigned int flags);
  static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname);

  // ---- cowfs_data.cc ----
  static void kill_suid_sgid(int fd, const Caller& who);
  static Caller writer(CowFs* self, fuse_req_t req, const fuse_file_info* fi);
  static int set_io_mode(CowFs* self, Inode* n, FileHandle* fh, bool writing,
                         const std::string& path, fuse_file_info* fi,
                         const struct stat* known = nullptr);
  static int open_node(CowFs* self, Inode* node, int flags, const Caller& who, fuse_file_info* fi,
                       const char* op);
  static int do_create(fuse_req_t req, fuse_ino_t parent, const char* cname, mode_t mode,
                       fuse_file_info* fi, fuse_entry_param* e);
  static int do_tmpfile(CowFs* self, const TmpfileRequest& req, TmpfileReply* reply);
  static int read_fd(FileHandle* fh, CowFs* self);
  static int do_write(fuse_req_t req, fuse_ino_t, fuse_bufvec* in, off_t off, fuse_file_info* fi,
                      size_t* written);
  static int do_fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t off, off_t len,
                          fuse_file_info* fi);
  static int do_copy_file_range(fuse_req_t req, fuse_file_info* fi_in, off_t off_in,
                                fuse_file_info* fi_out, off_t off_out, size_t len, int flags,
                                size_t* copied);
  static void drop_file_handle(CowFs* self, FileHandle* fh);
  static void prime_page_cache(CowFs* self, fuse_ino_t ino, Inode* n, fuse_file_info* fi);
  static void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                        fuse_file_info* fi);
  static void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi);
  static void op_write_buf(fuse_req_t req, fuse_ino_t ino, fuse_bufvec* in, off_t off,
                           fuse_file_info* fi);
  static void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*);
  static void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi);
  static void op_fsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi);
  static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                           fuse_file_info* fi);
  static void op_lseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info* fi);
  static void op_copy_file_range(fuse_req_t req, fuse_ino_t, off_t off_in, fuse_file_info* fi_in,
                                 fuse_ino_t, off_t off_out, fuse_file_info* fi_out, size_t len,
                                 int flags);

  // ---- cowfs_dirs.cc ----
  static void build_dir(CowFs* self, DirHandle* dh, const InodeView& v, int* err);
  static void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void do_readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                                fuse_file_info* fi, bool plus);
  static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         fuse_file_info* fi);
  static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                             fuse_file_info* fi);
  static void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi);
  static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*);

  // ---- cowfs_attrs.cc ----
  static int do_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                        fuse_file_info* fi, struct stat* out);
  static Ids chown_target(CowFs* self, const struct stat& attr, int to_set);
  // The permission bits a create through the view gets. In direct mode the view writes the host
  // at once, where a setuid/setgid file is a way into another uid (the committer's review never
  // comes): those bits never go there. A cow layer keeps them; commit strips them.
  static mode_t create_mode(CowFs* self, mode_t mode, mode_t type, uid_t caller_uid);
  // 0, or -EPERM for a chmod to setuid/setgid bits in direct mode (create_mode's reason).
  static int refuse_setid(CowFs* self, const struct stat& attr, int to_set, mode_t type);
  static void setattr_times(const struct stat& attr, int to_set, timespec tv[2]);
  static int setattr_fd(CowFs* self, Inode* n, int fd, struct stat* attr, int to_set,
                        const Caller& who, struct stat* out);
  static int do_statfs(fuse_req_t req, struct statvfs* out);
  static int xattr_target(CowFs* self, fuse_ino_t ino, bool write, const char* op,
                          const Caller& who, InodeView* view);
  static ssize_t xattr_get(const InodeView& v, const char* name, void* buf, size_t size);
  static ssize_t xattr_list(const InodeView& v, char* buf, size_t size);
  static int xattr_set(const InodeView& v, const char* name, const char* value, size_t size,
                       int flags);
  static int xattr_remove(const InodeView& v, const char* name);
  static bool known_without_caps(CowFs* self, fuse_ino_t ino, const char* name);
  static bool refuse_xattrs(fuse_req_t req);
  static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                         fuse_file_info* fi);
  static void op_statfs(fuse_req_t req, fuse_ino_t);
  static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                          size_t size, int flags);
  static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size);
  static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
  static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name);

  // ---- cowfs.cc ----
  static void op_init(void*, fuse_conn_info* conn);
  static fuse_lowlevel_ops make_ops();
};

}  // namespace cordon::fusefs
