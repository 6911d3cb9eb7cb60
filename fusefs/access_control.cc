// Path policy inside the workspace and its refusal events.
#include "fusefs/access_control.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
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
  nlohmann::json ev = {{"decision", "deny"},
                       {"path", std::string(path)},
                       {"op", std::string(op)},
                       {"rule", rule}};
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

int AccessControl::check_tree_move(int dirfd, std::string_view from, std::string_view to,
                                   const Caller& who) const {
  // Depth first with an explicit stack of open directories: no recursion on a tree the sandbox
  // shaped; the entry budget bounds the time and the fds held (one per level).
  struct Level {
    DIR* dir;
    std::string rel;  // beneath the moved directory ("" for itself)
  };
  std::vector<Level> stack;
  auto close_all = [&] {
    for (auto& l : stack) {
      ::closedir(l.dir);
    }
  };
  auto open_dir = [](int at, const char* name) -> DIR* {
    int fd = ::openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (d == nullptr && fd >= 0) {
      ::close(fd);
    }
    return d;
  };
  DIR* top = open_dir(dirfd, ".");
  if (top == nullptr) {
    return -EIO;
  }
  stack.push_back({top, ""});
  size_t seen = 0;
  while (!stack.empty()) {
    errno = 0;
    dirent* e = ::readdir(stack.back().dir);
    if (e == nullptr) {
      int err = errno;
      ::closedir(stack.back().dir);
      stack.pop_back();
      if (err != 0) {
        close_all();
        return -EIO;
      }
      continue;
    }
    std::string_view name = e->d_name;
    if (name == "." || name == ".." || is_reserved_name(name)) {
      continue;
    }
    if (++seen > kMaxMovedTree) {
      close_all();
      return -EXDEV;
    }
    std::string rel =
        stack.back().rel.empty() ? std::string(name) : stack.back().rel + "/" + std::string(name);
    for (std::string_view base : {from, to}) {
      std::string at = base.empty() ? rel : std::string(base) + "/" + rel;
      int rc = check_read(at, "rename", who);
      if (rc == 0) {
        rc = check_write(at, "rename", who);
      }
      if (rc != 0) {
        close_all();
        return rc;
      }
    }
    bool is_dir = e->d_type == DT_DIR;
    int parent = ::dirfd(stack.back().dir);
    if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir = ::fstatat(parent, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) {
      DIR* sub = open_dir(parent, e->d_name);
      if (sub == nullptr) {
        close_all();
        return -EIO;
      }
      stack.push_back({sub, std::move(rel)});
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
