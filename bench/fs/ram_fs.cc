// cordon-bench-ramfs: the floor of any FUSE filesystem on this machine, for bench/fs/floor.sh.
//
// A FUSE filesystem that keeps its whole tree in memory and does no host work at all: it speaks
// to the kernel exactly as cordon-fs does (same mount options, INIT flags, timeouts, transport:
// FUSE over io_uring with per-CPU rings, else /dev/fuse), so the kernel sends it the same requests
// for the same workload, but it answers each from a map under one mutex. File data goes through
// FUSE passthrough to ONE scratch backing file shared by every file (`--backing FILE`, put on the
// filesystem native runs on): a write costs the program what a passthrough write costs under
// cordon-fs, without a per-file host create. What it cannot measure is what the kernel makes any
// FUSE daemon pay: the requests themselves. Anything cordon-fs adds is above this floor.
//
// With `--host DIR` it also does the host work that any filesystem keeping the files on the host
// must do, and nothing more: every file and directory is created, chmod/chown/utimens'ed and
// unlinked in DIR (flat, named by inode number), each file's own fd is its passthrough backing
// (registered at open, dropped at the last release, as cordon-fs does); lookups and getattrs are
// still answered from memory. The distance from it to cordon-fs is cordon-fs's own overhead.
//
// With `--lower DIR` it is instead a read-only view of DIR with the least host work such a view
// needs: a LOOKUP is one fstatat in the parent's O_PATH fd (a directory keeps one, as in
// cordon-fs), a READDIRPLUS lists the host directory and fstatats each new name, an open is an
// openat whose fd becomes the passthrough backing; the inode numbers shown are the host's (git's
// index stays valid). Everything once looked up is answered from memory after; writes: EROFS.
//
// Supports what the floor workloads use (mkdir, create, open, write through passthrough,
// setattr, lookup, getattr, unlink, rmdir, readdir; the xattr ops answer ENOSYS); without --host
// data is not kept (reads return what the shared backing holds). Not a filesystem to use: a
// measuring instrument.
//
//   cordon-bench-ramfs MOUNTPOINT --backing FILE [--host DIR | --lower DIR] [--no-io-uring]
//   (root: passthrough needs it)
#define FUSE_USE_VERSION 35
#include <dirent.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/unique_fd.h"
#include "fusefs/kernel/kernel_init.h"
#include "fusefs/kernel/passthrough.h"
#include "fusefs/kernel/uring.h"

namespace {

using namespace cordon::fusefs;

constexpr double kTimeout = 86400.0;  // as cordon-fs: the daemon is the view's only writer

struct Node {
  fuse_ino_t ino = 0;
  struct stat st {};
  std::map<std::string, fuse_ino_t> children;  // directories only
  // --host: the host file's fd and backing id while the kernel has it open, and how many opens.
  int fd = -1;
  int backing_id = -1;
  int opens = 0;
  // --lower: where the object is on the host (a directory's O_PATH fd; a file's parent and name),
  // and whether a directory was listed already.
  cordon::UniqueFd dir_fd;
  fuse_ino_t parent = 0;
  std::string name;
  bool listed = false;
};

struct RamFs {
  std::mutex mu;
  std::unordered_map<fuse_ino_t, std::unique_ptr<Node>> nodes;
  fuse_ino_t next_ino = FUSE_ROOT_ID + 1;
  fuse_session* se = nullptr;
  cordon::UniqueFd backing_fd;
  int backing_id = -1;    // registered once, at the first open that can use it
  cordon::UniqueFd host;  // --host DIR, or invalid
  bool lower = false;     // --lower DIR: the root's dir_fd is DIR

  // --lower: the child `name` of dir as the host has it (made on first sight), or null. The host
  // calls run with `lk` (on mu) released, so that lookups on both CPUs overlap as in cordon-fs.
  Node* lower_child(std::unique_lock<std::mutex>& lk, Node* dir, const std::string& name) {
    if (auto it = dir->children.find(name); it != dir->children.end()) {
      return find(it->second);
    }
    int dfd = dir->dir_fd.get();  // nodes live until unmount
    lk.unlock();
    struct stat st;
    bool found = ::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    cordon::UniqueFd sub;
    if (found && S_ISDIR(st.st_mode)) {
      sub.reset(::openat(dfd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    }
    lk.lock();
    if (!found) {
      return nullptr;
    }
    if (auto it = dir->children.find(name); it != dir->children.end()) {
      return find(it->second);  // another thread made it meanwhile
    }
    fuse_ctx nobody{};
    Node* n = make(st.st_mode, &nobody);
    n->st = st;  // the host's inode number included
    n->parent = dir->ino;
    n->name = name;
    n->dir_fd = std::move(sub);
    dir->children.emplace(name, n->ino);
    return n;
  }

  std::string host_name(const Node& n) const {
    return n.ino == FUSE_ROOT_ID ? "." : std::to_string(n.ino);
  }
  // --host: an open of n (its fd opened or created by the caller when n has none). 0 or errno.
  int host_open(Node* n, int fd, fuse_file_info* fi) {
    if (n->fd < 0) {
      if (fd < 0) {
        fd = ::openat(host.get(), host_name(*n).c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0) {
          return errno;
        }
      }
      n->fd = fd;
      n->backing_id = passthrough_enabled() && se != nullptr
                          ? passthrough::open_backing(fuse_session_fd(se), fd)
                          : -1;
    } else if (fd >= 0) {
      ::close(fd);
    }
    n->opens++;
    fi->fh = n->ino;
    if (n->backing_id >= 0) {
      fi->keep_cache = 0;
      passthrough::expect_open_reply(n->backing_id);
    }
    return 0;
  }

  Node* find(fuse_ino_t ino) {
    auto it = nodes.find(ino);
    return it == nodes.end() ? nullptr : it->second.get();
  }
  Node* make(mode_t mode, const fuse_ctx* who) {
    auto n = std::make_unique<Node>();
    n->ino = next_ino++;
    n->st.st_ino = n->ino;
    n->st.st_mode = mode;
    n->st.st_nlink = S_ISDIR(mode) ? 2 : 1;
    n->st.st_uid = who->uid;
    n->st.st_gid = who->gid;
    n->st.st_blksize = 4096;
    ::clock_gettime(CLOCK_REALTIME, &n->st.st_mtim);
    n->st.st_atim = n->st.st_ctim = n->st.st_mtim;
    Node* raw = n.get();
    nodes.emplace(raw->ino, std::move(n));
    return raw;
  }
  // Passthrough to the shared backing for a regular file, when the kernel took passthrough.
  void passthrough(fuse_file_info* fi) {
    if (!passthrough_enabled() || se == nullptr || host) {
      return;
    }
    if (backing_id < 0) {
      backing_id = passthrough::open_backing(fuse_session_fd(se), backing_fd.get());
    }
    if (backing_id >= 0) {
      fi->keep_cache = 0;
      passthrough::expect_open_reply(backing_id);
    }
  }
};

RamFs* fs_of(fuse_req_t req) { return static_cast<RamFs*>(fuse_req_userdata(req)); }

fuse_entry_param entry_of(const Node& n) {
  fuse_entry_param e{};
  e.ino = n.ino;
  e.attr = n.st;
  e.attr_timeout = kTimeout;
  e.entry_timeout = kTimeout;
  return e;
}

void op_init(void*, fuse_conn_info* conn) { ask_view_capabilities(conn); }

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  RamFs* fs = fs_of(req);
  fuse_entry_param e{};
  {
    std::unique_lock lk(fs->mu);
    Node* dir = fs->find(parent);
    if (dir == nullptr) {
      return (void)fuse_reply_err(req, ENOENT);
    }
    Node* child = nullptr;
    if (fs->lower) {
      child = fs->lower_child(lk, dir, name);
    } else if (auto it = dir->children.find(name); it != dir->children.end()) {
      child = fs->find(it->second);
    }
    if (child != nullptr) {
      e = entry_of(*child);
    } else {
      e.entry_timeout = kTimeout;  // cached negative, as cordon-fs answers
    }
  }
  fuse_reply_entry(req, &e);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  RamFs* fs = fs_of(req);
  struct stat st;
  {
    std::lock_guard lk(fs->mu);
    Node* n = fs->find(ino);
    if (n == nullptr) {
      return (void)fuse_reply_err(req, ENOENT);
    }
    st = n->st;
  }
  fuse_reply_attr(req, &st, kTimeout);
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  RamFs* fs = fs_of(req);
  struct stat st;
  {
    std::lock_guard lk(fs->mu);
    Node* n = fs->find(ino);
    if (n == nullptr) {
      return (void)fuse_reply_err(req, ENOENT);
    }
    if (fs->lower) {
      return (void)fuse_reply_err(req, EROFS);
    }
    if (to_set & FUSE_SET_ATTR_MODE) {
      n->st.st_mode = (n->st.st_mode & S_IFMT) | (attr->st_mode & 07777);
    }
    if (to_set & FUSE_SET_ATTR_UID) {
      n->st.st_uid = attr->st_uid;
    }
    if (to_set & FUSE_SET_ATTR_GID) {
      n->st.st_gid = attr->st_gid;
    }
    if (to_set & FUSE_SET_ATTR_SIZE) {
      n->st.st_size = attr->st_size;
    }
    if (to_set & FUSE_SET_ATTR_MTIME) {
      n->st.st_mtim = attr->st_mtim;
    }
    if (to_set & FUSE_SET_ATTR_ATIME) {
      n->st.st_atim = attr->st_atim;
    }
    if (fs->host) {  // one host call per request, as the program's own syscall would be
      std::string name = fs->host_name(*n);
      int hd = fs->host.get();
      int rc = 0;
      if (to_set & FUSE_SET_ATTR_MODE) {
        rc = n->fd >= 0 ? ::fchmod(n->fd, n->st.st_mode & 07777)
                        : ::fchmodat(hd, name.c_str(), n->st.st_mode & 07777, 0);
      } else if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
        rc = n->fd >= 0 ? ::fchown(n->fd, n->st.st_uid, n->st.st_gid)
                        : ::fchownat(hd, name.c_str(), n->st.st_uid, n->st.st_gid, 0);
      } else if (to_set & FUSE_SET_ATTR_SIZE) {
        rc = n->fd >= 0
                 ? ::ftruncate(n->fd, n->st.st_size)
                 : ::truncate(
                       (std::string("/proc/self/fd/") + std::to_string(hd) + "/" + name).c_str(),
                       n->st.st_size);
      } else if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME)) {
        struct timespec ts[2] = {n->st.st_atim, n->st.st_mtim};
        rc = n->fd >= 0 ? ::futimens(n->fd, ts) : ::utimensat(hd, name.c_str(), ts, 0);
      }
      if (rc != 0) {
        return (void)fuse_reply_err(req, errno);
      }
    }
    ::clock_gettime(CLOCK_REALTIME, &n->st.st_ctim);
    st = n->st;
  }
  fuse_reply_attr(req, &st, kTimeout);
}

// mkdir and create: a new child `name` of `parent`, or an errno.
int add_child(RamFs* fs, fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              Node** out) {
  Node* dir = fs->find(parent);
  if (fs->lower) {
    return EROFS;
  }
  if (dir == nullptr || !S_ISDIR(dir->st.st_mode)) {
    return ENOENT;
  }
  if (dir->children.count(name) != 0) {
    return EEXIST;
  }
  Node* n = fs->make(mode, fuse_req_ctx(req));
  if (fs->host && S_ISDIR(mode) &&
      ::mkdirat(fs->host.get(), fs->host_name(*n).c_str(), mode & 07777) != 0) {
    return errno;
  }
  dir->children.emplace(name, n->ino);
  if (S_ISDIR(mode)) {
    dir->st.st_nlink++;
  }
  ::clock_gettime(CLOCK_REALTIME, &dir->st.st_mtim);
  dir->st.st_ctim = dir->st.st_mtim;
  *out = n;
  return 0;
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  RamFs* fs = fs_of(req);
  fuse_entry_param e;
  {
    std::lock_guard lk(fs->mu);
    Node* n = nullptr;
    if (int err = add_child(fs, req, parent, name, S_IFDIR | (mode & 07777), &n); err != 0) {
      return (void)fuse_reply_err(req, err);
    }
    e = entry_of(*n);
  }
  fuse_reply_entry(req, &e);
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  RamFs* fs = fs_of(req);
  fuse_entry_param e;
  {
    std::lock_guard lk(fs->mu);
    Node* n = nullptr;
    if (int err = add_child(fs, req, parent, name, S_IFREG | (mode & 07777), &n); err != 0) {
      return (void)fuse_reply_err(req, err);
    }
    e = entry_of(*n);
    fi->noflush = 1;
    fs->passthrough(fi);
    if (fs->host) {
      int fd = ::openat(fs->host.get(), fs->host_name(*n).c_str(),
                        O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
      if (fd < 0 || fs->host_open(n, fd, fi) != 0) {
        return (void)fuse_reply_err(req, fd < 0 ? errno : EIO);
      }
    }
  }
  fuse_reply_create(req, &e, fi);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  RamFs* fs = fs_of(req);
  {
    std::lock_guard lk(fs->mu);
    Node* n = fs->find(ino);
    if (n == nullptr) {
      return (void)fuse_reply_err(req, ENOENT);
    }
    fi->noflush = 1;
    fs->passthrough(fi);
    if (fs->lower) {
      if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        return (void)fuse_reply_err(req, EROFS);
      }
      int fd = n->fd >= 0 ? -1
                          : ::openat(fs->find(n->parent)->dir_fd.get(), n->name.c_str(),
                                     O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (n->fd < 0 && fd < 0) {
        return (void)fuse_reply_err(req, errno);
      }
      if (int err = fs->host_open(n, fd, fi); err != 0) {
        return (void)fuse_reply_err(req, err);
      }
    } else if (fs->host) {
      if (int err = fs->host_open(n, -1, fi); err != 0) {
        return (void)fuse_reply_err(req, err);
      }
    }
  }
  fuse_reply_open(req, fi);
}

// Without passthrough (not root): writes arrive here and are only counted in the size.
void op_write(fuse_req_t req, fuse_ino_t ino, const char*, size_t size, off_t off,
              fuse_file_info*) {
  RamFs* fs = fs_of(req);
  {
    std::lock_guard lk(fs->mu);
    if (Node* n = fs->find(ino); n != nullptr && off + static_cast<off_t>(size) > n->st.st_size) {
      n->st.st_size = off + static_cast<off_t>(size);
    }
  }
  fuse_reply_write(req, size);
}

void op_read(fuse_req_t req, fuse_ino_t, size_t, off_t, fuse_file_info*) {
  fuse_reply_buf(req, nullptr, 0);
}

void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  RamFs* fs = fs_of(req);
  {
    std::lock_guard lk(fs->mu);
    Node* n = fs->find(ino);
    if ((fs->host || fs->lower) && n != nullptr && n->opens > 0 && --n->opens == 0) {
      if (n->backing_id >= 0) {
        passthrough::close_backing(fuse_session_fd(fs->se), n->backing_id);
        n->backing_id = -1;
      }
      ::close(n->fd);
      n->fd = -1;
    }
  }
  fuse_reply_err(req, 0);
}
void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }
void op_fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { fuse_reply_err(req, 0); }

void remove_child(fuse_req_t req, fuse_ino_t parent, const char* name, bool dir_wanted) {
  RamFs* fs = fs_of(req);
  std::lock_guard lk(fs->mu);
  if (fs->lower) {
    return (void)fuse_reply_err(req, EROFS);
  }
  Node* dir = fs->find(parent);
  auto it =
      dir == nullptr ? std::map<std::string, fuse_ino_t>::iterator{} : dir->children.find(name);
  if (dir == nullptr || it == dir->children.end()) {
    return (void)fuse_reply_err(req, ENOENT);
  }
  Node* n = fs->find(it->second);
  bool is_dir = S_ISDIR(n->st.st_mode);
  if (is_dir != dir_wanted) {
    return (void)fuse_reply_err(req, is_dir ? EISDIR : ENOTDIR);
  }
  if (is_dir && !n->children.empty()) {
    return (void)fuse_reply_err(req, ENOTEMPTY);
  }
  if (fs->host &&
      ::unlinkat(fs->host.get(), fs->host_name(*n).c_str(), is_dir ? AT_REMOVEDIR : 0) != 0) {
    return (void)fuse_reply_err(req, errno);
  }
  dir->children.erase(it);
  if (is_dir) {
    dir->st.st_nlink--;
  }
  n->st.st_nlink = 0;  // the node stays until unmount: the kernel may still hold it
  ::clock_gettime(CLOCK_REALTIME, &dir->st.st_mtim);
  dir->st.st_ctim = dir->st.st_mtim;
  fuse_reply_err(req, 0);
}
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  remove_child(req, parent, name, false);
}
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  remove_child(req, parent, name, true);
}

void op_opendir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) { fuse_reply_open(req, fi); }

// One batch with every entry (the floor workloads list only small directories).
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  RamFs* fs = fs_of(req);
  std::vector<char> buf(size);
  size_t used = 0;
  {
    std::unique_lock lk(fs->mu);
    Node* dir = fs->find(ino);
    if (dir == nullptr) {
      return (void)fuse_reply_err(req, ENOENT);
    }
    if (fs->lower && !dir->listed) {
      int fd = ::openat(dir->dir_fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
      if (d == nullptr) {
        return (void)fuse_reply_err(req, errno);
      }
      while (dirent* de = ::readdir(d)) {
        if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0) {
          fs->lower_child(lk, dir, de->d_name);
        }
      }
      ::closedir(d);
      dir->listed = true;
    }
    off_t i = 0;
    for (const auto& [name, child] : dir->children) {
      if (++i <= off) {
        continue;
      }
      fuse_entry_param e = entry_of(*fs->find(child));
      size_t need =
          fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &e, i);
      if (need > size - used) {
        break;
      }
      used += need;
    }
  }
  fuse_reply_buf(req, buf.data(), used);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs s {};
  s.f_bsize = s.f_frsize = 4096;
  s.f_blocks = s.f_bfree = s.f_bavail = 1u << 24;
  s.f_files = s.f_ffree = 1u << 24;
  s.f_namemax = 255;
  fuse_reply_statfs(req, &s);
}

void on_init_done(void* ctx, bool io_uring, size_t max_payload) {
  auto* t = static_cast<UringTransport*>(ctx);
  if (t != nullptr && io_uring) {
    t->start(max_payload);
  }
  std::fprintf(stderr, "cordon-bench-ramfs: transport %s, passthrough %s\n",
               io_uring ? "io_uring" : "/dev/fuse", passthrough_enabled() ? "on" : "off");
}

int usage() {
  std::fprintf(stderr,
               "usage: cordon-bench-ramfs MOUNTPOINT --backing FILE [--host DIR | --lower DIR] "
               "[--no-io-uring]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mountpoint, backing, host, lower;
  bool no_uring = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--backing" && i + 1 < argc) {
      backing = argv[++i];
    } else if (a == "--lower" && i + 1 < argc) {
      lower = argv[++i];
    } else if (a == "--host" && i + 1 < argc) {
      host = argv[++i];
    } else if (a == "--no-io-uring") {
      no_uring = true;
    } else if (mountpoint.empty() && !a.starts_with("-")) {
      mountpoint = a;
    } else {
      return usage();
    }
  }
  if (mountpoint.empty() || backing.empty() || (!host.empty() && !lower.empty())) {
    return usage();
  }
  RamFs fs;
  fs.backing_fd.reset(::open(backing.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fs.backing_fd) {
    std::fprintf(stderr, "cordon-bench-ramfs: %s: %s\n", backing.c_str(), std::strerror(errno));
    return 1;
  }
  if (!host.empty()) {
    fs.host.reset(::open(host.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fs.host) {
      std::fprintf(stderr, "cordon-bench-ramfs: --host %s: %s\n", host.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }
  ::umask(0);
  {
    fuse_ctx root{};
    Node* r = fs.make(S_IFDIR | 0755, &root);
    fs.nodes.emplace(FUSE_ROOT_ID, std::move(fs.nodes[r->ino]));
    fs.nodes.erase(r->ino);
    r->ino = r->st.st_ino = FUSE_ROOT_ID;
    if (!lower.empty()) {
      r->dir_fd.reset(::open(lower.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!r->dir_fd || ::fstat(r->dir_fd.get(), &r->st) != 0) {
        std::fprintf(stderr, "cordon-bench-ramfs: --lower %s: %s\n", lower.c_str(),
                     std::strerror(errno));
        return 1;
      }
      fs.lower = true;
    }
  }
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.getattr = op_getattr;
  ops.setattr = op_setattr;
  ops.mkdir = op_mkdir;
  ops.create = op_create;
  ops.open = op_open;
  ops.read = op_read;
  ops.write = op_write;
  ops.flush = op_flush;
  ops.release = op_release;
  ops.fsync = op_fsync;
  // No xattr ops: libfuse answers them ENOSYS and the kernel stops sending them, as it does to
  // cordon-fs's copy-on-write view under the default policy (filesystem.xattrs false).
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.opendir = op_opendir;
  ops.readdirplus = op_readdirplus;
  ops.statfs = op_statfs;
  const char* fargv[] = {"cordon-bench-ramfs", "-o",
                         "default_permissions,fsname=cordon-bench-ramfs,subtype=ramfs"};
  fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(fargv));
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &fs);
  fuse_opt_free_args(&args);  // the session keeps what it needs
  if (se == nullptr || fuse_set_signal_handlers(se) != 0 ||
      fuse_session_mount(se, mountpoint.c_str()) != 0) {
    std::fprintf(stderr, "cordon-bench-ramfs: mounting %s failed\n", mountpoint.c_str());
    return 1;
  }
  fs.se = se;
  InitAdditions init;
  init.passthrough = passthrough::unusable_reason().empty();
  std::unique_ptr<UringTransport> uring;
  if (!no_uring) {
    auto t = UringTransport::prepare(se, &fs, UringOptions{});
    if (t.ok()) {
      uring = std::move(t).value();
      init.io_uring = true;
    }
  }
  set_init_done_handler(on_init_done, uring.get());
  if (auto st = add_init_flags(se, init); !st.ok()) {
    std::fprintf(stderr, "cordon-bench-ramfs: %s\n", st.error().to_string().c_str());
  }
  fuse_loop_config loop{};
  loop.max_idle_threads = 16;
  int rc = fuse_session_loop_mt(se, &loop);
  if (uring) {
    uring->stop();
  }
  set_init_done_handler(nullptr, nullptr);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP ? 0 : 1;
}
