// End to end through `cordon run`: the program really runs without capabilities, under
// no_new_privs and the seccomp filter, with the environment scrubbed and the limits enforced —
// a memory hog is killed and reported, a fork loop is contained and leaves nothing behind.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/host_procs.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace cordon::launcher {
namespace {

using cordon::testing::build_path;
using cordon::testing::RunResult;
using cordon::testing::RunSpec;
using cordon::testing::TempDir;

bool cordon_built() { return access(build_path("launcher/cordon").c_str(), X_OK) == 0; }

bool v1_memory_writable() {
  return geteuid() == 0 && access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0;
}

class Hardening : public ::testing::Test {
 protected:
  void SetUp() override {
    CORDON_REQUIRE(cordon_built(), "the cordon binary (build target `cordon`)");
  }

  // `cordon run [flags] -- argv` with a scratch workspace and state/cache dirs of its own.
  RunResult cordon_run(const std::vector<std::string>& flags, const std::vector<std::string>& argv,
                       std::vector<std::string> extra_env = {}) {
    std::vector<std::string> cmd{
        build_path("launcher/cordon"), "run", "--quiet", "--mode", "ro", "--workspace", ws_.path()};
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    cmd.push_back("--");
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    RunSpec spec;
    spec.deadline = std::chrono::seconds(120);
    std::vector<std::string> env{
        "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + state_.path(),
        "XDG_STATE_HOME=" + state_.path(),   "XDG_CACHE_HOME=" + state_.path() + "/cache",
        "CORDON_STATE_DIR=" + state_.path(), "LANG=C"};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    spec.env = env;
    spec.cwd = ws_.path();
    return cordon::testing::run_program(cmd, spec);
  }

  // summary.json of the one session this test ran.
  nlohmann::json summary() {
    std::string sessions = state_.path() + "/sessions";
    std::vector<std::string> dirs;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(sessions, ec)) {
      if (e.is_directory()) {
        dirs.push_back(e.path().string());
      }
    }
    if (dirs.size() != 1) {
      ADD_FAILURE() << dirs.size() << " sessions in " << sessions;
      return {};
    }
    std::ifstream f(dirs[0] + "/summary.json");
    return nlohmann::json::parse(f, nullptr, false);
  }

  TempDir ws_, state_;
};

TEST_F(Hardening, ProgramRunsWithoutCapabilitiesUnderNoNewPrivsAndSeccomp) {
  auto r = cordon_run(
      {}, {"/bin/grep", "-E",
           "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):", "/proc/self/status"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out,
            "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
            "CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n");
}

#if defined(__x86_64__)
TEST_F(Hardening, DeniedSyscallsFailWithEpermInsideAndOrdinaryOnesWork) {
  // Raw x86_64 syscall numbers through ctypes, and sockets through Python's own module.
  const char* script = R"PY(
import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    print(name, "ok" if r != -1 else errno.errorcode[ctypes.get_errno()])
call("mount", 165, 0, 0, 0, 0, 0)
call("unshare_newuser", 272, 0x10000000)
call("keyctl", 250, 0, 0, 0, 0, 0)
call("bpf", 321, 0, 0, 0)
call("io_uring_setup", 425, 1, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("setns", 308, -1, 0)
call("open_by_handle_at", 304, -1, 0, 0)
call("clone3", 435, 0, 0)
call("getpid", 39)
def sock(name, *args):
    try:
        socket.socket(*args).close()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
sock("packet", socket.AF_PACKET, socket.SOCK_RAW, 0)
sock("raw_inet", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock("raw_inet6", socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
sock("tcp", socket.AF_INET, socket.SOCK_STREAM, 0)
sock("unix", socket.AF_UNIX, socket.SOCK_STREAM, 0)
)PY";
  auto r = cordon_run({}, {"python3", "-c", script});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out,
            "mount EPERM\nunshare_newuser EPERM\nkeyctl EPERM\nbpf EPERM\nio_uring_setup EPERM\n"
            "perf_event_open EPERM\nsetns EPERM\nopen_by_handle_at EPERM\nclone3 ENOSYS\n"
            "getpid ok\npacket EPERM\nraw_inet EPERM\nraw_inet6 EPERM\ntcp ok\nunix ok\n");
}
#endif

TEST_F(Hardening, NestedUserNamespaceIsRefused) {
  auto r = cordon_run({}, {"/bin/sh", "-c", "unshare -U true; echo rc=$?"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "rc=1\n");
  EXPECT_NE(r.err.find("Operation not permitted"), std::string::npos) << r.err;
}

TEST_F(Hardening, SecretsAreStrippedFromTheEnvironmentEvenWhenKept) {
  auto r = cordon_run({"--env-keep", "FOO_TOKEN", "--env-keep", "my_api_key", "--env-keep",
                       "EDITOR", "--env-set", "GIVEN=1"},
                      {"/usr/bin/env"},
                      {"FOO_TOKEN=t0k3n", "AWS_SECRET_ACCESS_KEY=aws", "GITHUB_TOKEN=ghp_x",
                       "my_api_key=k", "EDITOR=vim"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  // AWS_SECRET_ACCESS_KEY and GITHUB_TOKEN may be there as the canaries' decoys (canaries.h),
  // never with the host's values.
  for (const char* secret : {"t0k3n", "FOO_TOKEN", "AWS_SECRET_ACCESS_KEY=aws\n",
                             "GITHUB_TOKEN=ghp_x\n", "my_api_key"}) {
    EXPECT_EQ(r.out.find(secret), std::string::npos) << secret << " leaked:\n" << r.out;
  }
  EXPECT_NE(r.out.find("\nEDITOR=vim\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GIVEN=1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PATH=/usr/local/bin:/usr/bin:/bin\n"), std::string::npos) << r.out;
}

TEST_F(Hardening, AlwaysOnRlimitsApplyInside) {
  auto r = cordon_run({"--nofile", "200"}, {"/bin/sh", "-c", "ulimit -n; ulimit -c"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "200\n0\n");
}

TEST_F(Hardening, MemoryHogIsKilledAndReported) {
  const char* script = R"PY(
import mmap
maps = []
# Private memory: what both a memory cgroup and the rootless RLIMIT_DATA count (shared
# anonymous memory escapes the rlimit, as docs/security.md says).
for i in range(128):                     # 2 GiB in 16 MiB steps, every page touched
    m = mmap.mmap(-1, 16 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.write(b"x" * (16 << 20))
    maps.append(m)
print("survived")
)PY";
  auto r = cordon_run({"--memory", "256M"}, {"python3", "-c", script});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.out.find("survived"), std::string::npos);
  if (v1_memory_writable()) {
    // cgroup v1: the OOM killer ends it inside the cgroup, and cordon says which limit.
    EXPECT_EQ(r.exit_code(), 128 + SIGKILL) << r.err;
    EXPECT_NE(r.err.find("memory limit"), std::string::npos) << r.err;
    auto s = summary();
    EXPECT_EQ(s.value("limits_hit", nlohmann::json::array()), nlohmann::json::array({"memory"}))
        << s.dump();
    EXPECT_LE(s.value("peak_memory", 0ull), (256ull << 20) + (1ull << 20)) << s.dump();
  } else {
    // rlimits: RLIMIT_DATA makes the allocation fail (MemoryError/mmap error).
    EXPECT_NE(r.exit_code(), 0) << r.err;
  }
}

// Processes whose command line is exactly argv (argv joined by NULs), anywhere on the host.
std::vector<pid_t> processes_with_cmdline(const std::vector<std::string>& argv) {
  std::string want;
  for (const auto& a : argv) {
    want += a;
    want.push_back('\0');
  }
  return cordon::testing::host_pids_where(
      [&](pid_t, const std::string& cmd) { return cmd == want; });
}

TEST_F(Hardening, ForkLoopIsContainedByPidsAndLeavesNothingBehind) {
  // Each child becomes `sleep <marker>`, a command line unique to this test run, so afterwards
  // the whole host can be searched for survivors.
  std::string marker = "3600." + std::to_string(getpid());
  std::string script = R"PY(
import os, errno, sys
ok = eagain = 0
for i in range(500):                      # bounded: at most 500 attempts
    try:
        pid = os.fork()
    except OSError as e:
        if e.errno != errno.EAGAIN:
            raise
        eagain += 1
        continue
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", sys.argv[1]])
    ok += 1
print("forks", ok, "eagain", eagain)
)PY";
  auto r = cordon_run({"--pids", "64", "--timeout", "60s"}, {"python3", "-c", script, marker});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  int forks = -1, eagain = -1;
  ASSERT_EQ(sscanf(r.out.c_str(), "forks %d eagain %d", &forks, &eagain), 2) << r.out;
  EXPECT_LT(forks, 64);
  EXPECT_GT(forks, 0);
  EXPECT_EQ(forks + eagain, 500);
  if (v1_memory_writable()) {
    // cgroup v1 counts refused forks (pids.events), so the record names the limit.
    auto s = summary();
    EXPECT_EQ(s.value("limits_hit", nlohmann::json::array()), nlohmann::json::array({"pids"}))
        << s.dump();
  }
  // cordon has returned: nothing the program started may still run anywhere.
  EXPECT_TRUE(processes_with_cmdline({"sleep", marker}).empty());
}

}  // namespace
}  // namespace cordon::launcher
