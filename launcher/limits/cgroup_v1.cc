// cgroup v1 backend (root on v1/hybrid hosts): one directory per controller hierarchy
// (memory, pids, cpu, cpuacct), nested under the launcher's own cgroup so that any limit already
// placed on cordon itself still applies to the sandbox.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <set>
#include <thread>

#include "base/unique_fd.h"
#include "launcher/diagnostics.h"
#include "launcher/limits/limits_backend.h"

namespace cordon::launcher::limits_detail {

namespace {

// The hierarchies we need; cpu and cpuacct are often co-mounted ("cpu,cpuacct").
constexpr const char* kControllers[] = {"memory", "pids", "cpu", "cpuacct"};

struct V1Layout {
  // controller -> the launcher's own cgroup directory in that hierarchy, plus the path of that
  // cgroup inside the hierarchy (as /proc/<pid>/cgroup shows it).
  struct Entry {
    std::string controller, dir, rel;
  };
  std::vector<Entry> entries;
  std::string why_not;
};

V1Layout find_v1_layout() {
  V1Layout layout;
  auto mi = read_small_file("/proc/self/mountinfo");
  auto pc = read_small_file("/proc/self/cgroup");
  if (!mi.ok() || !pc.ok()) {
    layout.why_not = "cannot read /proc/self/mountinfo or /proc/self/cgroup";
    return layout;
  }
  auto mounts = read_cgroup_mounts(*mi);
  for (const char* c : kControllers) {
    const CgroupMount* found = nullptr;
    for (const auto& m : mounts) {
      if (m.fstype == "cgroup" &&
          std::find(m.controllers.begin(), m.controllers.end(), c) != m.controllers.end()) {
        found = &m;
        break;
      }
    }
    if (found == nullptr) {
      layout.why_not = std::string("no v1 hierarchy with the ") + c + " controller is mounted";
      layout.entries.clear();
      return layout;
    }
    std::string rel = own_cgroup_path(*pc, c);
    std::string dir = cgroup_dir(*found, rel);
    if (dir.empty()) {
      layout.why_not = std::string("our ") + c + " cgroup \"" + rel + "\" is not visible under " +
                       found->mount_point;
      layout.entries.clear();
      return layout;
    }
    layout.entries.push_back({c, dir, rel});
  }
  return layout;
}

// Liveness of a session's cgroups: its Limits holds an exclusive flock on <kLockDir>/<id>.lock
// for as long as it lives. A cgroup whose lock can be taken belongs to a cordon that died (kill -9,
// crash) and is removed by the next session once empty; a cgroup whose session is merely reading
// its counters after the program ended is empty too, which is why emptiness alone is not enough.
constexpr const char* kLockDir = "/run/cordon/cgroups";
// Directories from before lock files existed (or whose lock file was lost) count as stale after:
constexpr int kUnlockedStaleSeconds = 600;

UniqueFd open_lock(const std::string& id, bool create) {
  ::mkdir("/run/cordon", 0700);
  ::mkdir(kLockDir, 0700);
  std::string path = std::string(kLockDir) + "/" + id + ".lock";
  int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0);
  return UniqueFd(::open(path.c_str(), flags, 0600));
}

// The directories a session recorded in its lock file, one per line as it made them. Only
// paths ending in /cordon/<id> are taken: nothing else is a session's cgroup.
std::vector<std::string> recorded_dirs(int lock_fd, const std::string& id) {
  std::string text;
  char buf[4096];
  for (off_t at = 0; text.size() < 65536;) {
    ssize_t n = ::pread(lock_fd, buf, sizeof buf, at);
    if (n <= 0) {
      break;
    }
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  std::vector<std::string> dirs;
  const std::string tail = "/cordon/" + id;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text.size() : nl + 1;
    if (line.size() > tail.size() && line[0] == '/' &&
        line.compare(line.size() - tail.size(), tail.size(), tail) == 0 &&
        line.find("/../") == std::string::npos) {
      dirs.push_back(line);
    }
  }
  return dirs;
}

// Removes the empty cgroups of dead sessions under each hierarchy's cordon/ directory.
void sweep_stale(const V1Layout& layout) {
  std::set<std::string> names;
  for (const auto& e : layout.entries) {
    std::string base = e.dir + "/cordon";
    DIR* d = ::opendir(base.c_str());
    if (d == nullptr) {
      continue;
    }
    while (dirent* de = ::readdir(d)) {
      std::string n = de->d_name;
      if (de->d_type == DT_DIR && n != "." && n != "..") {
        names.insert(n);
      }
    }
    ::closedir(d);
  }
  for (const auto& n : names) {
    UniqueFd lock = open_lock(n, false);
    bool all_gone = true;
    if (lock) {
      if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
        continue;  // its cordon is alive
      }
      // Its directories in every hierarchy, including those under another cgroup than ours (a
      // cordon started elsewhere on the host): the lock goes only once none of them is left.
      for (const auto& dir : recorded_dirs(lock.get(), n)) {
        if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
          all_gone = false;
        }
      }
    }
    for (const auto& e : layout.entries) {
      std::string dir = e.dir + "/cordon/" + n;
      struct stat st {};
      if (::stat(dir.c_str(), &st) != 0) {
        continue;
      }
      if (!lock && std::time(nullptr) - st.st_ctime < kUnlockedStaleSeconds) {
        all_gone = false;
        continue;
      }
      // rmdir refuses (EBUSY) while processes remain: an orphaned sandbox keeps running and
      // keeps its cgroup; we never kill what another session started.
      if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
        all_gone = false;
      }
    }
    if (lock && all_gone) {
      ::unlink((std::string(kLockDir) + "/" + n + ".lock").c_str());
    }
  }
}

class CgroupV1 final : public CgroupTree {
 public:
  ~CgroupV1() override { destroy(); }

  // Creates <own>/cordon/<id> in each hierarchy; directories are recorded as soon as they exist
  // so that a failure half-way is cleaned up by the destructor.
  Status create(const V1Layout& layout, const LimitValues& v, const std::string& id) {
    sweep_stale(layout);
    lock_ = open_lock(id, true);
    if (!lock_) {
      return sys_error(std::string("open(\"") + kLockDir + "/" + id + ".lock\")");
    }
    if (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0) {
      return sys_error(std::string("flock(\"") + kLockDir + "/" + id + ".lock\")",
                       "a session with this id already exists");
    }
    lock_path_ = std::string(kLockDir) + "/" + id + ".lock";
    if (::ftruncate(lock_.get(), 0) != 0) {
      return sys_error("ftruncate(\"" + lock_path_ + "\")");
    }
    for (const auto& e : layout.entries) {
      std::string base = e.dir + "/cordon";
      std::string dir = base + "/" + id;
      // cpu and cpuacct may share one hierarchy: one directory serves both.
      auto same =
          std::find_if(dirs_.begin(), dirs_.end(), [&](const Dir& d) { return d.path == dir; });
      if (same != dirs_.end()) {
        same->controllers.push_back(e.controller);
        continue;
      }
      if (::mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) {
        return sys_error("mkdir(\"" + base + "\")", "cgroup v1 needs root on the host");
      }
      if (::mkdir(dir.c_str(), 0755) != 0) {
        return sys_error("mkdir(\"" + dir + "\")",
                         errno == EEXIST ? "a session with this id already exists" : "");
      }
      // Recorded for the sweep of a later session should this cordon die without its
      // destructor: that session may sit in another cgroup and not see this directory.
      const std::string line = dir + "\n";
      if (::write(lock_.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        return sys_error("write(\"" + lock_path_ + "\")");
      }
      dirs_.push_back({dir, e.rel + (e.rel == "/" ? "" : "/") + "cordon/" + id, {e.controller}});
    }
    if (v.memory != 0) {
      std::string mem = dir_of("memory");
      TRY(write_file(mem + "/memory.limit_in_bytes", std::to_string(v.memory)));
      // memsw (memory+swap) must be >= the memory limit, so it is set second. Absent when the
      // kernel was booted without swap accounting; then swap is not limited separately, but a
      // host without swap (like the CI machines) has nothing to leak into.
      std::string memsw = mem + "/memory.memsw.limit_in_bytes";
      if (::access(memsw.c_str(), F_OK) == 0) {
        TRY(write_file(memsw, std::to_string(v.memory)));
      }
    }
    if (v.pids != 0) {
      TRY(write_file(dir_of("pids") + "/pids.max", std::to_string(v.pids)));
    }
    if (v.cpus > 0) {
      // quota/period = cores. 100 ms period; the kernel's minimum quota is 1 ms.
      constexpr long kPeriodUs = 100000;
      long quota = std::max<long>(1000, std::lround(v.cpus * kPeriodUs));
      std::string cpu = dir_of("cpu");
      TRY(write_file(cpu + "/cpu.cfs_period_us", std::to_string(kPeriodUs)));
      TRY(write_file(cpu + "/cpu.cfs_quota_us", std::to_string(quota)));
    }
    return {};
  }

  Status add_process(pid_t pid) override {
    // Children inherit all cgroups at fork, so the sandbox's init is enough.
    for (const auto& d : dirs_) {
      TRY(write_file(d.path + "/cgroup.procs", std::to_string(pid)));
    }
    return {};
  }

  Usage usage() const override {
    Usage u;
    std::string mem = dir_of("memory");
    if (auto s = read_small_file(mem + "/memory.max_usage_in_bytes"); s.ok()) {
      u.peak_memory = std::strtoull(s->c_str(), nullptr, 10);
    }
    if (auto s = read_small_file(dir_of("cpuacct") + "/cpuacct.usage"); s.ok()) {
      u.cpu = std::chrono::microseconds(std::strtoull(s->c_str(), nullptr, 10) / 1000);
    }
    // "oom_kill N" counts the tasks the OOM killer took in this cgroup (kernel >= 4.13).
    if (auto s = read_small_file(mem + "/memory.oom_control"); s.ok()) {
      u.oom_killed = keyed_counter(*s, "oom_kill") > 0;
    }
    if (auto s = read_small_file(dir_of("pids") + "/pids.events"); s.ok()) {
      u.pids_limit_hit = keyed_counter(*s, "max") > 0;
    }
    return u;
  }

  void kill_all() const override {
    // Bounded: a fork bomb is capped by pids.max, so a few rounds empty the cgroup.
    for (int round = 0; round < 200; ++round) {
      if (kill_round() == 0) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(round < 10 ? 1 : 10));
    }
    say("cgroup " + (dirs_.empty() ? std::string() : dirs_[0].path) +
        ": processes still present after 200 SIGKILL rounds");
  }

  std::vector<std::string> paths() const override {
    std::vector<std::string> out;
    for (const auto& d : dirs_) {
      out.push_back(d.path);
    }
    return out;
  }

 private:
  struct Dir {
    std::string path;  // <mount>/<own>/cordon/<id>
    std::string rel;   // /<own>/cordon/<id> as /proc/<pid>/cgroup shows it
    std::vector<std::string> controllers;
  };

  std::string dir_of(const std::string& controller) const {
    for (const auto& d : dirs_) {
      if (std::find(d.controllers.begin(), d.controllers.end(), controller) !=
          d.controllers.end()) {
        return d.path;
      }
    }
    return "";
  }

  // SIGKILLs each process listed in any of our cgroups; returns how many were listed.
  size_t kill_round() const {
    size_t listed = 0;
    for (const auto& d : dirs_) {
      auto procs = read_small_file(d.path + "/cgroup.procs");
      if (!procs.ok()) {
        continue;
      }
      const char* p = procs->c_str();
      while (*p != '\0') {
        char* end = nullptr;
        long pid = std::strtol(p, &end, 10);
        if (end == p) {
          break;
        }
        p = end;
        while (*p == '\n') {
          ++p;
        }
        if (pid <= 0) {
          continue;
        }
        ++listed;
        kill_if_member(static_cast<pid_t>(pid), d);
      }
    }
    return listed;
  }

  // The pid read from cgroup.procs may have exited and been reused by an unrelated process by
  // now: pin it with a pidfd, re-check its membership, then signal through the pidfd.
  static void kill_if_member(pid_t pid, const Dir& d) {
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfd) {
      return;  // already gone
    }
    auto cg = read_small_file("/proc/" + std::to_string(pid) + "/cgroup");
    if (!cg.ok()) {
      return;
    }
    bool member = false;
    for (const auto& c : d.controllers) {
      if (own_cgroup_path(*cg, c) == d.rel) {
        member = true;
      }
    }
    if (member) {
      ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    }
  }

  void destroy() {
    if (dirs_.empty()) {
      if (!lock_path_.empty()) {
        ::unlink(lock_path_.c_str());
      }
      return;
    }
    kill_all();
    bool all_removed = true;
    for (const auto& d : dirs_) {
      // rmdir fails with EBUSY while a killed task is still exiting; retry briefly.
      bool removed = false;
      for (int i = 0; i < 300 && !removed; ++i) {
        if (::rmdir(d.path.c_str()) == 0 || errno == ENOENT) {
          removed = true;
        } else if (errno == EBUSY) {
          kill_round();
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        } else {
          break;
        }
      }
      if (!removed) {
        say("cannot remove cgroup " + d.path + ": " + std::strerror(errno));
      }
      // The shared "cordon" parent stays: removing it when empty raced with a concurrent session
      // between its mkdir of the parent (EEXIST) and of its own directory (ENOENT).
      all_removed = all_removed && removed;
    }
    dirs_.clear();
    if (all_removed && !lock_path_.empty()) {
      ::unlink(lock_path_.c_str());  // still holding the lock, so nobody else is using the name
    }
  }

  std::vector<Dir> dirs_;
  UniqueFd lock_;  // flock held while this session lives (see kLockDir)
  std::string lock_path_;
};

}  // namespace

Probe probe_cgroup_v1() {
  Probe p;
  V1Layout layout = find_v1_layout();
  if (layout.entries.empty()) {
    p.why_not = layout.why_not;
    p.brief = "no v1 hierarchies";
    return p;
  }
  for (const auto& e : layout.entries) {
    if (::access(e.dir.c_str(), W_OK) != 0) {
      p.why_not = e.dir + " is not writable (cgroup v1 needs root)";
      p.brief = "v1 needs root";
      return p;
    }
  }
  p.usable = true;
  return p;
}

Result<std::unique_ptr<CgroupTree>> create_cgroup_v1(const LimitValues& v, const std::string& id) {
  V1Layout layout = find_v1_layout();
  if (layout.entries.empty()) {
    return make_error("cgroup v1: " + layout.why_not);
  }
  auto tree = std::make_unique<CgroupV1>();
  auto st = tree->create(layout, v, id);
  if (!st.ok()) {
    return std::move(st).error().with_context("setting up cgroup v1 limits");
  }
  return std::unique_ptr<CgroupTree>(std::move(tree));
}

}  // namespace cordon::launcher::limits_detail
