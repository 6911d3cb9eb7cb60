// Host-side file access that never follows a path the sandbox controls.
#include "fusefs/safe_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>

#include "fusefs/layer_names.h"

namespace cordon::fusefs {

namespace {

int openat2_beneath(int dirfd, std::string_view name, int flags, mode_t mode, uint64_t resolve) {
  std::string n(name);
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | resolve;
  for (;;) {
    long fd = ::syscall(SYS_openat2, dirfd, n.c_str(), &how, sizeof(how));
    if (fd >= 0) {
      return static_cast<int>(fd);
    }
    // EAGAIN: a concurrent rename somewhere on the host; the kernel asks to retry.
    if (errno != EAGAIN && errno != EINTR) {
      return -1;
    }
  }
}

}  // namespace

int open_beneath(int dirfd, std::string_view name, int flags, mode_t mode) {
  return openat2_beneath(dirfd, name, flags, mode, 0);
}

Result<UniqueFd> open_beneath_r(int dirfd, std::string_view name, int flags, mode_t mode) {
  int fd = open_beneath(dirfd, name, flags, mode);
  if (fd < 0) {
    return sys_error("openat2(\"" + std::string(name) + "\", RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)");
  }
  return UniqueFd(fd);
}

int reopen_fd(int opath_fd, int flags) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", opath_fd);
  // O_NOFOLLOW would refuse the magic link itself; the fd names an inode we already checked is a
  // regular file or directory, so following it cannot land anywhere a name would have led.
  return ::open(path, (flags & ~(O_NOFOLLOW | O_CREAT | O_EXCL)) | O_CLOEXEC);
}

int stat_fd(int fd, struct stat* st) {
  return ::fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
}

namespace {
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452  // the same number on every architecture (Linux 6.6)
#endif
std::atomic<bool> have_fchmodat2{true};

std::string proc_fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }
}  // namespace

int chmod_fd(int fd, mode_t mode) {
  if (have_fchmodat2.load(std::memory_order_relaxed)) {
    if (::syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH) == 0) {
      return 0;
    }
    if (errno != ENOSYS) {
      return -1;
    }
    have_fchmodat2.store(false, std::memory_order_relaxed);
  }
  // chmod(2) follows the magic link to the fd's own inode; it never resolves a name of the view.
  return ::chmod(proc_fd_path(fd).c_str(), mode);
}

int utimens_fd(int fd, const struct timespec times[2]) {
  // AT_EMPTY_PATH: the fd's own object, O_PATH fds and symlinks included (Linux >= 2.6.39).
  return ::utimensat(fd, "", times, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
}

int copy_data(int in_fd, int out_fd, uint64_t len) {
  bool use_cfr = true;
  std::vector<char> buf;
  while (len > 0) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : static_cast<size_t>(len);
    ssize_t n = -1;
    if (use_cfr) {
      n = ::copy_file_range(in_fd, nullptr, out_fd, nullptr, chunk, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        use_cfr = false;
        continue;
      }
    } else {
      if (buf.empty()) {
        buf.resize(1 << 20);
      }
      n = ::read(in_fd, buf.data(), std::min(buf.size(), chunk));
      if (n > 0) {
        ssize_t off = 0;
        while (off < n) {
          ssize_t w = ::write(out_fd, buf.data() + off, static_cast<size_t>(n - off));
          if (w < 0) {
            if (errno == EINTR) {
              continue;
            }
            return -errno;
          }
          off += w;
        }
      }
    }
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return -errno;
    }
    if (n == 0) {
      break;
    }
    if (len != UINT64_MAX) {
      len -= static_cast<uint64_t>(n);
    }
  }
  return 0;
}

int clone_or_copy(int in_fd, int out_fd) {
  if (::ioctl(out_fd, FICLONE, in_fd) == 0) {
    return 0;
  }
  return copy_data(in_fd, out_fd);
}

int copy_xattrs(int in_fd, int out_fd, bool (*keep)(std::string_view name)) {
  ssize_t size = ::flistxattr(in_fd, nullptr, 0);
  if (size <= 0) {
    return (size < 0 && errno != ENOTSUP && errno != ENODATA) ? -errno : 0;
  }
  std::vector<char> names(static_cast<size_t>(size));
  size = ::flistxattr(in_fd, names.data(), names.size());
  if (size < 0) {
    return -errno;
  }
  std::vector<char> value;
  for (size_t i = 0; i < static_cast<size_t>(size);) {
    const char* name = names.data() + i;
    i += std::strlen(name) + 1;
    if (keep != nullptr && !keep(name)) {
      continue;
    }
    ssize_t vlen = ::fgetxattr(in_fd, name, nullptr, 0);
    if (vlen < 0) {
      continue;
    }
    value.resize(static_cast<size_t>(vlen) + 1);
    vlen = ::fgetxattr(in_fd, name, value.data(), value.size());
    if (vlen < 0) {
      continue;
    }
    // Privileged namespaces (trusted.*, security.*) may be refused to an unprivileged daemon; the
    // data is what matters, so a refused xattr is not a failed copy-up.
    if (::fsetxattr(out_fd, name, value.data(), static_cast<size_t>(vlen), 0) != 0 &&
        errno != EPERM && errno != ENOTSUP && errno != EACCES) {
      return -errno;
    }
  }
  return 0;
}

int copy_symlink(int src_dirfd, const std::string& src_name, const struct stat& st, int dst_dirfd,
                 const std::string& dst_name) {
  std::vector<char> target(static_cast<size_t>(st.st_size) + 2);
  ssize_t len = ::readlinkat(src_dirfd, src_name.c_str(), target.data(), target.size() - 1);
  if (len < 0) {
    return -errno;
  }
  target[static_cast<size_t>(len)] = '\0';
  if (::symlinkat(target.data(), dst_dirfd, dst_name.c_str()) != 0) {
    return -errno;
  }
  // A daemon that is not root cannot give objects away: they stay its own (EPERM).
  (void)!::fchownat(dst_dirfd, dst_name.c_str(), st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
  timespec times[2] = {st.st_atim, st.st_mtim};
  ::utimensat(dst_dirfd, dst_name.c_str(), times, AT_SYMLINK_NOFOLLOW);
  return 0;
}

int copy_node(const struct stat& st, int dst_dirfd, const std::string& dst_name) {
  if (!S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode)) {
    return -EPERM;  // device nodes are never made
  }
  if (::mknodat(dst_dirfd, dst_name.c_str(), st.st_mode & (S_IFMT | 07777), 0) != 0) {
    return -errno;
  }
  if (::fchownat(dst_dirfd, dst_name.c_str(), st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) == 0 &&
      (st.st_mode & (S_ISUID | S_ISGID)) != 0) {
    ::fchmodat(dst_dirfd, dst_name.c_str(), st.st_mode & 07777, 0);  // chown cleared them
  }
  timespec times[2] = {st.st_atim, st.st_mtim};
  ::utimensat(dst_dirfd, dst_name.c_str(), times, AT_SYMLINK_NOFOLLOW);
  return 0;
}

std::string temp_name() {
  static std::atomic<uint64_t> counter{0};
  return std::string(kTempPrefix) + std::to_string(::getpid()) + "." +
         std::to_string(counter.fetch_add(1));
}

std::vector<std::string> list_dir(int dirfd, int* err) {
  std::vector<std::string> out;
  *err = 0;
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return out;
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    *err = errno;
    ::close(fd);
    return out;
  }
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") {
      out.emplace_back(n);
    }
  }
  if (errno != 0) {
    *err = errno;
  }
  ::closedir(d);
  return out;
}

namespace {

// The directory `name` in dirfd, opened for listing under `flags` (RemoveFlags).
int open_dir_to_clear(int dirfd, const std::string& name, unsigned flags) {
  uint64_t resolve = (flags & kRemoveOneFilesystem) != 0 ? RESOLVE_NO_XDEV : 0;
  if ((flags & kRemoveOpenUp) == 0) {
    return openat2_beneath(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, resolve);
  }
  UniqueFd path(openat2_beneath(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0, resolve));
  struct stat st;
  if (!path || stat_fd(path.get(), &st) != 0) {
    return -1;
  }
  if ((st.st_mode & S_IRWXU) != S_IRWXU) {
    // Failure (not its owner, not root) is left to the listing and the unlinks to report.
    (void)chmod_fd(path.get(), (st.st_mode & 07777) | S_IRWXU);
  }
  return reopen_fd(path.get(), O_RDONLY | O_DIRECTORY);
}

}  // namespace

int remove_tree_at(int dirfd, const std::string& name, unsigned flags) {
  if (::unlinkat(dirfd, name.c_str(), 0) == 0) {
    return 0;
  }
  if (errno != EISDIR && errno != EPERM) {
    return errno == ENOENT ? 0 : -errno;
  }
  // Depth-first without recursion and with one open directory at a time, climbing back with
  // "..": a tree the sandbox nested 100000 levels deep must neither overflow the stack nor run
  // out of file descriptors (this is how discard drops a layer).
  struct Level {
    std::string name;                // this directory's name in its parent
    std::vector<std::string> names;  // its entries, listed on the way down
    size_t next = 0;
  };
  UniqueFd cur(open_dir_to_clear(dirfd, name, flags));
  if (!cur) {
    return -errno;
  }
  std::vector<Level> path;
  int err = 0;
  path.push_back({name, list_dir(cur.get(), &err)});
  while (err == 0) {
    Level& l = path.back();
    if (l.next < l.names.size()) {
      const std::string& n = l.names[l.next++];
      if (::unlinkat(cur.get(), n.c_str(), 0) == 0 || errno == ENOENT) {
        continue;
      }
      if (errno != EISDIR && errno != EPERM) {
        return -errno;
      }
      UniqueFd sub(open_dir_to_clear(cur.get(), n, flags));
      if (!sub) {
        return -errno;
      }
      cur = std::move(sub);
      path.push_back({n, list_dir(cur.get(), &err)});
      continue;
    }
    std::string done = l.name;
    path.pop_back();
    if (path.empty()) {
      cur.reset();
      return ::unlinkat(dirfd, done.c_str(), AT_REMOVEDIR) == 0 ? 0 : -errno;
    }
    UniqueFd up(::openat(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!up) {
      return -errno;
    }
    cur = std::move(up);
    if (::unlinkat(cur.get(), done.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      return -errno;
    }
  }
  return -err;
}

int clear_dir(int dirfd, unsigned flags) {
  int err = 0;
  for (const auto& n : list_dir(dirfd, &err)) {
    if (int rc = remove_tree_at(dirfd, n, flags); rc != 0) {
      return rc;
    }
  }
  return -err;
}

namespace {

int copy_meta(int src_fd, int dst_fd, const struct stat& st) {
  if (::fchown(dst_fd, st.st_uid, st.st_gid) != 0 && errno != EPERM) {
    return -errno;
  }
  if (::fchmod(dst_fd, st.st_mode & 07777) != 0) {
    return -errno;
  }
  if (int rc = copy_xattrs(src_fd, dst_fd); rc != 0) {
    return rc;
  }
  timespec times[2] = {st.st_atim, st.st_mtim};
  return ::futimens(dst_fd, times) == 0 ? 0 : -errno;
}

// Nothing nested deeper fits in a path; the copy recurses, so it stops there (a layer the sandbox
// nested deeper fails to copy with ENAMETOOLONG instead of overflowing the stack).
constexpr size_t kMaxCopyDepth = PATH_MAX / 2;

int copy_tree_inner(int src, int dst, std::map<std::pair<dev_t, ino_t>, UniqueFd>* links,
                    const std::string& rel, size_t depth) {
  if (depth > kMaxCopyDepth) {
    return -ENAMETOOLONG;
  }
  int err = 0;
  for (const auto& n : list_dir(src, &err)) {
    struct stat st;
    if (::fstatat(src, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return -errno;
    }
    std::string child_rel = rel.empty() ? n : rel + "/" + n;
    if (S_ISDIR(st.st_mode)) {
      if (::mkdirat(dst, n.c_str(), 0700) != 0) {
        return -errno;
      }
      UniqueFd s(open_beneath(src, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      UniqueFd d(open_beneath(dst, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (!s || !d) {
        return -errno;
      }
      if (int rc = copy_tree_inner(s.get(), d.get(), links, child_rel, depth + 1); rc != 0) {
        return rc;
      }
      if (int rc = copy_meta(s.get(), d.get(), st); rc != 0) {
        return rc;
      }
    } else if (S_ISREG(st.st_mode)) {
      if (st.st_nlink > 1) {
        auto it = links->find({st.st_dev, st.st_ino});
        if (it != links->end()) {
          // Second name of a hard link inside the tree: link the copy we made of the first name.
          char proc[64];
          std::snprintf(proc, sizeof(proc), "/proc/self/fd/%d", it->second.get());
          if (::linkat(AT_FDCWD, proc, dst, n.c_str(), AT_SYMLINK_FOLLOW) != 0) {
            return -errno;
          }
          continue;
        }
      }
      UniqueFd s(open_beneath(src, n, O_RDONLY | O_NOFOLLOW));
      UniqueFd d(open_beneath(dst, n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
      if (!s || !d) {
        return -errno;
      }
      if (int rc = clone_or_copy(s.get(), d.get()); rc != 0) {
        return rc;
      }
      if (int rc = copy_meta(s.get(), d.get(), st); rc != 0) {
        return rc;
      }
      if (st.st_nlink > 1) {
        // Remember the copy of the first name (an O_PATH fd) to link further names to it.
        (*links)[{st.st_dev, st.st_ino}] = UniqueFd(open_beneath(dst, n, O_PATH | O_NOFOLLOW));
      }
    } else if (S_ISLNK(st.st_mode)) {
      if (int rc = copy_symlink(src, n, st, dst, n); rc != 0) {
        return rc;
      }
    } else if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
      if (int rc = copy_node(st, dst, n); rc != 0) {
        return rc;
      }
    } else if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
      // A kernel overlayfs whiteout (the cow fallback's layer); any user may make one.
      if (::mknodat(dst, n.c_str(), S_IFCHR | 0600, makedev(0, 0)) != 0) {
        return -errno;
      }
    }
    // Device nodes cannot be created through the view; nothing to copy.
  }
  return -err;
}

}  // namespace

int copy_tree(int src_dirfd, int dst_dirfd) {
  std::map<std::pair<dev_t, ino_t>, UniqueFd> links;
  return copy_tree_inner(src_dirfd, dst_dirfd, &links, "", 0);
}

}  // namespace cordon::fusefs
