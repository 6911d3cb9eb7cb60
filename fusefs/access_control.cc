// Path policy inside the workspace and its refusal events.
#include "fusefs/access_control.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>

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

int AccessControl::check_read(std::string_view path, std::string_view op, const Caller& who) const {
  if (path.empty()) {
    return 0;  // the workspace root itself
  }
  policy::Decision d = policy_.decide_read(path);
  if (d.allow) {
    return 0;
  }
  refused(path, op, d.rule, who);
  return policy_.deny_style == policy::DenyStyle::Hide ? -ENOENT : -EACCES;
}

int AccessControl::check_write(std::string_view path, std::string_view op,
                               const Caller& who) const {
  if (policy_.mode == policy::WorkspaceMode::Ro) {
    refused(path, op, "filesystem.mode", who);
    return -EROFS;
  }
  policy::Decision d = policy_.decide_write(path);
  if (d.allow) {
    return 0;
  }
  refused(path, op, d.rule, who);
  return -EACCES;
}

bool AccessControl::visible(std::string_view path) const {
  if (policy_.deny_style != policy::DenyStyle::Hide) {
    return true;
  }
  return policy_.decide_read(path).allow;
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
