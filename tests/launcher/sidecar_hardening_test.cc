// cordon's host-side processes under attack by a process of their own uid: cordon-netproxy runs as
// the sandbox's user, so anything else of that uid on the host could take its fds (the session's
// events.jsonl, the listening sockets in the sandbox's network namespace) with pidfd_getfd. It,
// cordon-fs and cordon itself are undumpable, so that fails; and no fd of theirs is inheritable by
// a program they run, nor reaches the sandbox.
#include <gmock/gmock.h>
#include <grp.h>
#include <sys/stat.h>

#include <fstream>
#include <map>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/host_procs.h"

namespace cordon::testing {
namespace {

// pidfd_getfd(pidfd_open(PID), FD) in python3, as the caller's ids: "taken" or "errno N".
constexpr char kSteal[] = R"(
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
try:
    pfd = os.pidfd_open(int(sys.argv[1]))
except OSError as e:
    print('errno %d' % e.errno); sys.exit(0)
r = libc.syscall(438, pfd, int(sys.argv[2]), 0)
print('taken' if r >= 0 else 'errno %d' % ctypes.get_errno())
)";

std::string steal_as(uid_t uid, gid_t gid, pid_t pid, int fd) {
  RunSpec spec;
  spec.env = {"PATH=/usr/bin:/bin"};
  if (::geteuid() == 0 && uid != 0) {
    // setpriv drops to the ids before python3 starts: the attacker is an ordinary process.
    return run_program(
               {"setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(gid),
                "--clear-groups", "python3", "-c", kSteal, std::to_string(pid), std::to_string(fd)},
               spec)
        .out;
  }
  return run_program({"python3", "-c", kSteal, std::to_string(pid), std::to_string(fd)}, spec).out;
}

pid_t parent_of(pid_t pid) {
  std::string status = proc_file(pid, "status");
  size_t at = status.find("PPid:");
  return at == std::string::npos ? -1 : static_cast<pid_t>(std::atol(status.c_str() + at + 5));
}

uid_t uid_of(pid_t pid, bool gid = false) {
  std::string status = proc_file(pid, "status");
  size_t at = status.find(gid ? "Gid:" : "Uid:");
  return at == std::string::npos ? static_cast<uid_t>(-1)
                                 : static_cast<uid_t>(std::atol(status.c_str() + at + 4));
}

// The direct child of `parent` whose argv[0] ends in `name`.
pid_t child_named(pid_t parent, const std::string& name) {
  auto pids = host_pids_where([&](pid_t p, const std::string& cmd) {
    std::string argv0 = cmd.substr(0, cmd.find('\0'));
    return argv0.size() >= name.size() &&
           argv0.compare(argv0.size() - name.size(), name.size(), name) == 0 &&
           parent_of(p) == parent;
  });
  return pids.empty() ? -1 : pids.front();
}

// The number after `flag` in a process's argv, or -1.
int fd_arg(pid_t pid, const std::string& flag) {
  std::string cmd = proc_file(pid, "cmdline");
  std::vector<std::string> args;
  for (size_t at = 0; at < cmd.size();) {
    size_t nul = cmd.find('\0', at);
    args.push_back(cmd.substr(at, nul - at));
    at = nul == std::string::npos ? cmd.size() : nul + 1;
  }
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) {
      return std::atoi(args[i + 1].c_str());
    }
  }
  return -1;
}

// A cow session with network (so cordon-netproxy and cordon-fs both run) whose program lists its
// own fds and waits for the test.
class RunningSession {
 public:
  RunningSession() {
    uid_ = f_.make_workspace_owned();
    write_text(f_.home() + "/p.json",
               R"({"version": 1, "network": {"allow": ["api.test:9"],
                   "resolve": {"api.test": "127.0.0.1"}}})");
    std::vector<std::string> argv = {
        cordon_bin(),
        "run",
        "-q",
        "--workspace",
        f_.ws(),
        "--policy",
        f_.home() + "/p.json",
        "--",
        "/bin/sh",
        "-c",
        "for fd in /proc/self/fd/*; do echo \"fd ${fd##*/} $(readlink $fd)\"; done; "
        "echo listed; read line"};
    bg_ = std::make_unique<Background>(argv, f_.env(), f_.ws(), true);
    inside_ = bg_->read_until("listed");
    ready_ = inside_.find("listed") != std::string::npos;
  }
  ~RunningSession() {
    bg_->send("done\n");
    bg_->wait();
  }
  bool ready() const { return ready_; }
  // What the program listed of its own fds: "fd N TARGET" lines.
  const std::string& inside() const { return inside_; }
  pid_t cordon() const { return bg_->pid(); }
  uid_t sandbox_uid() const { return uid_; }
  SandboxFixture& fixture() { return f_; }

 private:
  SandboxFixture f_;
  uid_t uid_ = 0;
  std::unique_ptr<Background> bg_;
  std::string inside_;
  bool ready_ = false;
};

TEST(SidecarHardening, NoProcessOfTheSandboxUidCanTakeTheSessionsFds) {
  RunningSession s;
  ASSERT_TRUE(s.ready());
  pid_t proxy = child_named(s.cordon(), "cordon-netproxy");
  ASSERT_GT(proxy, 0);
  int events_fd = fd_arg(proxy, "--events-fd");
  ASSERT_GE(events_fd, 3);
  // The proxy runs as the sandbox's uid (as root: the workspace owner's; rootless: ours).
  uid_t uid = uid_of(proxy);
  EXPECT_EQ(uid, s.sandbox_uid());
  gid_t gid = uid_of(proxy, true);
  EXPECT_EQ(steal_as(uid, gid, proxy, events_fd), "errno 1\n");
  EXPECT_EQ(steal_as(uid, gid, proxy, fd_arg(proxy, "--transparent-fd")), "errno 1\n");
  pid_t fs = child_named(s.cordon(), "cordon-fs");
  if (fs > 0) {
    EXPECT_EQ(steal_as(uid, gid, fs, 4), "errno 1\n");  // its events.jsonl
  }
  EXPECT_EQ(steal_as(uid, gid, s.cordon(), 3), "errno 1\n");
}

// Every fd of a sidecar beyond 0-2 is close-on-exec (so no program it runs, fusermount3 included,
// inherits one), its 0-2 are no session file, and the sandbox holds none of them.
TEST(SidecarHardening, NoSidecarFdReachesAProgramItRunsOrTheSandbox) {
  CORDON_REQUIRE(::geteuid() == 0, "root (reading another process's fd flags)");
  RunningSession s;
  ASSERT_TRUE(s.ready());
  std::map<std::string, pid_t> sidecars = {{"cordon-netproxy", -1}, {"cordon-fs", -1}};
  for (auto& [name, pid] : sidecars) {
    pid = child_named(s.cordon(), name);
  }
  ASSERT_GT(sidecars["cordon-netproxy"], 0);
  for (const auto& [name, pid] : sidecars) {
    if (pid <= 0) {
      continue;  // cow through kernel overlayfs: no cordon-fs
    }
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* d = ::opendir(dir.c_str());
    ASSERT_NE(d, nullptr) << dir;
    size_t checked = 0;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') {
        continue;
      }
      int fd = std::atoi(e->d_name);
      char target[512] = {};
      (void)!::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
      std::string info = proc_file(pid, ("fdinfo/" + std::string(e->d_name)).c_str());
      size_t at = info.find("flags:");
      ASSERT_NE(at, std::string::npos) << info;
      unsigned long flags = std::strtoul(info.c_str() + at + 6, nullptr, 8);
      if (fd <= 2) {
        EXPECT_EQ(std::string(target).find("events.jsonl"), std::string::npos)
            << name << " fd " << fd << " -> " << target;
      } else {
        EXPECT_NE(flags & O_CLOEXEC, 0u) << name << " fd " << fd << " -> " << target;
        ++checked;
      }
    }
    ::closedir(d);
    EXPECT_GT(checked, 0u) << name;
  }
  // Inside: 0-2 (the terminal or pipes), the shell's own, and the shim's event socket at most.
  const std::string& inside = s.inside();
  EXPECT_THAT(inside, ::testing::Not(::testing::HasSubstr("events.jsonl"))) << inside;
  EXPECT_THAT(inside, ::testing::Not(::testing::HasSubstr("cordon-fs.log"))) << inside;
  EXPECT_THAT(inside, ::testing::Not(::testing::HasSubstr("netproxy.log"))) << inside;
  size_t sockets = 0;
  for (size_t at = 0; (at = inside.find("socket:", at)) != std::string::npos; ++at) {
    ++sockets;
  }
  EXPECT_LE(sockets, 1u) << inside;  // the shim's own, if it connected
}

}  // namespace
}  // namespace cordon::testing
