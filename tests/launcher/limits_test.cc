// Limits: the cgroup layout parsers, backend choice on this host, cgroup v1 for real (a memory hog
// is OOM-killed and reported, a fork loop is stopped by pids.max and nothing survives the
// sandbox), and the rlimits fallback applied in a child.
#include "launcher/limits/limits.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/limits/limits_backend.h"
#include "tests/support/fork_child.h"
#include "tests/support/test_env.h"

namespace cordon::launcher {
namespace {

using namespace limits_detail;
using cordon::testing::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string unique_id(const char* what) {
  static int n = 0;
  return std::string("test-") + what + "-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

bool v1_memory_mounted() {
  auto mi = read_small_file("/proc/self/mountinfo");
  if (!mi.ok()) {
    return false;
  }
  for (const auto& m : read_cgroup_mounts(*mi)) {
    for (const auto& c : m.controllers) {
      if (m.fstype == "cgroup" && c == "memory") {
        return true;
      }
    }
  }
  return false;
}

#define REQUIRE_CGROUP_V1()                                              \
  do {                                                                   \
    CORDON_REQUIRE_ROOT();                                               \
    CORDON_REQUIRE(v1_memory_mounted(), "a cgroup v1 memory hierarchy"); \
  } while (0)

// ---- parsing ----------------------------------------------------------------------------------

TEST(LimitsParse, MountinfoFindsV1AndV2HierarchiesWithControllers) {
  const std::string mi =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup "
      "rw,cpu,cpuacct\n"
      "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
      "41 31 0:38 / /mnt/with\\040space rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
      "50 23 8:1 / / rw - ext4 /dev/sda1 rw\n";
  auto mounts = read_cgroup_mounts(mi);
  ASSERT_EQ(mounts.size(), 4u);
  EXPECT_EQ(mounts[0].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(mounts[0].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(mounts[1].root, "/docker/abc");
  EXPECT_EQ(mounts[1].controllers, (std::vector<std::string>{"memory"}));
  EXPECT_TRUE(mounts[2].controllers.empty());  // name=systemd carries no controller
  EXPECT_EQ(mounts[3].fstype, "cgroup2");
  EXPECT_EQ(mounts[3].mount_point, "/mnt/with space");
}

TEST(LimitsParse, OwnCgroupPathPerControllerAndV2) {
  const std::string pc =
      "9:name=systemd:/\n8:pids:/user.slice\n4:memory:/process_api/99f\n2:cpu,cpuacct:/a:b\n"
      "0::/user.slice/session-1.scope\n";
  EXPECT_EQ(own_cgroup_path(pc, "memory"), "/process_api/99f");
  EXPECT_EQ(own_cgroup_path(pc, "pids"), "/user.slice");
  EXPECT_EQ(own_cgroup_path(pc, "cpuacct"), "/a:b");
  EXPECT_EQ(own_cgroup_path(pc, ""), "/user.slice/session-1.scope");
  EXPECT_EQ(own_cgroup_path(pc, "blkio"), "");
}

TEST(LimitsParse, CgroupDirHonoursTheMountRoot) {
  CgroupMount host{"/sys/fs/cgroup/memory", "/", "cgroup", {"memory"}};
  EXPECT_EQ(cgroup_dir(host, "/"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(cgroup_dir(host, "/a/b"), "/sys/fs/cgroup/memory/a/b");
  CgroupMount container{"/sys/fs/cgroup/memory", "/docker/abc", "cgroup", {"memory"}};
  EXPECT_EQ(cgroup_dir(container, "/docker/abc"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(cgroup_dir(container, "/docker/abc/x"), "/sys/fs/cgroup/memory/x");
  EXPECT_EQ(cgroup_dir(container, "/docker/abcd"), "");  // a sibling, not below the root
  EXPECT_EQ(cgroup_dir(container, "/other"), "");
  EXPECT_EQ(cgroup_dir(host, "/gone (deleted)"), "");
}

TEST(LimitsParse, KeyedCounters) {
  EXPECT_EQ(keyed_counter("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"), 3u);
  EXPECT_EQ(keyed_counter("max 0\n", "max"), 0u);
  EXPECT_EQ(keyed_counter("usage_usec 1234\nuser_usec 1000", "user_usec"), 1000u);
  EXPECT_EQ(keyed_counter("maxx 5\n", "max"), 0u);
  EXPECT_EQ(keyed_counter("", "max"), 0u);
}

TEST(LimitsParse, FormatBytes) {
  EXPECT_EQ(format_bytes(256ull << 20), "256M");
  EXPECT_EQ(format_bytes(1ull << 30), "1G");
  EXPECT_EQ(format_bytes(1536ull << 10), "1536K");
  EXPECT_EQ(format_bytes(1000), "1000");
}

// ---- backend choice on this host --------------------------------------------------------------

TEST(Limits, CgroupV2ProbeMatchesTheHost) {
  // Independently: where is our v2 cgroup, and does it offer memory, pids and cpu writable?
  auto mi = read_small_file("/proc/self/mountinfo");
  auto pc = read_small_file("/proc/self/cgroup");
  ASSERT_TRUE(mi.ok() && pc.ok());
  std::string dir;
  for (const auto& m : read_cgroup_mounts(*mi)) {
    if (m.fstype == "cgroup2" && dir.empty()) {
      dir = cgroup_dir(m, own_cgroup_path(*pc, ""));
    }
  }
  std::string ctl = dir.empty() ? "" : slurp(dir + "/cgroup.controllers");
  bool controllers = !dir.empty() && ctl.find("memory") != std::string::npos &&
                     ctl.find("pids") != std::string::npos && ctl.find("cpu") != std::string::npos;
  bool writable = !dir.empty() && access((dir + "/cgroup.subtree_control").c_str(), W_OK) == 0;
  Probe p = probe_cgroup_v2();
  // Without the controllers no v2 cgroup can limit anything; without write access (and not
  // root, who may use the top of the hierarchy) none can be made.
  if (!controllers || (!writable && geteuid() != 0)) {
    EXPECT_FALSE(p.usable) << "usable although " << dir << " offers no writable controllers";
  }
  if (!p.usable) {
    EXPECT_FALSE(p.why_not.empty());
    EXPECT_FALSE(p.brief.empty());
  }
  if (!dir.empty() && ctl.find_first_not_of(" \n") == std::string::npos) {
    // An empty v2 hierarchy (hybrid host, every controller on v1): must say so.
    EXPECT_NE(p.why_not.find("has no memory,pids,cpu controller"), std::string::npos) << p.why_not;
    EXPECT_EQ(p.brief, "v2 has no memory,pids,cpu");
  }
}

TEST(Limits, RejectsSessionIdsThatAreNotOneDirectoryName) {
  policy::ProcessPolicy p;
  for (const char* bad : {"", "..", ".", "a/b", "../x"}) {
    auto l = Limits::create(p, bad);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_NE(l.error().message.find("session id"), std::string::npos);
  }
}

TEST(Limits, RootOnAV1HostUsesCgroupV1WithTheValuesWritten) {
  REQUIRE_CGROUP_V1();
  CORDON_REQUIRE(!probe_cgroup_v2().usable, "a host without a usable cgroup v2");
  policy::ProcessPolicy p;
  p.memory = 256ull << 20;
  p.cpus = 0.5;
  p.pids = 64;
  std::vector<std::string> dirs;
  {
    auto l = Limits::create(p, unique_id("v1"));
    ASSERT_TRUE(l.ok()) << l.error().to_string();
    EXPECT_EQ(l->backend(), LimitBackend::CgroupV1);
    EXPECT_EQ(l->describe().rfind("limits: cgroup v1 (memory 256M, cpus 0.5, pids 64", 0), 0u)
        << l->describe();
    dirs = l->cgroup_paths();
    ASSERT_GE(dirs.size(), 3u);  // memory, pids, cpu (+ cpuacct unless co-mounted)
    std::set<std::string> seen;
    for (const auto& d : dirs) {
      EXPECT_TRUE(exists(d)) << d;
      EXPECT_NE(d.find("/cordon/test-v1-"), std::string::npos) << d;
      if (exists(d + "/memory.limit_in_bytes")) {
        EXPECT_EQ(slurp(d + "/memory.limit_in_bytes"), "268435456\n");
        seen.insert("memory");
        if (exists(d + "/memory.memsw.limit_in_bytes")) {
          EXPECT_EQ(slurp(d + "/memory.memsw.limit_in_bytes"), "268435456\n");
        }
      }
      if (exists(d + "/pids.max")) {
        EXPECT_EQ(slurp(d + "/pids.max"), "64\n");
        seen.insert("pids");
      }
      if (exists(d + "/cpu.cfs_quota_us")) {
        EXPECT_EQ(slurp(d + "/cpu.cfs_quota_us"), "50000\n");
        EXPECT_EQ(slurp(d + "/cpu.cfs_period_us"), "100000\n");
        seen.insert("cpu");
      }
    }
    EXPECT_EQ(seen, (std::set<std::string>{"cpu", "memory", "pids"}));
  }
  for (const auto& d : dirs) {
    EXPECT_FALSE(exists(d)) << d << " left behind";
  }
}

TEST(Limits, DuplicateSessionIdIsRefused) {
  REQUIRE_CGROUP_V1();
  policy::ProcessPolicy p;
  std::string id = unique_id("dup");
  auto a = Limits::create(p, id);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  auto b = Limits::create(p, id);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().to_string().find("already exists"), std::string::npos)
      << b.error().to_string();
  for (const auto& d : a->cgroup_paths()) {
    EXPECT_TRUE(exists(d)) << "the failed second create must not remove the first's " << d;
  }
}

TEST(Limits, EmptyCgroupsOfDeadSessionsAreSweptLiveOnesKept) {
  REQUIRE_CGROUP_V1();
  policy::ProcessPolicy p;
  // A "dead" session: its directories exist, its lock file exists but nobody holds it.
  std::vector<std::string> dead_dirs;
  std::string dead = unique_id("dead");
  {
    auto l = Limits::create(p, dead);
    ASSERT_TRUE(l.ok());
    dead_dirs = l->cgroup_paths();
    // Simulate a cordon killed with SIGKILL: the directories survive, the lock is released.
    for (const auto& d : dead_dirs) {
      std::string moved = d + "-copy";
      ASSERT_EQ(mkdir(moved.c_str(), 0755), 0) << moved;
    }
  }
  for (auto& d : dead_dirs) {
    d += "-copy";
  }
  std::string lock = "/run/cordon/cgroups/" + dead + "-copy.lock";
  int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  auto live = Limits::create(p, unique_id("live"));
  ASSERT_TRUE(live.ok());
  auto next = Limits::create(p, unique_id("next"));
  ASSERT_TRUE(next.ok());
  for (const auto& d : dead_dirs) {
    EXPECT_FALSE(exists(d)) << d << " (dead session) not swept";
  }
  EXPECT_FALSE(exists(lock));
  for (const auto& d : live->cgroup_paths()) {
    EXPECT_TRUE(exists(d)) << d << " (live session) was swept";
  }
}

// A session killed with SIGKILL whose memory cgroup sits under another cgroup than the sweeping
// cordon's (two pods, or two services, on one node): the sweeper cannot find that directory by
// looking under its own cgroup; the dead session's lock file names it. The lock goes only with it.
TEST(Limits, ADeadSessionsCgroupsUnderAnotherCgroupAreSweptThroughItsLockFile) {
  REQUIRE_CGROUP_V1();
  policy::ProcessPolicy p;
  std::string dead = unique_id("elsewhere");
  std::vector<std::string> dirs;
  {
    auto l = Limits::create(p, dead);
    ASSERT_TRUE(l.ok());
    dirs = l->cgroup_paths();
  }
  // The dead session's directories as its cordon left them, the memory one under a sibling of
  // our own cgroup; the lock file as that cordon wrote it.
  std::string memory;
  for (const auto& d : dirs) {
    if (d.find("/memory/") != std::string::npos) memory = d;
  }
  ASSERT_FALSE(memory.empty());
  const std::string own = memory.substr(0, memory.rfind("/cordon/"));
  const std::string sibling = own.substr(0, own.rfind('/')) + "/" + unique_id("other-pod");
  std::vector<std::string> left;
  for (const std::string& d : {sibling, sibling + "/cordon", sibling + "/cordon/" + dead}) {
    ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
  }
  left.push_back(sibling + "/cordon/" + dead);
  std::string listed = left.back() + "\n";
  for (const auto& d : dirs) {
    if (d != memory) {
      ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
      left.push_back(d);
      listed += d + "\n";
    }
  }
  // Not a session's cgroup (no /cordon/<id> at its end): never removed, whatever the file says.
  const std::string bystander = sibling + "/bystander";
  ASSERT_EQ(mkdir(bystander.c_str(), 0755), 0);
  listed += bystander + "\n";
  const std::string lock = "/run/cordon/cgroups/" + dead + ".lock";
  std::ofstream(lock) << listed;

  auto next = Limits::create(p, unique_id("next"));
  ASSERT_TRUE(next.ok());
  for (const auto& d : left) {
    EXPECT_FALSE(exists(d)) << d << " (dead session) not swept";
  }
  EXPECT_FALSE(exists(lock));
  EXPECT_TRUE(exists(bystander));
  rmdir(bystander.c_str());
  rmdir((sibling + "/cordon").c_str());
  rmdir(sibling.c_str());
}

// A child that waits for `go` before running `body`, so it can be put into the cgroups first.
struct HeldChild {
  pid_t pid = -1;
  int go = -1;   // write end: release the child
  int out = -1;  // read end: what the child reports
};

HeldChild spawn_held(const std::function<void(int out_fd)>& body) {
  int go[2], out[2];
  if (pipe2(go, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
    return {};
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    close(out[0]);
    alarm(60);  // never outlive a broken test
    char c;
    if (read(go[0], &c, 1) != 1) {
      _exit(100);
    }
    body(out[1]);
    _exit(0);
  }
  close(go[0]);
  close(out[1]);
  return {pid, go[1], out[0]};
}

std::string release_and_collect(HeldChild& h, int* status) {
  (void)!write(h.go, "x", 1);
  close(h.go);
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(h.out, buf, sizeof buf)) > 0) {
    s.append(buf, static_cast<size_t>(n));
  }
  close(h.out);
  waitpid(h.pid, status, 0);
  return s;
}

TEST(Limits, MemoryHogIsKilledAndReportedAsTheMemoryLimit) {
  REQUIRE_CGROUP_V1();
  policy::ProcessPolicy p;
  p.memory = 256ull << 20;
  auto l = Limits::create(p, unique_id("mem"));
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  ASSERT_EQ(l->backend(), LimitBackend::CgroupV1);
  auto h = spawn_held([](int out) {
    // Allocate and touch 2 GiB in 16 MiB steps, reporting progress.
    constexpr size_t kStep = 16u << 20;
    for (size_t total = 0; total < (2ull << 30); total += kStep) {
      void* m = mmap(nullptr, kStep, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) {
        (void)!write(out, "mmap-failed\n", 12);
        _exit(3);
      }
      std::memset(m, 0x5a, kStep);
    }
    (void)!write(out, "survived\n", 9);
  });
  ASSERT_GT(h.pid, 0);
  ASSERT_TRUE(l->add_process(h.pid).ok());
  int status = 0;
  std::string said = release_and_collect(h, &status);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "status " << status << ", child said: " << said;
  EXPECT_EQ(said.find("survived"), std::string::npos);
  Usage u = l->usage();
  EXPECT_TRUE(u.oom_killed);
  EXPECT_FALSE(u.pids_limit_hit);
  EXPECT_GT(u.peak_memory, 128ull << 20);
  EXPECT_LE(u.peak_memory, (256ull << 20) + (1ull << 20));
  EXPECT_GT(u.cpu.count(), 0);
}

TEST(Limits, ForkLoopIsStoppedByPidsAndNothingSurvives) {
  REQUIRE_CGROUP_V1();
  // Orphaned grandchildren are reparented to us, so we can reap them and then prove they are gone.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  policy::ProcessPolicy p;
  p.pids = 16;
  std::vector<std::string> dirs;
  std::vector<pid_t> spawned;
  {
    auto l = Limits::create(p, unique_id("pids"));
    ASSERT_TRUE(l.ok()) << l.error().to_string();
    dirs = l->cgroup_paths();
    auto h = spawn_held([](int out) {
      // A bounded fork loop: each child sleeps (in pause) until killed.
      int ok = 0, eagain = 0, other = 0;
      std::string pids;
      for (int i = 0; i < 200; ++i) {
        pid_t c = fork();
        if (c == 0) {
          close(out);  // or the parent's read would wait for these to die
          pause();
          _exit(0);
        }
        if (c > 0) {
          ++ok;
          pids += std::to_string(c) + " ";
        } else if (errno == EAGAIN) {
          ++eagain;
        } else {
          ++other;
        }
      }
      std::string s = "forks=" + std::to_string(ok) + " eagain=" + std::to_string(eagain) +
                      " other=" + std::to_string(other) + " pids=" + pids + "\n";
      (void)!write(out, s.data(), s.size());
    });
    ASSERT_GT(h.pid, 0);
    ASSERT_TRUE(l->add_process(h.pid).ok());
    int status = 0;
    std::string said = release_and_collect(h, &status);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    int forks = -1, eagain = -1, other = -1;
    ASSERT_EQ(sscanf(said.c_str(), "forks=%d eagain=%d other=%d", &forks, &eagain, &other), 3)
        << said;
    EXPECT_EQ(forks, 15) << said;  // 16 tasks: the looping child and 15 more
    EXPECT_EQ(eagain, 200 - 15);
    EXPECT_EQ(other, 0);
    std::istringstream ps(said.substr(said.find("pids=") + 5));
    for (pid_t q; ps >> q;) {
      spawned.push_back(q);
    }
    EXPECT_TRUE(l->usage().pids_limit_hit);
    // The grandchildren are still alive inside the cgroup until Limits goes away.
    EXPECT_EQ(kill(spawned.at(0), 0), 0);
  }
  for (const auto& d : dirs) {
    EXPECT_FALSE(exists(d)) << d << " left behind";
  }
  // Reap what was reparented to us; every spawned pid must be dead (ESRCH once reaped).
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  for (pid_t q : spawned) {
    int st = 0;
    waitpid(q, &st, 0);  // ECHILD if already reaped above
    EXPECT_EQ(kill(q, 0), -1) << "pid " << q << " survived the sandbox";
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
}

// Sessions share the "cordon" parent cgroup. One session's cleanup once removed it while another
// was between creating the parent (EEXIST) and its own directory (ENOENT): cordon failed to start.
TEST(Limits, ConcurrentSessionsNeverLoseTheSharedParent) {
  REQUIRE_CGROUP_V1();
  std::vector<pid_t> kids;
  for (int k = 0; k < 4; ++k) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(60);
      policy::ProcessPolicy pp;
      pp.memory = 64ull << 20;
      pp.pids = 16;
      for (int i = 0; i < 40; ++i) {
        auto l = Limits::create(pp, "race-" + std::to_string(getpid()) + "-" + std::to_string(i));
        if (!l.ok()) {
          _exit(1);
        }
      }
      _exit(0);
    }
    ASSERT_GT(pid, 0);
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int st = -1;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "a session failed to create its cgroups";
  }
}

TEST(Limits, KillAllEmptiesTheCgroups) {
  REQUIRE_CGROUP_V1();
  policy::ProcessPolicy p;
  auto l = Limits::create(p, unique_id("kill"));
  ASSERT_TRUE(l.ok());
  pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    pause();
    _exit(0);
  }
  ASSERT_TRUE(l->add_process(pid).ok());
  std::string procs;
  for (const auto& d : l->cgroup_paths()) {
    procs = slurp(d + "/cgroup.procs");
    EXPECT_EQ(procs, std::to_string(pid) + "\n") << d;
  }
  l->kill_all();
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  for (const auto& d : l->cgroup_paths()) {
    EXPECT_EQ(slurp(d + "/cgroup.procs"), "") << d;
  }
}

TEST(Limits, RootlessFallsBackToRlimitsAndSaysWhatIsWeaker) {
  // As an ordinary user cgroup v1 is not writable; run the choice as uid 65534 when root.
  std::string s =
      cordon::testing::run_in_child([] {
        if (geteuid() == 0 &&
            (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)) {
          return std::string("setresuid failed");
        }
        policy::ProcessPolicy pp;
        pp.memory = 256ull << 20;
        pp.cpus = 1.5;
        pp.pids = 64;
        auto l = Limits::create(pp, "rootless-test");
        std::string out;
        if (!l.ok()) {
          out = "error: " + l.error().to_string();
        } else {
          out = std::string(l->backend() == LimitBackend::Rlimits ? "rlimits" : "cgroup") + "|" +
                l->describe() + "|" + std::to_string(l->cgroup_paths().size());
        }
        return out;
      }).out;
  CORDON_REQUIRE(!probe_cgroup_v2().usable, "a host without a delegated cgroup v2");
  EXPECT_EQ(s,
            "rlimits|limits: rlimits only (memory 256M of private writable memory per process "
            "(RLIMIT_DATA), not the whole sandbox's, pids per uid 64, cpus not enforced, nofile "
            "1024, no core dumps; no cgroup: " +
                probe_cgroup_v2().brief +
                (v1_memory_mounted() ? ", v1 needs root)|0" : ", no v1 hierarchies)|0"));
  EXPECT_LE(s.size(), 260u);
}

// Runs `body` in a forked child after applying `plan`; returns what it wrote.
std::string in_child_with(const RlimitPlan& plan, const std::function<std::string()>& body) {
  return cordon::testing::run_in_child([&] {
           auto st = apply_rlimit_plan(plan);
           return st.ok() ? body() : "apply: " + st.error().to_string();
         })
      .out;
}

std::string limit_of(int resource) {
  struct rlimit r {};
  getrlimit(resource, &r);
  return r.rlim_cur == RLIM_INFINITY ? "inf" : std::to_string(r.rlim_cur);
}

TEST(Limits, RlimitsBackendLimitsDataProcessesFilesAndCores) {
  // RLIMIT_DATA counts the private writable memory already mapped (a sanitizer's shadow too), so
  // the limit is set 256 MiB above the current size: small allocations still work, a fresh
  // 512 MiB writable mapping does not.
  uint64_t vm_kib = 0;
  std::istringstream status(slurp("/proc/self/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmData:", 0) == 0) {
      vm_kib = std::strtoull(line.c_str() + 7, nullptr, 10);
    }
  }
  ASSERT_GT(vm_kib, 0u);
  policy::ProcessPolicy p;
  p.memory = (vm_kib << 10) + (256ull << 20);
  p.pids = 1000;
  p.nofile = 64;
  p.fsize = 1 << 20;
  TempDir tmp;
  std::string file = tmp / "big";
  std::string chunk(1 << 20, 'x');
  RlimitPlan plan = plan_rlimits(p, LimitBackend::Rlimits);
  int pp[2];
  ASSERT_EQ(pipe(pp), 0);
  pid_t pid = fork();
  if (pid == 0) {
    // After the limits: no C++ streams or strings, so that nothing here (or in a sanitizer
    // runtime) needs a new mapping, except the one mmap under test.
    close(pp[0]);
    alarm(20);
    char buf[512];
    if (!apply_rlimit_plan(plan).ok()) {
      _exit(2);
    }
    auto lim = [](int r) {
      struct rlimit l {};
      getrlimit(r, &l);
      return l.rlim_cur == RLIM_INFINITY ? -1LL : static_cast<long long>(l.rlim_cur);
    };
    void* m = mmap(nullptr, 512u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    bool enomem = m == MAP_FAILED && errno == ENOMEM;
    signal(SIGXFSZ, SIG_IGN);
    int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ssize_t w1 = write(fd, chunk.data(), chunk.size());
    ssize_t w2 = write(fd, "y", 1);
    bool efbig = w2 == -1 && errno == EFBIG;
    int opened = 0;
    while (open("/dev/null", O_RDONLY) >= 0 && opened < 1000) {
      ++opened;
    }
    bool emfile = errno == EMFILE;
    int n = snprintf(buf, sizeof buf, "%lld,%lld,%lld,%lld,%lld,%lld,%s,%zd,%s,%s",
                     lim(RLIMIT_DATA), lim(RLIMIT_NPROC), lim(RLIMIT_NOFILE), lim(RLIMIT_FSIZE),
                     lim(RLIMIT_CORE), lim(RLIMIT_CPU), enomem ? "ENOMEM" : "mapped", w1,
                     efbig ? "EFBIG" : "wrote", emfile ? "EMFILE" : "no-emfile");
    (void)!write(pp[1], buf, static_cast<size_t>(n));
    _exit(0);
  }
  close(pp[1]);
  char buf[512];
  ssize_t n = read(pp[0], buf, sizeof buf);
  close(pp[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  std::string out(buf, n > 0 ? static_cast<size_t>(n) : 0);
  EXPECT_EQ(out, std::to_string(p.memory) + ",1000,64,1048576,0,-1,ENOMEM,1048576,EFBIG,EMFILE")
      << "child status " << st;
}

TEST(Limits, CgroupBackendsKeepOnlyTheAlwaysOnRlimits) {
  policy::ProcessPolicy p;
  p.memory = 256ull << 20;
  p.pids = 64;
  p.nofile = 100;
  p.fsize = 0;
  auto before_as = limit_of(RLIMIT_DATA);
  auto before_fsize = limit_of(RLIMIT_FSIZE);
  auto out = in_child_with(plan_rlimits(p, LimitBackend::CgroupV1), [] {
    return limit_of(RLIMIT_DATA) + "," + limit_of(RLIMIT_FSIZE) + "," + limit_of(RLIMIT_NOFILE) +
           "," + limit_of(RLIMIT_CORE);
  });
  EXPECT_EQ(out, before_as + "," + before_fsize + ",100,0");
}

TEST(Limits, RlimitAboveTheCurrentHardLimitKeepsTheLowerOne) {
  policy::ProcessPolicy p;
  p.nofile = 1u << 20;
  int pp[2];
  ASSERT_EQ(pipe(pp), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(pp[0]);
    struct rlimit low {
      50, 50
    };
    setrlimit(RLIMIT_NOFILE, &low);
    if (geteuid() == 0) {
      // Without CAP_SYS_RESOURCE a hard limit cannot be raised: exactly the rootless case.
      if (setresuid(65534, 65534, 65534) != 0) {
        _exit(2);
      }
    }
    auto st = apply_rlimit_plan(plan_rlimits(p, LimitBackend::Rlimits));
    std::string s = st.ok() ? limit_of(RLIMIT_NOFILE) : st.error().to_string();
    (void)!write(pp[1], s.data(), s.size());
    _exit(0);
  }
  close(pp[1]);
  char buf[256];
  ssize_t n = read(pp[0], buf, sizeof buf);
  close(pp[0]);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "50");
}

TEST(Limits, ApplyRlimitsInChildThroughTheLimitsObject) {
  policy::ProcessPolicy p;
  p.nofile = 77;
  p.fsize = 4096;
  auto l = Limits::create(p, unique_id("apply"));
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  int pp[2];
  ASSERT_EQ(pipe(pp), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(pp[0]);
    auto st = l->apply_rlimits_in_child();
    std::string s = st.ok() ? limit_of(RLIMIT_NOFILE) + "," + limit_of(RLIMIT_FSIZE) + "," +
                                  limit_of(RLIMIT_CORE)
                            : st.error().to_string();
    (void)!write(pp[1], s.data(), s.size());
    _exit(0);
  }
  close(pp[1]);
  char buf[256];
  ssize_t n = read(pp[0], buf, sizeof buf);
  close(pp[0]);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "77,4096,0");
}

TEST(Limits, MovedFromLimitsIsHarmlessAndTheMoveOwnsTheCgroups) {
  REQUIRE_CGROUP_V1();
  policy::ProcessPolicy p;
  std::vector<std::string> dirs;
  {
    auto l = Limits::create(p, unique_id("move"));
    ASSERT_TRUE(l.ok());
    Limits a = std::move(l).value();
    dirs = a.cgroup_paths();
    Limits b = std::move(a);
    EXPECT_EQ(b.cgroup_paths(), dirs);
    for (const auto& d : dirs) {
      EXPECT_TRUE(exists(d));
    }
  }
  for (const auto& d : dirs) {
    EXPECT_FALSE(exists(d));
  }
}

}  // namespace
}  // namespace cordon::launcher
