// Many `cordon run` sessions at once on one machine, as on a node packed with agent pods: each
// writes a file in its copy-on-write workspace, makes one allowed HTTP request through its proxy to
// a loopback server and exits with a status of its own. All of them must end within a bound, with
// their programs' statuses and intact records, and leave nothing behind: no cordon, sidecar or
// sandbox process, no mount, no namespace anything still holds, no cgroup (as root).
// CORDON_FLEET_SESSIONS sets how many (default 50); the wall time and peak load are printed.
#include <dirent.h>
#include <gmock/gmock.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/fixture.h"
#include "tests/support/host_procs.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;

constexpr auto kFleetDeadline = std::chrono::seconds(120);

int fleet_size() {
  const char* s = std::getenv("CORDON_FLEET_SESSIONS");
  int n = s != nullptr ? std::atoi(s) : 50;
  return n < 1 ? 1 : (n > 200 ? 200 : n);
}

std::string link_of(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::vector<pid_t> all_pids() {
  return host_pids_where([](pid_t, const std::string&) { return true; });
}

// The mounts that could be a session's: cordon-fs, kernel overlay, tmpfs and bound namespaces.
// Each as "mount point type root" (the root of an nsfs mount names the namespace it holds).
std::set<std::string> session_kind_mounts() {
  std::set<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point, field;
    f >> id >> parent >> dev >> root >> point;
    while (f >> field && field != "-") {
    }
    std::string type;
    f >> type;
    if (type.rfind("fuse", 0) == 0 || type == "overlay" || type == "tmpfs" || type == "nsfs") {
      out.insert(point + " " + type + " " + root);
    }
  }
  return out;
}

// Directories a session's cgroups take: cgroup v1 <hierarchy>/.../cordon/<id>, v2 .../cordon-<id>
// or .../cordon/<id>. Bounded depth: the hierarchies are shallow.
void cgroup_dirs_under(const std::string& dir, int depth, std::set<std::string>& out) {
  if (depth > 8) {
    return;
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return;
  }
  const bool parent_is_cordon = dir.size() >= 7 && dir.compare(dir.size() - 7, 7, "/cordon") == 0;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (e->d_type != DT_DIR || name == "." || name == "..") {
      continue;
    }
    std::string path = dir + "/" + name;
    if (parent_is_cordon || name.rfind("cordon-", 0) == 0) {
      out.insert(path);
    }
    cgroup_dirs_under(path, depth + 1, out);
  }
  ::closedir(d);
}

// One session: its own workspace, home and session store, all on the tests' temporary directory.
struct Member {
  TempDir ws, home, state;
  int index = 0;
  pid_t pid = -1;
  int status = -1;
  bool done = false;
  std::vector<std::string> env() const {
    return {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home.path(), "LANG=C.UTF-8",
            "CORDON_STATE_DIR=" + state.path()};
  }
  std::string out_file() const { return home.path() + "/cordon.out"; }
  // The id of the one session in this member's store ("" if none).
  std::string session_id() const {
    std::string id;
    DIR* d = ::opendir((state.path() + "/sessions").c_str());
    if (d == nullptr) {
      return id;
    }
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') {
        id = e->d_name;
      }
    }
    ::closedir(d);
    return id;
  }
  std::string cordon(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{cordon_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    RunSpec spec;
    spec.env = env();
    spec.cwd = ws.path();
    spec.deadline = std::chrono::seconds(30);
    auto r = run_program(argv, spec);
    return "exit " + std::to_string(r.exit_code()) + "\n" + r.out + r.err;
  }
};

// The fleet's program for member `i`: exit status 10 + i, unique to it.
int expected_status(int i) { return 10 + i; }

pid_t start_member(Member& m, const std::string& policy, const std::string& script) {
  std::vector<std::string> argv{cordon_bin(), "run",  "--workspace", m.ws.path(), "--mode", "cow",
                                "--policy",   policy, "--",          "/bin/sh",   "-c",     script};
  auto env = m.env();
  std::vector<char*> a, e;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  for (auto& s : env) e.push_back(s.data());
  e.push_back(nullptr);
  const std::string out = m.out_file();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    int in = ::open("/dev/null", O_RDONLY);
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || o < 0 || ::chdir(m.ws.path().c_str()) != 0) ::_exit(120);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(o, 2);
    ::execve(a[0], a.data(), e.data());
    ::_exit(127);
  }
  return pid;
}

double load1() {
  double l = 0;
  std::ifstream("/proc/loadavg") >> l;
  return l;
}

// Threads runnable right now, machine-wide (/proc/stat procs_running).
int runnable() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "procs_running") {
      int n = 0;
      in >> n;
      return n;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

// `check()`'s findings once they are gone, or after 5 s those still found: what dies with a
// killed process goes asynchronously (a parent-death signal, a zombie's reaping by init).
std::vector<std::string> settled(const std::function<std::vector<std::string>()>& check) {
  std::vector<std::string> found = check();
  for (int k = 0; !found.empty() && k < 50; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    found = check();
  }
  return found;
}

class Fleet : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_test_files(files_));
    up_ = std::make_unique<Upstreams>(std::vector<std::string>{"root=" + files_.path() + "/www"});
    ASSERT_TRUE(up_->ok());
    policy_ = files_ / "policy.json";
    write_text(policy_, R"({"version": 1, "network": {"allow": ["api.test:)" +
                            std::to_string(up_->port("http")) +
                            R"("], "resolve": {"api.test": "127.0.0.1"}}})");
    // Only this run's processes carry it in their command lines.
    marker_ = "fleet-marker-" + std::to_string(::getpid()) + "-" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    build_prefix_ = std::string(CORDON_BUILD_DIR) + "/";
    for (const char* kind : {"net", "user", "mnt", "pid", "ipc", "uts", "cgroup"}) {
      own_ns_.insert(link_of(std::string("/proc/self/ns/") + kind));
    }
  }

  std::string script(int i) const {
    return "echo " + marker_ + " " + std::to_string(i) +
           " > fleet.txt && curl -sS --max-time 60 -o got.txt http://api.test:" +
           std::to_string(up_->port("http")) +
           "/hello.txt && grep -q 'hello through cordon' got.txt && sleep 1; exit " +
           std::to_string(expected_status(i));
  }

  // Processes of this run still on the host: a cordon binary of this build (cordon, cordon-fs,
  // cordon-netproxy, other than this test) or anything with the marker in its command line.
  std::vector<std::string> leftover_processes() const {
    std::vector<std::string> out;
    for (pid_t pid : host_pids_where([&](pid_t pid, const std::string&cmd) {
           if (pid == ::getpid()) return false;
           std::string exe = link_of("/proc/" + std::to_string(pid) + "/exe");
           return cmd.find(marker_) != std::string::npos || exe.rfind(build_prefix_, 0) == 0;
         })) {
      std::string cmd = proc_file(pid, "cmdline");
      for (char& c : cmd) c = c == '\0' ? ' ' : c;
      out.push_back(std::to_string(pid) + " " + link_of("/proc/" + std::to_string(pid) + "/exe") +
                    ": " + cmd);
    }
    return out;
  }

  // Adds the namespaces of this run's processes (other than the test's own) to `ns_`.
  void sample_namespaces() {
    for (pid_t pid : host_pids_where([&](pid_t pid, const std::string&cmd) {
           return pid != ::getpid() && cmd.find(marker_) != std::string::npos;
         })) {
      for (const char* kind : {"net", "user", "mnt", "pid", "ipc", "uts"}) {
        std::string l = link_of("/proc/" + std::to_string(pid) + "/ns/" + kind);
        if (!l.empty() && !own_ns_.count(l)) {
          std::lock_guard<std::mutex> g(ns_mu_);
          ns_.insert(l);
        }
      }
    }
  }

  // Who still holds one of the sessions' namespaces: a process as its own, an open fd, or a mount.
  std::vector<std::string> namespace_holders() const {
    std::vector<std::string> out;
    for (pid_t pid : all_pids()) {
      const std::string base = "/proc/" + std::to_string(pid);
      for (const char* kind : {"net", "user", "mnt", "pid", "ipc", "uts"}) {
        std::string l = link_of(base + "/ns/" + kind);
        if (ns_.count(l)) out.push_back(std::to_string(pid) + " is in " + l);
      }
      DIR* d = ::opendir((base + "/fd").c_str());
      if (d == nullptr) continue;
      int fds = 0;
      while (dirent* e = ::readdir(d)) {
        if (++fds > 100000) break;
        std::string l = link_of(base + "/fd/" + e->d_name);
        if (ns_.count(l)) out.push_back(std::to_string(pid) + " holds " + l);
      }
      ::closedir(d);
    }
    for (const auto& m : session_kind_mounts()) {
      for (const auto& n : ns_) {
        if (m.find(n) != std::string::npos) out.push_back("mounted: " + m);
      }
    }
    return out;
  }

  TempDir files_;
  std::unique_ptr<Upstreams> up_;
  std::string policy_, marker_, build_prefix_;
  std::set<std::string> own_ns_;
  std::mutex ns_mu_;
  std::set<std::string> ns_;
};

TEST_F(Fleet, FiftySessionsAtOnceEndWithTheirRecordsAndLeaveNothing) {
  const int n = fleet_size();
  const auto mounts_before = session_kind_mounts();
  std::set<std::string> cgroups_before;
  cgroup_dirs_under("/sys/fs/cgroup", 0, cgroups_before);
  ASSERT_THAT(leftover_processes(), ::testing::IsEmpty());

  std::vector<std::unique_ptr<Member>> fleet;
  for (int i = 0; i < n; ++i) {
    fleet.push_back(std::make_unique<Member>());
    fleet.back()->index = i;
    // As root the program runs as the workspace's owner mapped in: give it one who can write.
    if (::geteuid() == 0) {
      (void)!::chown(fleet.back()->ws.path().c_str(), SandboxFixture::kTestUid,
                     SandboxFixture::kTestUid);
    }
  }

  std::atomic<bool> sampling{true};
  double peak_load = load1();
  int peak_runnable = runnable();
  std::thread sampler([&] {
    for (int k = 0; sampling && k < 20 * 200; ++k) {
      sample_namespaces();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  const auto t0 = std::chrono::steady_clock::now();
  for (auto& m : fleet) {
    m->pid = start_member(*m, policy_, script(m->index));
    ASSERT_GT(m->pid, 0);
  }
  int left = n;
  bool timed_out = false;
  while (left > 0) {
    if (std::chrono::steady_clock::now() - t0 > kFleetDeadline) {
      timed_out = true;
      for (auto& m : fleet) {
        if (!m->done) ::kill(-m->pid, SIGKILL);
      }
    }
    for (auto& m : fleet) {
      if (!m->done && ::waitpid(m->pid, &m->status, timed_out ? 0 : WNOHANG) == m->pid) {
        m->done = true;
        --left;
      }
    }
    peak_load = std::max(peak_load, load1());
    peak_runnable = std::max(peak_runnable, runnable());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sampling = false;
  sampler.join();
  std::printf(
      "fleet: %d sessions in %.1f s wall time, peak load average %.2f, peak %d runnable (%u "
      "cores)\n",
      n, wall, peak_load, peak_runnable, std::thread::hardware_concurrency());
  ASSERT_FALSE(timed_out) << "not all sessions ended within " << kFleetDeadline.count() << " s";

  for (auto& m : fleet) {
    SCOPED_TRACE("session " + std::to_string(m->index) + ": " + read_text(m->out_file()));
    ASSERT_TRUE(WIFEXITED(m->status)) << m->status;
    EXPECT_EQ(WEXITSTATUS(m->status), expected_status(m->index));
    const std::string id = m->session_id();
    ASSERT_FALSE(id.empty());
    EXPECT_THAT(m->cordon({"log", id, "--verify"}), HasSubstr("exit 0\n"));
    const std::string json = m->cordon({"log", id, "--json"});
    EXPECT_THAT(json, HasSubstr("\"kind\":\"session.end\""));
    EXPECT_THAT(json, HasSubstr("\"exit_code\":" + std::to_string(expected_status(m->index))));
    bool connected = false;
    std::istringstream in(json);
    for (std::string line; std::getline(in, line);) {
      auto ev = nlohmann::json::parse(line, nullptr, false);
      connected |= ev.is_object() && ev.value("kind", "") == "net.connect" &&
                   ev.value("name", "") == "api.test" && ev.value("decision", "") == "allow" &&
                   ev.value("bytes_in", 0) > 0;
    }
    EXPECT_TRUE(connected) << json;
    EXPECT_THAT(read_text(m->state.path() + "/sessions/" + id + "/summary.json"), HasSubstr(id));
    EXPECT_THAT(m->cordon({"diff", id}), HasSubstr(marker_ + " " + std::to_string(m->index)));
    // The workspace itself is untouched: the change is in the session's upper layer.
    EXPECT_FALSE(std::ifstream(m->ws.path() + "/fleet.txt").good());
  }

  // Nothing left running: what a session ran is reaped before cordon returns.
  EXPECT_THAT(leftover_processes(), ::testing::IsEmpty());

  std::vector<std::string> new_mounts;
  for (const auto& m : session_kind_mounts()) {
    if (!mounts_before.count(m)) new_mounts.push_back(m);
  }
  // Other suites on the machine may mount elsewhere: what is ours is under a member's dirs.
  std::vector<std::string> ours;
  for (const auto& m : new_mounts) {
    for (auto& mem : fleet) {
      for (const std::string* p : {&mem->ws.path(), &mem->state.path(), &mem->home.path()}) {
        if (m.rfind(*p, 0) == 0) ours.push_back(m);
      }
    }
  }
  EXPECT_THAT(ours, ::testing::IsEmpty());

  std::printf("fleet: %zu namespaces of the sessions seen while they ran\n", ns_.size());
  // The check must have something to check: most sessions were seen in their namespaces.
  size_t netns = static_cast<size_t>(std::count_if(
      ns_.begin(), ns_.end(), [](const std::string& s) { return s.rfind("net:", 0) == 0; }));
  EXPECT_GE(netns, static_cast<size_t>(n) / 2);
  EXPECT_THAT(namespace_holders(), ::testing::IsEmpty());

  if (::geteuid() == 0) {
    std::set<std::string> cgroups_after;
    cgroup_dirs_under("/sys/fs/cgroup", 0, cgroups_after);
    std::vector<std::string> left_cgroups;
    for (const auto& c : cgroups_after) {
      for (auto& m : fleet) {
        const std::string id = m->session_id();
        if (!id.empty() && !cgroups_before.count(c) && c.find(id) != std::string::npos) {
          left_cgroups.push_back(c);
        }
      }
    }
    EXPECT_THAT(left_cgroups, ::testing::IsEmpty());
  }
}

// A cordon killed outright (OOM killer, kill -9) while its program runs: its sidecars and its
// sandbox die with it and nothing holds its mounts or namespaces. Its cgroup (as root) cannot be
// removed by a dead process; the next session on the machine sweeps it.
TEST_F(Fleet, ACordonKilledMidRunTakesItsSidecarsSandboxAndMountsWithIt) {
  const auto mounts_before = session_kind_mounts();
  Member m;
  if (::geteuid() == 0) {
    (void)!::chown(m.ws.path().c_str(), SandboxFixture::kTestUid, SandboxFixture::kTestUid);
  }
  const std::string asleep = marker_ + "-asleep";
  m.pid = start_member(m, policy_,
                       "echo " + marker_ + " > fleet.txt && curl -sS --max-time 60 -o got.txt " +
                           "http://api.test:" + std::to_string(up_->port("http")) +
                           "/hello.txt && exec /bin/sh -c 'sleep 120' " + asleep);
  ASSERT_GT(m.pid, 0);
  // Until the program is past its request and asleep: every sidecar is up by then. The sidecars
  // are cordon's descendants running a binary of this build, named by their command lines (a
  // sidecar in a user namespace of its own does not let /proc/PID/exe be read).
  std::set<std::string> sidecars;
  auto sample_sidecars = [&] {
    std::map<pid_t, pid_t> parent;
    for (pid_t pid : all_pids()) {
      const std::string stat = proc_file(pid, "stat");
      const size_t end = stat.rfind(") ");
      std::istringstream after(end == std::string::npos ? "" : stat.substr(end + 2));
      std::string state;
      pid_t ppid = 0;
      after >> state >> ppid;
      parent[pid] = ppid;
    }
    for (const auto& [pid, ppid] : parent) {
      pid_t up = ppid;
      for (int depth = 0; up > 1 && up != m.pid && depth < 16; ++depth) {
        up = parent.count(up) ? parent[up] : 0;
      }
      const std::string cmd = proc_file(pid, "cmdline");
      if (up == m.pid && cmd.rfind(build_prefix_, 0) == 0) {
        sidecars.insert(cmd.substr(0, cmd.find('\0')));
      }
    }
  };
  bool asleep_seen = false;
  for (int k = 0; !asleep_seen && k < 600; ++k) {
    sample_namespaces();
    sample_sidecars();
    asleep_seen = !host_pids_containing(asleep).empty();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  sample_namespaces();
  sample_sidecars();
  ::kill(m.pid, SIGKILL);
  ::waitpid(m.pid, &m.status, 0);
  ASSERT_TRUE(asleep_seen) << read_text(m.out_file());
  // Something was running for the kill to orphan: the network sidecar at least.
  EXPECT_THAT(sidecars, ::testing::Contains(HasSubstr("cordon-netproxy")));
  EXPECT_FALSE(ns_.empty());

  EXPECT_THAT(settled([&] { return leftover_processes(); }), ::testing::IsEmpty());
  // Rootless with /dev/fuse the view is mounted by fusermount3 in the host's mount namespace;
  // its auto_unmount watcher takes the mount away once cordon-fs is gone, a moment after.
  EXPECT_THAT(settled([&] {
                std::vector<std::string> ours;
                for (const auto& mount : session_kind_mounts()) {
                  for (const std::string* p : {&m.ws.path(), &m.state.path(), &m.home.path()}) {
                    if (!mounts_before.count(mount) && mount.rfind(*p, 0) == 0) {
                      ours.push_back(mount);
                    }
                  }
                }
                return ours;
              }),
              ::testing::IsEmpty());
  // Its init, orphaned, holds the user and pid namespaces as a zombie until the host's init (or
  // the pod's subreaper) reaps it.
  EXPECT_THAT(settled([&] { return namespace_holders(); }), ::testing::IsEmpty());

  if (::geteuid() == 0) {
    const std::string id = m.session_id();
    ASSERT_FALSE(id.empty());
    auto cgroups_of_id = [&] {
      std::set<std::string> all, mine;
      cgroup_dirs_under("/sys/fs/cgroup", 0, all);
      for (const auto& c : all) {
        if (c.find(id) != std::string::npos) mine.insert(c);
      }
      return mine;
    };
    // The next session sweeps the dead one's empty cgroup before making its own.
    Member next;
    next.pid = start_member(next, policy_, "exit 3");
    ASSERT_GT(next.pid, 0);
    for (int k = 0; k < 600 && ::waitpid(next.pid, &next.status, WNOHANG) == 0; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(WIFEXITED(next.status) && WEXITSTATUS(next.status) == 3)
        << read_text(next.out_file());
    EXPECT_THAT(cgroups_of_id(), ::testing::IsEmpty());
  }
}

}  // namespace
}  // namespace cordon::testing
