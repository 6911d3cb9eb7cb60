// cgroup v2 backend: a child cgroup "cordon-<id>" of the launcher's own cgroup where that cgroup
// was delegated to us (writable, with memory, pids and cpu available), or for root
// "<top>/cordon/<id>" at the top of the hierarchy.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "launcher/diagnostics.h"
#include "launcher/limits/limits_backend.h"

namespace cordon::launcher::limits_detail {

namespace {

constexpr const char* kNeeded[] = {"memory", "pids", "cpu"};

bool has_word(const std::string& text, const std::string& word) {
  size_t pos = 0;
  while ((pos = text.find(word, pos)) != std::string::npos) {
    bool start = pos == 0 || text[pos - 1] == ' ' || text[pos - 1] == '\n';
    size_t e = pos + word.size();
    bool end = e == text.size() || text[e] == ' ' || text[e] == '\n';
    if (start && end) {
      return true;
    }
    pos = e;
  }
  return false;
}

bool has_all(const std::string& list, std::string* missing) {
  missing->clear();
  for (const char* c : kNeeded) {
    if (!has_word(list, c)) {
      *missing += std::string(missing->empty() ? "" : ",") + c;
    }
  }
  return missing->empty();
}

bool writable(const std::string& dir) {
  for (const char* f : {"/cgroup.subtree_control", "/cgroup.procs", ""}) {
    if (::access((dir + f).c_str(), W_OK) != 0) {
      return false;
    }
  }
  return true;
}

// Where the sandbox's cgroup goes. Preferred: below our own cgroup, when it was delegated to us
// (writable, controllers available) and either already enables the controllers for children or
// holds nobody but us. As root, otherwise: a "cordon" cgroup at the top of the hierarchy (the
// root cgroup is exempt from the no-internal-processes rule), as cgroup v1 does.
struct V2Place {
  std::string parent;         // directory that gets the sandbox's cgroup
  bool intermediate = false;  // parent/cordon/<id> (top of hierarchy) instead of parent/cordon-<id>
  bool move_self = false;     // move ourselves into a leaf first (delegated cgroup of our own)
  std::string why_not, brief;
};

V2Place choose_v2_place() {
  V2Place place;
  auto mi = read_small_file("/proc/self/mountinfo");
  auto pc = read_small_file("/proc/self/cgroup");
  if (!mi.ok() || !pc.ok()) {
    place.why_not = "cannot read /proc/self/mountinfo or /proc/self/cgroup";
    place.brief = "no v2 hierarchy";
    return place;
  }
  std::string rel = own_cgroup_path(*pc, "");
  const CgroupMount* mount = nullptr;
  std::string own;
  if (!rel.empty()) {
    for (const auto& m : read_cgroup_mounts(*mi)) {
      if (m.fstype == "cgroup2" && !(own = cgroup_dir(m, rel)).empty()) {
        mount = &m;
        break;
      }
    }
  }
  if (mount == nullptr) {
    place.why_not = "no cgroup2 filesystem shows our cgroup \"" + rel + "\"";
    place.brief = "no v2 hierarchy";
    return place;
  }
  std::string missing;
  auto avail = read_small_file(own + "/cgroup.controllers");
  if (!avail.ok() || !has_all(*avail, &missing)) {
    place.why_not = own + " has no " + missing + " controller (cgroup.controllers: \"" +
                    (avail.ok() ? avail->substr(0, avail->find('\n')) : std::string()) + "\")";
    place.brief = "v2 has no " + missing;
    return place;
  }
  if (writable(own)) {
    auto enabled = read_small_file(own + "/cgroup.subtree_control");
    std::string not_enabled;
    if (enabled.ok() && has_all(*enabled, &not_enabled)) {
      place.parent = own;
      return place;
    }
    auto procs = read_small_file(own + "/cgroup.procs");
    if (procs.ok() && *procs == std::to_string(::getpid()) + "\n") {
      place.parent = own;
      place.move_self = true;
      return place;
    }
    place.why_not = own +
                    " holds other processes, so its controllers cannot be enabled for a "
                    "child (no-internal-processes rule)";
    place.brief = "v2 cgroup shared";
  } else {
    place.why_not = own + " is not writable (not delegated to us)";
    place.brief = "v2 not delegated";
  }
  if (::geteuid() == 0 && mount->root == "/" && writable(mount->mount_point)) {
    auto top = read_small_file(mount->mount_point + "/cgroup.controllers");
    if (top.ok() && has_all(*top, &missing)) {
      place.parent = mount->mount_point;
      place.intermediate = true;
      place.why_not.clear();
      place.brief.clear();
    }
  }
  return place;
}

class CgroupV2 final : public CgroupTree {
 public:
  ~CgroupV2() override { destroy(); }

  Status create(const V2Place& place, const LimitValues& v, const std::string& id) {
    std::string dir;
    if (place.intermediate) {
      std::string base = place.parent + "/cordon";
      TRY(enable_controllers(place.parent, false));
      if (::mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) {
        return sys_error("mkdir(\"" + base + "\")");
      }
      TRY(enable_controllers(base, false));
      dir = base + "/" + id;
    } else {
      TRY(enable_controllers(place.parent, place.move_self));
      dir = place.parent + "/cordon-" + id;
    }
    if (::mkdir(dir.c_str(), 0755) != 0) {
      return sys_error("mkdir(\"" + dir + "\")",
                       errno == EEXIST ? "a session with this id already exists" : "");
    }
    dir_ = dir;
    if (v.memory != 0) {
      TRY(write_file(dir_ + "/memory.max", std::to_string(v.memory)));
      // Without this the limit would only push pages to swap instead of stopping the program.
      std::string swap = dir_ + "/memory.swap.max";
      if (::access(swap.c_str(), F_OK) == 0) {
        TRY(write_file(swap, "0"));
      }
    }
    if (v.pids != 0) {
      TRY(write_file(dir_ + "/pids.max", std::to_string(v.pids)));
    }
    if (v.cpus > 0) {
      constexpr long kPeriodUs = 100000;
      long quota = std::max<long>(1000, std::lround(v.cpus * kPeriodUs));
      TRY(write_file(dir_ + "/cpu.max", std::to_string(quota) + " " + std::to_string(kPeriodUs)));
    }
    return {};
  }

  Status add_process(pid_t pid) override {
    return write_file(dir_ + "/cgroup.procs", std::to_string(pid));
  }

  Usage usage() const override {
    Usage u;
    if (auto s = read_small_file(dir_ + "/memory.peak"); s.ok()) {  // kernel >= 5.19
      u.peak_memory = std::strtoull(s->c_str(), nullptr, 10);
    }
    if (auto s = read_small_file(dir_ + "/cpu.stat"); s.ok()) {
      u.cpu = std::chrono::microseconds(keyed_counter(*s, "usage_usec"));
    }
    if (auto s = read_small_file(dir_ + "/memory.events"); s.ok()) {
      u.oom_killed = keyed_counter(*s, "oom_kill") > 0;
    }
    if (auto s = read_small_file(dir_ + "/pids.events"); s.ok()) {
      u.pids_limit_hit = keyed_counter(*s, "max") > 0;
    }
    return u;
  }

  void kill_all() const override {
    if (dir_.empty()) {
      return;
    }
    // cgroup.kill (5.14+) kills the whole subtree atomically, forks in flight included.
    if (write_file(dir_ + "/cgroup.kill", "1").ok()) {
      return;
    }
    for (int round = 0; round < 200; ++round) {
      auto procs = read_small_file(dir_ + "/cgroup.procs");
      if (!procs.ok() || procs->empty()) {
        return;
      }
      const char* p = procs->c_str();
      char* end = nullptr;
      for (long pid = std::strtol(p, &end, 10); end != p; pid = std::strtol(p, &end, 10)) {
        p = end;
        if (pid > 0) {
          ::kill(static_cast<pid_t>(pid), SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::vector<std::string> paths() const override {
    return dir_.empty() ? std::vector<std::string>{} : std::vector<std::string>{dir_};
  }

 private:
  // Controllers must be enabled in a cgroup's subtree_control for its children to get them. The
  // kernel refuses that (EBUSY) while a non-root cgroup holds processes — the "no internal
  // processes" rule — so in a delegated cgroup holding only us, we first move into a leaf.
  static Status enable_controllers(const std::string& dir, bool move_self) {
    std::string ctl = dir + "/cgroup.subtree_control";
    ASSIGN_OR_RETURN(std::string enabled, read_small_file(ctl));
    std::string want;
    for (const char* c : kNeeded) {
      if (!has_word(enabled, c)) {
        want += std::string(want.empty() ? "" : " ") + "+" + c;
      }
    }
    if (want.empty()) {
      return {};
    }
    if (move_self) {
      std::string leaf = dir + "/cordon-supervisor";
      if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
        return sys_error("mkdir(\"" + leaf + "\")");
      }
      TRY(write_file(leaf + "/cgroup.procs", "0"));  // "0": the writing process
    }
    auto st = write_file(ctl, want);
    if (!st.ok() && st.error().code == EBUSY) {
      return std::move(st).error().with_context(
          "cgroup v2: " + dir +
          " holds processes (run cordon in a cgroup of its own, e.g. "
          "systemd-run --user --scope -p Delegate=yes cordon run ...)");
    }
    return st;
  }

  void destroy() {
    // The shared "cordon" base is never removed: removing it when empty would race with a
    // concurrent session between its mkdir of the base and of its own directory.
    if (dir_.empty()) {
      return;
    }
    kill_all();
    bool removed = false;
    for (int i = 0; i < 300 && !removed; ++i) {
      if (::rmdir(dir_.c_str()) == 0 || errno == ENOENT) {
        removed = true;
      } else if (errno == EBUSY) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      } else {
        break;
      }
    }
    if (!removed) {
      say("cannot remove cgroup " + dir_ + ": " + std::strerror(errno));
    }
    dir_.clear();
  }

  std::string dir_;
};

}  // namespace

Probe probe_cgroup_v2() {
  V2Place place = choose_v2_place();
  Probe p;
  p.usable = !place.parent.empty();
  p.why_not = place.why_not;
  p.brief = place.brief;
  return p;
}

Result<std::unique_ptr<CgroupTree>> create_cgroup_v2(const LimitValues& v, const std::string& id) {
  V2Place place = choose_v2_place();
  if (place.parent.empty()) {
    return make_error("cgroup v2: " + place.why_not);
  }
  auto tree = std::make_unique<CgroupV2>();
  auto st = tree->create(place, v, id);
  if (!st.ok()) {
    return std::move(st).error().with_context("setting up cgroup v2 limits");
  }
  return std::unique_ptr<CgroupTree>(std::move(tree));
}

}  // namespace cordon::launcher::limits_detail
