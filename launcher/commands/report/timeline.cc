// Lanes from the shim's process records, and the joins that put proxy and cordon-fs events on
// them.
#include "launcher/commands/report/timeline.h"

#include <algorithm>
#include <functional>

#include "launcher/commands/report/event_view.h"
#include "launcher/session/session_text.h"

namespace cordon::launcher::report {
namespace {

// The collector stamps a proc.start when it reads it, a little after the process began: an
// event of that pid this much earlier still belongs to it.
constexpr double kStartSlackMs = 50;

int64_t cred_pid(const nlohmann::json& ev) {
  auto c = ev.find("cred");
  return c != ev.end() && c->is_object() ? num(*c, "pid") : -1;
}

// The shim's pid and ppid of an event: checked by the collector, or only claimed by a process
// that was gone before the collector could check them (a short-lived probe such as `unshare -U
// true`, which an audit wants to see as much as any).
struct ShimIds {
  int64_t pid = -1, ppid = -1;
  bool claimed = false;
};
ShimIds shim_ids(const nlohmann::json& ev) {
  ShimIds s{num(ev, "pid"), num(ev, "ppid"), false};
  if (s.pid <= 0) {
    auto c = ev.find("claimed");
    if (c != ev.end() && c->is_object()) {
      s = {num(*c, "pid"), num(*c, "ppid"), true};
    }
  }
  return s;
}

}  // namespace

Timeline::Timeline(const std::vector<nlohmann::json>& events, const std::vector<double>& t_ms) {
  lanes_.push_back(Lane{});  // cordon itself: the launcher, and whatever no process claims
  lanes_[0].exe = "cordon";
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& ev = events[i];
    const std::string source = str(ev, "source"), kind = str(ev, "kind");
    if (source == "shim") {
      int64_t host = cred_pid(ev), pid = num(ev, "pid");
      if (host > 0 && pid > 0) {
        sandbox_pid_[host] = pid;
      }
      const ShimIds ids = shim_ids(ev);
      if (kind == "proc.start" && ids.pid > 0 && lanes_.size() < kMaxLanes) {
        Lane l;
        l.pid = ids.pid;
        l.ppid = ids.ppid;
        l.claimed = ids.claimed;
        l.exe = shown(str(ev, "exe"));
        auto a = ev.find("argv");
        l.argv = a != ev.end() && a->is_array() ? view_of(*a) : nlohmann::json::array();
        l.argc = ev.contains("argc") ? view_of(ev["argc"]) : nlohmann::json();
        l.cred = ev.contains("cred") ? view_of(ev["cred"]) : nlohmann::json();
        l.t0 = l.t1 = t_ms[i];
        l.parent = find(l.ppid, t_ms[i]);
        if (l.parent == 0 && ids.claimed) {
          l.parent = find(l.ppid, t_ms[i], true);
        }
        (ids.claimed ? by_claimed_pid_ : by_pid_)[ids.pid].push_back(lanes_.size());
        lanes_.push_back(std::move(l));
      }
    } else if (source == "launcher" && kind == "net.attribution") {
      int64_t pid = num(ev, "pid");
      if (pid > 0 && !str(ev, "client").empty()) {
        client_pid_.emplace(str(ev, "client"), pid);
      }
    }
  }
  lane_.resize(events.size(), 0);
  for (size_t i = 0; i < events.size(); ++i) {
    lane_[i] = assign(events[i], t_ms[i]);
    Lane& l = lanes_[lane_[i]];
    l.t1 = std::max(l.t1, t_ms[i]);
  }
}

size_t Timeline::find(int64_t pid, double t, bool claimed) const {
  const auto& lanes_of = claimed ? by_claimed_pid_ : by_pid_;
  auto it = lanes_of.find(pid);
  if (it == lanes_of.end()) {
    return 0;
  }
  size_t best = 0;
  for (size_t lane : it->second) {
    if (lanes_[lane].t0 <= t + kStartSlackMs) {
      best = lane;  // the latest image of that pid started by then
    }
  }
  return best;
}

size_t Timeline::assign(const nlohmann::json& ev, double t) const {
  const std::string source = str(ev, "source");
  int64_t pid = -1;
  if (source == "shim") {
    const ShimIds ids = shim_ids(ev);
    pid = ids.pid;
    const auto& lanes_of = ids.claimed ? by_claimed_pid_ : by_pid_;
    if (str(ev, "kind") == "proc.start") {
      auto it = lanes_of.find(pid);
      if (it != lanes_of.end()) {
        for (size_t lane : it->second) {
          if (lanes_[lane].t0 == t) {
            return lane;
          }
        }
      }
    }
    size_t own = find(pid, t, ids.claimed);
    // A forked child runs its parent's image until it execs (its proc.exec names the parent's
    // exe): such events belong on the parent's lane, not on the image the pid becomes.
    const std::string exe = shown(str(ev, "exe"));
    if (own == 0 || (!exe.empty() && exe != lanes_[own].exe)) {
      size_t parent = find(ids.ppid, t, ids.claimed);
      if (parent != 0 || own == 0) {
        return parent;
      }
    }
    return own;
  }
  if (source == "fusefs" || (source == "launcher" && str(ev, "kind") == "proc.refused")) {
    auto it = sandbox_pid_.find(num(ev, "pid"));  // cordon-fs and the supervisor see host pids
    return it == sandbox_pid_.end() ? 0 : find(it->second, t);
  }
  if (source == "netproxy") {
    auto it = client_pid_.find(str(ev, "client"));
    return it == client_pid_.end() ? 0 : find(it->second, t);
  }
  return 0;
}

nlohmann::json Timeline::lanes_json() const {
  std::vector<std::vector<size_t>> children(lanes_.size());
  for (size_t i = 1; i < lanes_.size(); ++i) {
    children[lanes_[i].parent].push_back(i);
  }
  nlohmann::json out = nlohmann::json::array();
  // Depth-first, children in start order: a process sits right under the one that started it.
  // Iterative, so a hostile chain of a thousand parents cannot exhaust the stack.
  std::vector<std::pair<size_t, int>> stack = {{0, 0}};
  while (!stack.empty()) {
    auto [i, depth] = stack.back();
    stack.pop_back();
    const Lane& l = lanes_[i];
    out.push_back({{"id", i},
                   {"parent", l.parent},
                   {"depth", depth},
                   {"pid", l.pid},
                   {"exe", l.exe},
                   {"argv", l.argv.is_null() ? nlohmann::json::array() : l.argv},
                   {"argc", l.argc},
                   {"cred", l.cred},
                   {"ppid", l.ppid},
                   {"t0", l.t0},
                   {"t1", l.t1},
                   {"claimed", l.claimed}});
    for (auto c = children[i].rbegin(); c != children[i].rend(); ++c) {
      stack.push_back({*c, depth + 1});
    }
  }
  return out;
}

unsigned Timeline::fold(nlohmann::json& view, size_t lane) const {
  if (lane == 0 || !view.is_object() || str(view, "source") != "shim") {
    return 0;
  }
  const Lane& l = lanes_[lane];
  unsigned mask = 0;
  auto drop = [&](const char* key, const nlohmann::json& same, unsigned bit) {
    auto it = view.find(key);
    if (it != view.end() && !same.is_null() && *it == same) {
      view.erase(it);
      mask |= bit;
    }
  };
  drop("exe", l.exe, kFoldExe);
  drop("argv", l.argv, kFoldArgv);
  drop("argc", l.argc, kFoldArgc);
  drop("cred", l.cred, kFoldCred);
  drop("ppid", l.ppid, kFoldPpid);
  return mask;
}

std::string Timeline::label(size_t lane) const {
  const Lane& l = lanes_.at(lane);
  if (lane == 0) {
    return "cordon";
  }
  std::string name = l.exe.substr(l.exe.rfind('/') + 1);
  return name + " (pid " + std::to_string(l.pid) + (l.claimed ? ", claimed" : "") + ")";
}

}  // namespace cordon::launcher::report
