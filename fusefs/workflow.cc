// Diff, commit, snapshot, rollback and discard of a session's layers.
#include "fusefs/workflow.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {

const char* change_kind_name(ChangeKind k) {
  switch (k) {
    case ChangeKind::Added:
      return "added";
    case ChangeKind::Modified:
      return "modified";
    case ChangeKind::Deleted:
      return "deleted";
  }
  return "?";
}

namespace {

char type_char(mode_t m) {
  if (S_ISDIR(m)) return 'd';
  if (S_ISLNK(m)) return 'l';
  if (S_ISFIFO(m)) return 'p';
  return 'f';
}

std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }

bool same_content(int dir_a, int dir_b, const std::string& name, const struct stat& a,
                  const struct stat& b) {
  if ((a.st_mode & S_IFMT) != (b.st_mode & S_IFMT) || (a.st_mode & 07777) != (b.st_mode & 07777)) {
    return false;
  }
  if (S_ISLNK(a.st_mode)) {
    char ta[PATH_MAX], tb[PATH_MAX];
    ssize_t na = ::readlinkat(dir_a, name.c_str(), ta, sizeof(ta));
    ssize_t nb = ::readlinkat(dir_b, name.c_str(), tb, sizeof(tb));
    return na == nb && na >= 0 && std::memcmp(ta, tb, static_cast<size_t>(na)) == 0;
  }
  if (!S_ISREG(a.st_mode)) {
    return true;
  }
  if (a.st_size != b.st_size) {
    return false;
  }
  UniqueFd fa(open_beneath(dir_a, name, O_RDONLY | O_NOFOLLOW));
  UniqueFd fb(open_beneath(dir_b, name, O_RDONLY | O_NOFOLLOW));
  if (!fa || !fb) {
    return false;
  }
  std::vector<char> ba(1 << 16), bb(1 << 16);
  for (;;) {
    ssize_t na = ::read(fa.get(), ba.data(), ba.size());
    if (na <= 0) {
      return na == 0;
    }
    size_t got = 0;
    while (got < static_cast<size_t>(na)) {
      ssize_t nb = ::read(fb.get(), bb.data() + got, static_cast<size_t>(na) - got);
      if (nb <= 0) {
        return false;
      }
      got += static_cast<size_t>(nb);
    }
    if (std::memcmp(ba.data(), bb.data(), static_cast<size_t>(na)) != 0) {
      return false;
    }
  }
}

void list_deleted_tree(int dirfd, const std::string& rel, std::vector<Change>* out) {
  int err = 0;
  for (const auto& n : list_dir(dirfd, &err)) {
    struct stat st;
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;
    }
    out->push_back({ChangeKind::Deleted, join(rel, n), type_char(st.st_mode), 0, false});
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(open_beneath(dirfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (sub) {
        list_deleted_tree(sub.get(), join(rel, n), out);
      }
    }
  }
}

void list_added_tree(int dirfd, const std::string& rel, std::vector<Change>* out) {
  int err = 0;
  for (const auto& n : list_dir(dirfd, &err)) {
    if (is_reserved_name(n)) {
      continue;
    }
    struct stat st;
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;
    }
    out->push_back({ChangeKind::Added, join(rel, n), type_char(st.st_mode),
                    S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0, false});
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(open_beneath(dirfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (sub) {
        list_added_tree(sub.get(), join(rel, n), out);
      }
    }
  }
}

// Walks one directory of the upper layer against the lower directory at the same path.
int walk(int upper, int lower, const std::string& rel, std::vector<Change>* out) {
  int err = 0;
  std::vector<std::string> names = list_dir(upper, &err);
  if (err) {
    return -err;
  }
  std::set<std::string> present(names.begin(), names.end());
  bool opaque = present.count(std::string(kOpaqueMarker)) != 0;
  if (opaque) {
    lower = -1;
  }
  for (const auto& n : names) {
    std::string_view wt = whiteout_target(n);
    if (!wt.empty()) {
      std::string target(wt);
      struct stat lst;
      if (lower >= 0 && present.count(target) == 0 &&
          ::fstatat(lower, target.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0) {
        out->push_back({ChangeKind::Deleted, join(rel, target), type_char(lst.st_mode), 0, false});
        if (S_ISDIR(lst.st_mode)) {
          UniqueFd sub(open_beneath(lower, target, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
          if (sub) {
            list_deleted_tree(sub.get(), join(rel, target), out);
          }
        }
      }
      continue;
    }
    if (is_reserved_name(n)) {
      continue;
    }
    struct stat ust, lst;
    if (::fstatat(upper, n.c_str(), &ust, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;
    }
    bool in_lower = lower >= 0 && ::fstatat(lower, n.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0;
    std::string path = join(rel, n);
    uint64_t size = S_ISREG(ust.st_mode) ? static_cast<uint64_t>(ust.st_size) : 0;
    if (S_ISDIR(ust.st_mode)) {
      UniqueFd usub(open_beneath(upper, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (!usub) {
        return -errno;
      }
      if (in_lower && S_ISDIR(lst.st_mode)) {
        if ((ust.st_mode & 07777) != (lst.st_mode & 07777)) {
          out->push_back({ChangeKind::Modified, path, 'd', 0, false});
        }
        UniqueFd lsub(open_beneath(lower, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
        if (int rc = walk(usub.get(), lsub ? lsub.get() : -1, path, out); rc != 0) {
          return rc;
        }
      } else {
        out->push_back({in_lower ? ChangeKind::Modified : ChangeKind::Added, path, 'd', 0, false});
        list_added_tree(usub.get(), path, out);
      }
      continue;
    }
    if (!in_lower) {
      out->push_back({ChangeKind::Added, path, type_char(ust.st_mode), size, false});
    } else if (!same_content(upper, lower, n, ust, lst)) {
      out->push_back({ChangeKind::Modified, path, type_char(ust.st_mode), size, false});
    }
  }
  return 0;
}

UniqueFd open_dir(const std::string& path, int* err) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  *err = fd ? 0 : errno;
  return fd;
}

bool selected(const std::string& path, const std::vector<std::string>& only) {
  if (only.empty()) {
    return true;
  }
  for (const auto& o : only) {
    std::string p = o;
    while (!p.empty() && p.back() == '/') {
      p.pop_back();
    }
    if (path == p || path.starts_with(p + "/")) {
      return true;
    }
  }
  return false;
}

std::pair<std::string, std::string> split(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return {"", path};
  }
  return {path.substr(0, slash), path.substr(slash + 1)};
}

// Opens (creating as needed, with the upper's modes) the directory `rel` under root.
UniqueFd open_or_make_dir(int lower_root, int upper_root, const std::string& rel) {
  if (rel.empty()) {
    return UniqueFd(::fcntl(lower_root, F_DUPFD_CLOEXEC, 0));
  }
  UniqueFd fd(open_beneath(lower_root, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  if (fd) {
    return fd;
  }
  auto [parent, name] = split(rel);
  UniqueFd p = open_or_make_dir(lower_root, upper_root, parent);
  if (!p) {
    return p;
  }
  struct stat ust;
  mode_t mode = 0755;
  if (::fstatat(upper_root, rel.c_str(), &ust, AT_SYMLINK_NOFOLLOW) == 0) {
    mode = ust.st_mode & 07777;
  }
  if (::mkdirat(p.get(), name.c_str(), mode) != 0 && errno != EEXIST) {
    return UniqueFd();
  }
  return UniqueFd(open_beneath(p.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
}

// The origin record of `rel` in the upper layer, if any: "ino size mtime_ns".
bool read_origin(int upper_root, const std::string& rel, std::string* out) {
  auto [parent, name] = split(rel);
  std::string p = parent.empty() ? origin_name(name) : parent + "/" + origin_name(name);
  UniqueFd fd(open_beneath(upper_root, p, O_RDONLY | O_NOFOLLOW));
  if (!fd) {
    return false;
  }
  char buf[128];
  ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) {
    return false;
  }
  out->assign(buf, static_cast<size_t>(n));
  while (!out->empty() && out->back() == '\n') {
    out->pop_back();
  }
  return true;
}

std::string lower_state(int lower_root, const std::string& rel, bool* exists) {
  struct stat st;
  // Through openat2: a multi-component fstatat would follow symlinked parents.
  UniqueFd fd(open_beneath(lower_root, rel, O_PATH | O_NOFOLLOW));
  if (!fd || ::fstatat(fd.get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    *exists = false;
    return "";
  }
  *exists = true;
  return std::to_string(st.st_ino) + " " + std::to_string(st.st_size) + " " +
         std::to_string(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
}

// Writes the upper object at rel into the lower tree, atomically replacing what is there.
int apply_one(int lower_root, int upper_root, const Change& c) {
  auto [parent, name] = split(c.path);
  UniqueFd ldir = open_or_make_dir(lower_root, upper_root, parent);
  if (!ldir) {
    return -errno;
  }
  if (c.kind == ChangeKind::Deleted) {
    return remove_tree_at(ldir.get(), name);
  }
  UniqueFd udir(parent.empty() ? ::fcntl(upper_root, F_DUPFD_CLOEXEC, 0)
                               : open_beneath(upper_root, parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  if (!udir) {
    return -errno;
  }
  struct stat ust, lst;
  if (::fstatat(udir.get(), name.c_str(), &ust, AT_SYMLINK_NOFOLLOW) != 0) {
    return -errno;
  }
  bool lower_exists = ::fstatat(ldir.get(), name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0;
  if (S_ISDIR(ust.st_mode)) {
    if (lower_exists && !S_ISDIR(lst.st_mode)) {
      if (int rc = remove_tree_at(ldir.get(), name); rc != 0) {
        return rc;
      }
      lower_exists = false;
    }
    if (!lower_exists && ::mkdirat(ldir.get(), name.c_str(), ust.st_mode & 07777) != 0) {
      return -errno;
    }
    UniqueFd d(open_beneath(ldir.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    return d && ::fchmod(d.get(), ust.st_mode & 07777) == 0 ? 0 : -errno;
  }
  if (lower_exists && S_ISDIR(lst.st_mode)) {
    if (int rc = remove_tree_at(ldir.get(), name); rc != 0) {
      return rc;
    }
  }
  std::string tmp = ".cordon-commit-" + std::to_string(::getpid()) + "-" + name.substr(0, 64);
  ::unlinkat(ldir.get(), tmp.c_str(), 0);
  if (S_ISREG(ust.st_mode)) {
    UniqueFd src(open_beneath(udir.get(), name, O_RDONLY | O_NOFOLLOW));
    UniqueFd dst(open_beneath(ldir.get(), tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
    if (!src || !dst) {
      return -errno;
    }
    int rc = clone_or_copy(src.get(), dst.get());
    if (rc == 0) {
      rc = copy_xattrs(src.get(), dst.get());
    }
    if (rc == 0 && ::fchmod(dst.get(), ust.st_mode & 07777) != 0) {
      rc = -errno;
    }
    timespec times[2] = {ust.st_atim, ust.st_mtim};
    if (rc == 0 && ::futimens(dst.get(), times) != 0) {
      rc = -errno;
    }
    // The real workspace gets the bytes durably before the rename makes them visible.
    if (rc == 0 && ::fsync(dst.get()) != 0) {
      rc = -errno;
    }
    if (rc != 0) {
      ::unlinkat(ldir.get(), tmp.c_str(), 0);
      return rc;
    }
  } else if (S_ISLNK(ust.st_mode)) {
    char target[PATH_MAX + 1];
    ssize_t n = ::readlinkat(udir.get(), name.c_str(), target, PATH_MAX);
    if (n < 0) {
      return -errno;
    }
    target[n] = '\0';
    if (::symlinkat(target, ldir.get(), tmp.c_str()) != 0) {
      return -errno;
    }
  } else if (S_ISFIFO(ust.st_mode)) {
    if (::mkfifoat(ldir.get(), tmp.c_str(), ust.st_mode & 07777) != 0) {
      return -errno;
    }
  } else {
    return 0;
  }
  if (::renameat(ldir.get(), tmp.c_str(), ldir.get(), name.c_str()) != 0) {
    int e = errno;
    ::unlinkat(ldir.get(), tmp.c_str(), 0);
    return -e;
  }
  return 0;
}

// Drops a committed path's entries from the upper layer (the object, its whiteout, its origin).
void drop_from_upper(int upper_root, const Change& c) {
  auto [parent, name] = split(c.path);
  UniqueFd udir(parent.empty() ? ::fcntl(upper_root, F_DUPFD_CLOEXEC, 0)
                               : open_beneath(upper_root, parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  if (!udir) {
    return;
  }
  ::unlinkat(udir.get(), whiteout_name(name).c_str(), 0);
  ::unlinkat(udir.get(), origin_name(name).c_str(), 0);
  struct stat st;
  if (c.type != 'd' && ::fstatat(udir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      !S_ISDIR(st.st_mode)) {
    ::unlinkat(udir.get(), name.c_str(), 0);
  }
}

}  // namespace

Result<std::vector<Change>> diff_layers(const std::string& lower, const std::string& upper,
                                        const policy::FilesystemPolicy* policy) {
  int err = 0;
  UniqueFd u = open_dir(upper, &err);
  if (!u) {
    errno = err;
    return sys_error("opening the upper layer " + upper);
  }
  UniqueFd l = open_dir(lower, &err);
  if (!l) {
    errno = err;
    return sys_error("opening the workspace " + lower);
  }
  std::vector<Change> out;
  if (int rc = walk(u.get(), l.get(), "", &out); rc != 0) {
    errno = -rc;
    return sys_error("comparing " + upper + " with " + lower);
  }
  std::sort(out.begin(), out.end(), [](const Change& a, const Change& b) { return a.path < b.path; });
  if (policy != nullptr) {
    for (auto& c : out) {
      for (const auto& p : policy->protect) {
        if (p.matches(c.path)) {
          c.is_protected = true;
          break;
        }
      }
    }
  }
  return out;
}

Result<CommitReport> commit_layers(const std::string& lower, const std::string& upper,
                                   const std::vector<std::string>& only) {
  ASSIGN_OR_RETURN(std::vector<Change> changes, diff_layers(lower, upper));
  int err = 0;
  UniqueFd u = open_dir(upper, &err);
  UniqueFd l = open_dir(lower, &err);
  if (!u || !l) {
    errno = err;
    return sys_error("opening the layers " + lower + " / " + upper);
  }
  std::vector<Change> todo;
  CommitReport report;
  for (const auto& c : changes) {
    if (!selected(c.path, only)) {
      continue;
    }
    todo.push_back(c);
    if (c.type == 'd' && c.kind != ChangeKind::Deleted) {
      continue;
    }
    bool exists = false;
    std::string now = lower_state(l.get(), c.path, &exists);
    std::string origin;
    if (read_origin(u.get(), c.path, &origin)) {
      if (!exists) {
        if (c.kind != ChangeKind::Deleted) {
          report.conflicts.push_back(c.path + ": deleted in the workspace since the session read it");
        }
      } else if (now != origin) {
        report.conflicts.push_back(c.path + ": changed in the workspace since the session read it");
      }
    } else if (c.kind != ChangeKind::Deleted && exists) {
      // cordon-fs records every real file the session shadows; none here means the real file
      // appeared after the session created its own.
      report.conflicts.push_back(c.path + ": created in the workspace since the session started");
    }
  }
  if (!report.conflicts.empty()) {
    return report;
  }
  // Deletions deepest first, then writes parents first (sorted order).
  for (auto it = todo.rbegin(); it != todo.rend(); ++it) {
    if (it->kind == ChangeKind::Deleted) {
      if (int rc = apply_one(l.get(), u.get(), *it); rc != 0) {
        errno = -rc;
        return sys_error("committing the deletion of " + it->path);
      }
      report.applied.push_back(it->path);
    }
  }
  for (const auto& c : todo) {
    if (c.kind != ChangeKind::Deleted) {
      if (int rc = apply_one(l.get(), u.get(), c); rc != 0) {
        errno = -rc;
        return sys_error("committing " + c.path, "the files listed before it were applied");
      }
      report.applied.push_back(c.path);
    }
  }
  if (only.empty()) {
    if (int rc = clear_dir(u.get()); rc != 0) {
      errno = -rc;
      return sys_error("clearing the committed upper layer " + upper);
    }
  } else {
    for (const auto& c : todo) {
      drop_from_upper(u.get(), c);
    }
  }
  return report;
}

Status snapshot_layer(const std::string& upper, const std::string& dest) {
  int err = 0;
  UniqueFd u = open_dir(upper, &err);
  if (!u) {
    errno = err;
    return sys_error("opening the upper layer " + upper);
  }
  std::string tmp = dest + ".tmp-" + std::to_string(::getpid());
  remove_tree_at(AT_FDCWD, tmp);
  if (::mkdir(tmp.c_str(), 0700) != 0) {
    return sys_error("mkdir(\"" + tmp + "\")");
  }
  UniqueFd d = open_dir(tmp, &err);
  if (!d) {
    errno = err;
    return sys_error("opening " + tmp);
  }
  if (int rc = copy_tree(u.get(), d.get()); rc != 0) {
    remove_tree_at(AT_FDCWD, tmp);
    errno = -rc;
    return sys_error("copying " + upper + " into " + tmp);
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dest.c_str(), RENAME_NOREPLACE) != 0) {
    Error e = sys_error("rename(\"" + tmp + "\", \"" + dest + "\")");
    remove_tree_at(AT_FDCWD, tmp);
    return e;
  }
  return {};
}

Status restore_layer(const std::string& upper, const std::string& snapshot) {
  int err = 0;
  UniqueFd u = open_dir(upper, &err);
  if (!u) {
    errno = err;
    return sys_error("opening the upper layer " + upper);
  }
  UniqueFd s;
  if (!snapshot.empty()) {
    s = open_dir(snapshot, &err);
    if (!s) {
      errno = err;
      return sys_error("opening snapshot " + snapshot, "name an existing snapshot");
    }
  }
  if (int rc = clear_dir(u.get()); rc != 0) {
    errno = -rc;
    return sys_error("clearing " + upper);
  }
  if (s) {
    if (int rc = copy_tree(s.get(), u.get()); rc != 0) {
      errno = -rc;
      return sys_error("copying " + snapshot + " into " + upper, "run the rollback again");
    }
  }
  return {};
}

Status discard_layer(const std::string& upper) { return restore_layer(upper, ""); }

}  // namespace cordon::fusefs
