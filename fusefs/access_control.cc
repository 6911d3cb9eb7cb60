// Path policy inside the workspace and its refusal events.
#include "fusefs/access_control.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "fusefs/layer_names.h"

namespace cordon::fusefs {

std::string exe_of(pid_t pid) {
  if (pid <= 0) {
    return {};
  }
  char link[64];
  std::snprintf(link, sizeof(link), "/proc/%d/exe", static_cast<int>(pid));
  char buf[4096];
  // readlink on procfs never blocks on the target filesystem: it prints the path held in memory.
  ssize_t n = ::readlink(link, buf, sizeof(buf) - 1);
  if (n <= 0) {
    return {};
  }
  return std::string(buf, static_cast<size_t>(n));
}

void AccessControl::refused(std::string_view path, std::string_view op, const std::string& rule,
                            const Caller& who) const {
  if (events_ == nullptr || !events_->enabled()) {
    return;
  }
  nlohmann::json ev = {
      {"decision", "deny"}, {"path", std::string(path)}, {"op", std::string(op)}, {"rule", rule}};
  if (who.pid > 0) {
    ev["pid"] = who.pid;
    if (std::string exe = exe_of(who.pid); !exe.empty()) {
      ev["exe"] = exe;
    }
  }
  // An event that cannot be written must not turn a refusal into an allow: ignore the status.
  (void)events_->emit("fs.refused", std::move(ev));
}

std::string AccessControl::decided_path(std::string_view path) const {
  if (view_root_.empty()) {
    return std::string(path);
  }
  return path.empty() ? view_root_ : view_root_ + "/" + std::string(path);
}

std::string AccessControl::host_path(std::string_view path) const {
  if (!view_root_.empty() || workspace_root_.empty()) {
    return {};
  }
  return path.empty() ? workspace_root_ : workspace_root_ + "/" + std::string(path);
}

int AccessControl::check_read(std::string_view path, std::string_view op, const Caller& who) const {
  if (path.empty()) {
    return 0;  // the root of the view itself: the grant or the workspace
  }
  std::string p = decided_path(path);
  policy::Decision d = policy_.decide_read(p, host_path(path));
  if (d.allow) {
    return 0;
  }
  refused(p, op, d.rule, who);
  return policy_.deny_style == policy::DenyStyle::Hide ? -ENOENT : -EACCES;
}

int AccessControl::check_write(std::string_view path, std::string_view op,
                               const Caller& who) const {
  std::string p = decided_path(path);
  // filesystem.mode is the workspace's; a granted host path is decided by its own rules.
  if (view_root_.empty() && policy_.mode == policy::WorkspaceMode::Ro) {
    refused(p, op, "filesystem.mode", who);
    return -EROFS;
  }
  policy::Decision d = policy_.decide_write(p, host_path(path));
  if (d.allow) {
    return 0;
  }
  refused(p, op, d.rule, who);
  return -EACCES;
}

int AccessControl::check_create(std::string_view path, bool is_dir, std::string_view op,
                                const Caller& who) const {
  std::string p = decided_path(path);
  if (view_root_.empty() && policy_.mode == policy::WorkspaceMode::Ro) {
    refused(p, op, "filesystem.mode", who);
    return -EROFS;
  }
  policy::Decision d = policy_.decide_create(p, is_dir, host_path(path));
  if (d.allow) {
    return 0;
  }
  refused(p, op, d.rule, who);
  return -EACCES;
}

namespace {

using DirPtr = std::unique_ptr<DIR, int (*)(DIR*)>;

// A DIR stream on `name` in `dirfd` (".": dirfd itself), never following a symlink.
DirPtr open_dir_stream(int dirfd, const char* name) {
  int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (d == nullptr && fd >= 0) {
    ::close(fd);
  }
  return DirPtr(d, ::closedir);
}

std::string beneath(std::string_view base, const std::string& rel) {
  return base.empty() ? rel : std::string(base) + "/" + rel;
}

}  // namespace

int AccessControl::check_tree_move(int dirfd, std::string_view from, std::string_view to,
                                   const Caller& who) const {
  // Depth first with an explicit stack of open directories: no recursion on a tree the sandbox
  // shaped; the entry budget bounds the time and the fds held (one per level).
  struct Level {
    DirPtr dir;
    std::string rel;  // beneath the moved directory ("" for itself)
  };
  std::vector<Level> stack;
  if (DirPtr d = open_dir_stream(dirfd, ".")) {
    stack.push_back({std::move(d), ""});
  } else {
    return -EIO;
  }
  size_t seen = 0;
  while (!stack.empty()) {
    errno = 0;
    dirent* e = ::readdir(stack.back().dir.get());
    if (e == nullptr) {
      if (errno != 0) {
        return -EIO;
      }
      stack.pop_back();
      continue;
    }
    std::string_view name = e->d_name;
    if (name == "." || name == "..") {
      continue;
    }
    if (++seen > kMaxMovedTree) {
      return -EXDEV;
    }
    int parent = ::dirfd(stack.back().dir.get());
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(parent, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        continue;  // gone meanwhile: nothing lands there
      }
      is_dir = S_ISDIR(st.st_mode);
    }
    std::string rel =
        stack.back().rel.empty() ? std::string(name) : stack.back().rel + "/" + std::string(name);
    // It leaves `from` (removable there, as rm would need) and is created at `to` (a .git file
    // landing where a protected directory name stands is refused like writing it).
    int rc = check_read(beneath(from, rel), "rename", who);
    if (rc == 0) {
      rc = check_write(beneath(from, rel), "rename", who);
    }
    if (rc == 0) {
      rc = check_read(beneath(to, rel), "rename", who);
    }
    if (rc == 0) {
      rc = check_create(beneath(to, rel), is_dir, "rename", who);
    }
    if (rc != 0) {
      return rc;
    }
    if (is_dir) {
      DirPtr sub = open_dir_stream(parent, e->d_name);
      if (!sub) {
        return -EIO;
      }
      stack.push_back({std::move(sub), std::move(rel)});
    }
  }
  return 0;
}

bool AccessControl::visible(std::string_view path) const {
  if (policy_.deny_style != policy::DenyStyle::Hide) {
    return true;
  }
  return readable(path);
}

bool AccessControl::readable(std::string_view path) const {
  return path.empty() || policy_.decide_read(decided_path(path), host_path(path)).allow;
}

void AccessControl::quota_hit(std::string_view path, std::string_view what, uint64_t used,
                              uint64_t limit, const Caller& who) const {
  if (events_ == nullptr || !events_->enabled()) {
    return;
  }
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  int64_t last = last_quota_event_s_.load();
  if (last == now || !last_quota_event_s_.compare_exchange_strong(last, now)) {
    return;
  }
  nlohmann::json ev = {{"decision", "deny"},
                       {"path", std::string(path)},
                       {"quota", std::string(what)},
                       {"used", used},
                       {"limit", limit},
                       {"rule", "filesystem.quota." + std::string(what)}};
  if (who.pid > 0) {
    ev["pid"] = who.pid;
    if (std::string exe = exe_of(who.pid); !exe.empty()) {
      ev["exe"] = exe;
    }
  }
  (void)events_->emit("fs.quota", std::move(ev));
}

}  // namespace cordon::fusefs
