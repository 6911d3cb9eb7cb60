// Diff, snapshot, rollback and discard of a session's layers.
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
#include "fusefs/workspace_root.h"

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

const char* change_letter(ChangeKind k) {
  switch (k) {
    case ChangeKind::Added:
      return "A";
    case ChangeKind::Modified:
      return "M";
    case ChangeKind::Deleted:
      return "D";
  }
  return "?";
}

namespace {

char type_char(mode_t m) {
  switch (m & S_IFMT) {
    case S_IFDIR:
      return 'd';
    case S_IFLNK:
      return 'l';
    case S_IFIFO:
      return 'p';
    case S_IFSOCK:
      return 's';
    case S_IFCHR:
      return 'c';
    case S_IFBLK:
      return 'b';
  }
  return 'f';
}

std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }

bool same_content(int dir_a, int dir_b, const std::string& name, const struct stat& a,
                  const struct stat& b) {
  if ((a.st_mode & S_IFMT) != (b.st_mode & S_IFMT) || (a.st_mode & 07777) != (b.st_mode & 07777)) {
    return false;
  }
  if (S_ISLNK(a.st_mode)) {
    // On the heap: this runs inside a recursive walk, whose frames must stay small.
    std::string ta(PATH_MAX, '\0'), tb(PATH_MAX, '\0');
    ssize_t na = ::readlinkat(dir_a, name.c_str(), ta.data(), ta.size());
    ssize_t nb = ::readlinkat(dir_b, name.c_str(), tb.data(), tb.size());
    return na == nb && na >= 0 && std::memcmp(ta.data(), tb.data(), static_cast<size_t>(na)) == 0;
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

// One diff of an upper layer against the workspace. Fails closed: a part of either tree that
// cannot be read is an error naming it, never a silently shorter list for the reviewer.
class DiffWalk {
 public:
  DiffWalk(LayerFormat format, std::vector<Change>* out) : format_(format), out_(out) {}

  Status walk(int upper, int lower, const std::string& rel, size_t depth = 0) {
    // Nothing nested deeper fits in PATH_MAX, so nothing deeper could be committed; and the
    // walk recurses, so a layer the sandbox nested 100000 levels deep must not exhaust the stack.
    if (depth > kMaxDepth) {
      return make_error("the upper layer nests directories deeper than " +
                            std::to_string(kMaxDepth) + " levels at " + rel.substr(0, 200) + "...",
                        "nothing that deep fits in a path; discard the session, or remove that "
                        "tree from its upper/ by hand");
    }
    int err = 0;
    std::vector<std::string> names = list_dir(upper, &err);
    if (err != 0) {
      errno = err;
      return sys_error("reading the upper layer's " + shown(rel));
    }
    std::set<std::string> present;
    std::vector<std::string> whiteouts;
    std::vector<std::pair<std::string, struct stat>> entries;
    for (const auto& n : names) {
      struct stat st;
      if (::fstatat(upper, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return sys_error("stat of the upper layer's " + join(rel, n));
      }
      std::string target;
      switch (classify_upper(format_, upper, n, st, &target)) {
        case UpperEntry::Internal:
          break;
        case UpperEntry::Whiteout:
          whiteouts.push_back(std::move(target));
          break;
        case UpperEntry::User:
          present.insert(n);
          entries.emplace_back(n, st);
          break;
      }
    }
    if (lower >= 0) {
      // An opaque directory hides every lower name it does not have itself; a merged one only
      // those it has whiteouts for.
      std::vector<std::string> gone = whiteouts;
      if (is_opaque_dir(format_, upper)) {
        gone = list_dir(lower, &err);
        if (err != 0) {
          errno = err;
          return sys_error("reading the workspace's " + shown(rel));
        }
      }
      for (const auto& n : gone) {
        if (present.count(n) == 0) {
          TRY(deleted(lower, n, rel, /*must_exist=*/false));
        }
      }
    }
    for (const auto& [n, ust] : entries) {
      TRY(entry(upper, lower, rel, n, ust, depth));
    }
    return {};
  }

 private:
  static std::string shown(const std::string& rel) { return rel.empty() ? "top directory" : rel; }

  void emit(ChangeKind kind, const std::string& path, const struct stat* now,
            const struct stat* old) {
    Change c{kind, path};
    const struct stat& main = now != nullptr ? *now : *old;
    c.type = type_char(main.st_mode);
    if (now != nullptr) {
      c.mode = now->st_mode & 07777;
      c.size = S_ISREG(now->st_mode) ? static_cast<uint64_t>(now->st_size) : 0;
    }
    if (old != nullptr) {
      c.old_mode = old->st_mode & 07777;
      c.old_size = S_ISREG(old->st_mode) ? static_cast<uint64_t>(old->st_size) : 0;
      if (kind == ChangeKind::Modified) {
        c.old_type = type_char(old->st_mode);
      }
    }
    out_->push_back(std::move(c));
  }

  // The lower entry `name` of `lower` is gone in the view: it and everything beneath it.
  Status deleted(int lower, const std::string& name, const std::string& rel, bool must_exist) {
    struct stat lst;
    if (::fstatat(lower, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT && !must_exist) {
        return {};  // a whiteout of a name the workspace no longer has: nothing to delete
      }
      return sys_error("stat of the workspace's " + join(rel, name));
    }
    std::string path = join(rel, name);
    emit(ChangeKind::Deleted, path, nullptr, &lst);
    if (S_ISDIR(lst.st_mode)) {
      TRY(deleted_beneath(lower, name, path));
    }
    return {};
  }

  Status deleted_beneath(int lower, const std::string& name, const std::string& path) {
    UniqueFd sub(open_beneath(lower, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    if (!sub) {
      return sys_error("opening the workspace's " + path);
    }
    int err = 0;
    std::vector<std::string> names = list_dir(sub.get(), &err);
    if (err != 0) {
      errno = err;
      return sys_error("reading the workspace's " + path);
    }
    for (const auto& n : names) {
      TRY(deleted(sub.get(), n, path, true));
    }
    return {};
  }

  Status entry(int upper, int lower, const std::string& rel, const std::string& n,
               const struct stat& ust, size_t depth) {
    std::string path = join(rel, n);
    struct stat lst;
    bool in_lower = lower >= 0 && ::fstatat(lower, n.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0;
    if (S_ISDIR(ust.st_mode)) {
      UniqueFd usub(open_beneath(upper, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (!usub) {
        return sys_error("opening the upper layer's " + path,
                         "make it readable (chmod u+rx) or discard the session");
      }
      TRY(check_overlay_features(format_, usub.get(), path));
      UniqueFd lsub;
      if (in_lower && S_ISDIR(lst.st_mode)) {
        if ((ust.st_mode & 07777) != (lst.st_mode & 07777)) {
          emit(ChangeKind::Modified, path, &ust, &lst);
        }
        lsub.reset(open_beneath(lower, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
        if (!lsub) {
          return sys_error("opening the workspace's " + path);
        }
      } else {
        emit(in_lower ? ChangeKind::Modified : ChangeKind::Added, path, &ust,
             in_lower ? &lst : nullptr);
      }
      return walk(usub.get(), lsub ? lsub.get() : -1, path, depth + 1);
    }
    if (S_ISREG(ust.st_mode)) {
      TRY(check_overlay_features_at(format_, upper, n, path));
    }
    if (!in_lower) {
      emit(ChangeKind::Added, path, &ust, nullptr);
    } else if (S_ISDIR(lst.st_mode)) {
      emit(ChangeKind::Modified, path, &ust, &lst);  // a directory replaced by a file
      TRY(deleted_beneath(lower, n, path));
    } else if (!same_content(upper, lower, n, ust, lst)) {
      emit(ChangeKind::Modified, path, &ust, &lst);
    }
    return {};
  }

  static constexpr size_t kMaxDepth = PATH_MAX / 2;  // "a/" per level
  LayerFormat format_;
  std::vector<Change>* out_;
};

UniqueFd open_dir(const std::string& path, int* err) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  *err = fd ? 0 : errno;
  return fd;
}

// The directories the changes make into a new git directory: HEAD, objects/ and refs/ added
// together. git uses a bare repository's config (core.pager, core.fsmonitor) and hooks when the
// user runs git anywhere beneath it (safe.bareRepository defaults to "all"), and its name is
// anything, so no pattern can name it. "" is the workspace itself.
std::set<std::string> new_git_dirs(const std::vector<Change>& changes) {
  std::map<std::string, int> parts;
  for (const auto& c : changes) {
    if (c.kind != ChangeKind::Added) {
      continue;
    }
    size_t slash = c.path.rfind('/');
    std::string dir = slash == std::string::npos ? "" : c.path.substr(0, slash);
    std::string name = slash == std::string::npos ? c.path : c.path.substr(slash + 1);
    int bit = name == "HEAD" && c.type != 'd'      ? 1
              : name == "objects" && c.type == 'd' ? 2
              : name == "refs" && c.type == 'd'    ? 4
                                                   : 0;
    parts[dir] |= bit;
  }
  std::set<std::string> out;
  for (const auto& [dir, bits] : parts) {
    if (bits == 7) {
      out.insert(dir);
    }
  }
  return out;
}

// Whether `path` belongs to the new git directory `dir` (for the workspace itself: the names git
// reads there, not every file of the project).
bool in_git_dir(const std::string& path, const std::string& dir) {
  if (dir.empty()) {
    std::string top = path.substr(0, path.find('/'));
    return top == "HEAD" || top == "config" || top == "objects" || top == "refs" ||
           top == "hooks" || top == "info" || top == "packed-refs";
  }
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

}  // namespace

void mark_protected(std::vector<Change>* changes, const policy::FilesystemPolicy& policy) {
  std::set<std::string> git_dirs =
      policy.protect.empty() ? std::set<std::string>{} : new_git_dirs(*changes);
  for (auto& c : *changes) {
    // A replaced entry is judged as both what goes and what comes (a `.git` file for a directory).
    auto rule = policy.protect_rule(c.path, c.type == 'd');
    if (!rule && c.old_type != 0) {
      rule = policy.protect_rule(c.path, c.old_type == 'd');
    }
    c.is_protected = rule.has_value();
    c.protect_rule = rule ? "filesystem.protect[" + std::to_string(*rule) + "]" : "";
    if (!c.is_protected) {
      for (const auto& dir : git_dirs) {
        if (in_git_dir(c.path, dir)) {
          c.is_protected = true;
          c.protect_rule = "a new git directory: HEAD, objects/, refs/";
          break;
        }
      }
    }
  }
}

Result<std::vector<Change>> diff_layers(const std::string& lower, const std::string& upper,
                                        const policy::FilesystemPolicy* policy,
                                        LayerFormat format) {
  ASSIGN_OR_RETURN(UniqueFd l, open_dir_nofollow(lower));
  return diff_layers(l.get(), lower, upper, policy, format);
}

Result<std::vector<Change>> diff_layers(int lower_fd, const std::string& lower,
                                        const std::string& upper,
                                        const policy::FilesystemPolicy* policy,
                                        LayerFormat format) {
  int err = 0;
  UniqueFd u = open_dir(upper, &err);
  if (!u) {
    errno = err;
    return sys_error("opening the upper layer " + upper);
  }
  std::vector<Change> out;
  DiffWalk walk(format, &out);
  if (auto st = walk.walk(u.get(), lower_fd, ""); !st.ok()) {
    return std::move(st).error().with_context("comparing " + upper + " with " + lower);
  }
  std::sort(out.begin(), out.end(),
            [](const Change& a, const Change& b) { return a.path < b.path; });
  if (policy != nullptr) {
    mark_protected(&out, *policy);
  }
  return out;
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
