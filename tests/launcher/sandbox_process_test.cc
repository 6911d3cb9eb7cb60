// The program's life in the sandbox: pid namespace and init, exit statuses, signals, pipes,
// environment, inherited fds, hostname, timeout.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/host_procs.h"

namespace cordon::testing {
namespace {

TEST(SandboxProcess, OnlyTheSandboxsProcessesAreVisible) {
  SandboxFixture f;
  auto r = f.sh("for p in /proc/[0-9]*; do echo \"${p#/proc/} $(cat $p/comm)\"; done");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out.rfind("1 cordon-init\n", 0), 0u) << r.out;
  // init, the shell, and the shell's $(cat) children: nothing of the host.
  size_t lines = 0;
  for (char c : r.out) lines += c == '\n';
  EXPECT_LE(lines, 4u) << r.out;
  EXPECT_EQ(r.out.find("systemd"), std::string::npos);
}

TEST(SandboxProcess, CgroupNamespaceHidesTheHostHierarchy) {
  SandboxFixture f;
  auto r = f.sh("cat /proc/self/cgroup");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  ASSERT_FALSE(r.out.empty());
  size_t start = 0;
  while (start < r.out.size()) {
    size_t nl = r.out.find('\n', start);
    std::string line = r.out.substr(start, nl - start);
    EXPECT_EQ(line.substr(line.rfind(':')), ":/") << line;
    start = nl + 1;
  }
}

TEST(SandboxProcess, InitsEnvironmentAndMemoryAreClosed) {
  SandboxFixture f;
  f.env().push_back("FOO_TOKEN=leak-me-7c2");
  auto r = f.sh("cat /proc/1/environ; tr '\\0' ' ' < /proc/1/cmdline; echo; echo end");
  EXPECT_EQ(r.out.find("leak-me-7c2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.rfind("cordon-init", 0), 0u) << r.out;
}

TEST(SandboxProcess, ExitStatusesPropagate) {
  SandboxFixture f;
  f.make_workspace_owned();
  EXPECT_EQ(f.sh("exit 0").exit_code(), 0);
  EXPECT_EQ(f.sh("exit 3").exit_code(), 3);
  EXPECT_EQ(f.sh("kill -TERM $$").exit_code(), 128 + SIGTERM);
  EXPECT_EQ(f.sh("kill -KILL $$").exit_code(), 128 + SIGKILL);
  EXPECT_EQ(f.sh("kill -SEGV $$").exit_code(), 128 + SIGSEGV);

  auto nf = f.run({"-q", "--mode", writable_mode()}, {"no-such-command-x9"});
  EXPECT_EQ(nf.exit_code(), 127);
  EXPECT_NE(nf.err.find("cordon: no-such-command-x9: command not found"), std::string::npos)
      << nf.err;

  write_text(f.ws() + "/not-exec.sh", "#!/bin/sh\necho hi\n", 0644);
  auto ne = f.run({"-q", "--mode", writable_mode()}, {"./not-exec.sh"});
  EXPECT_EQ(ne.exit_code(), 126);
  EXPECT_NE(ne.err.find("not-exec.sh: Permission denied"), std::string::npos) << ne.err;
}

TEST(SandboxProcess, PathLookupHappensInside) {
  SandboxFixture f;
  // A PATH entry that exists only on the host's side of the wall (the fake home) finds nothing.
  ::mkdir((f.home() + "/bin").c_str(), 0755);
  write_text(f.home() + "/bin/host-only-tool", "#!/bin/sh\necho host\n", 0755);
  f.env()[0] = "PATH=" + f.home() + "/bin:/usr/bin:/bin";
  auto r = f.run({"-q", "--mode", writable_mode()}, {"host-only-tool"});
  EXPECT_EQ(r.exit_code(), 127) << r.out;
  auto ok = f.run({"-q", "--mode", writable_mode()}, {"true"});
  EXPECT_EQ(ok.exit_code(), 0) << ok.err;
}

TEST(SandboxProcess, PipesPassThrough) {
  SandboxFixture f;
  auto r = f.run({"-q", "--mode", writable_mode()}, {"cat"}, RunSpec{.stdin_data = "hi\n"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hi\n");
  auto e = f.sh("echo to-stderr >&2");
  EXPECT_EQ(e.err, "to-stderr\n");
}

TEST(SandboxProcess, EnvironmentIsFiltered) {
  SandboxFixture f;
  f.make_workspace_owned();  // as root: $HOME inside is then the fake home (see identity_test)
  f.env().push_back("FOO_TOKEN=secret-value-1");
  f.env().push_back("MY_SETTING=kept-value");
  f.env().push_back("UNLISTED=dropped");
  auto r = f.sh("env", {"--env-keep", "MY_SETTING", "--env-set", "BAR=baz=qux"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out.find("secret-value-1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FOO_TOKEN"), std::string::npos);
  EXPECT_EQ(r.out.find("UNLISTED"), std::string::npos);
  EXPECT_EQ(r.out.find("CORDON_STATE_DIR"), std::string::npos);
  EXPECT_NE(r.out.find("MY_SETTING=kept-value\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("BAR=baz=qux\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HOME=" + f.home() + "\n"), std::string::npos) << r.out;
}

TEST(SandboxProcess, InheritedFdsAreClosed) {
  SandboxFixture f;
  // Leak a host directory fd and a pipe into cordon (no O_CLOEXEC): the program must not get them.
  int dirfd = ::open("/", O_RDONLY | O_DIRECTORY);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_GE(dirfd, 3);
  // 768 (3/4 of the default nofile 1024, O_CLOEXEC) is ls's own event socket to cordon, opened
  // by the preload shim inside ls (preload_shim/README.md); it is not inherited from anywhere.
  auto r = f.sh(
      "ls /proc/self/fd | grep -vx 768; for fd in 3 4 5 6 7 8 9; do [ -e /proc/$$/fd/$fd ] && "
      "echo leaked $fd; done; echo end");
  ::close(dirfd);
  ::close(p[0]);
  ::close(p[1]);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  // ls sees 0-2 and its own directory fd (3); the shell has no fd above 2.
  EXPECT_EQ(r.out, "0\n1\n2\n3\nend\n") << r.out;
}

TEST(SandboxProcess, HostnameFromPolicy) {
  SandboxFixture f;
  EXPECT_EQ(f.sh("hostname").out, "cordon\n");
  write_text(f.home() + "/p.json", R"({"version": 1, "process": {"hostname": "agentbox"}})");
  auto r = f.sh("hostname; cat /etc/hosts", {"--policy", f.home() + "/p.json"});
  EXPECT_EQ(r.out.rfind("agentbox\n", 0), 0u) << r.out << r.err;
  EXPECT_NE(r.out.find("localhost agentbox"), std::string::npos);
}

TEST(SandboxProcess, SignalsToCordonReachTheProgram) {
  SandboxFixture f;
  std::vector<std::string> argv = {cordon_bin(),
                                   "run",
                                   "-q",
                                   "--mode",
                                   writable_mode(),
                                   "--workspace",
                                   f.ws(),
                                   "--",
                                   "/bin/sh",
                                   "-c",
                                   "trap 'echo got-usr1' USR1; trap 'echo got-term; exit 7' TERM; "
                                   "echo ready; while :; do sleep 0.05; done"};
  Background b(argv, f.env(), f.ws());
  ASSERT_NE(b.read_until("ready\n").find("ready"), std::string::npos) << b.text();
  ::kill(b.pid(), SIGUSR1);
  EXPECT_NE(b.read_until("got-usr1").find("got-usr1"), std::string::npos) << b.text();
  ::kill(b.pid(), SIGTERM);
  EXPECT_EQ(b.wait(), 7) << b.text();
  EXPECT_NE(b.text().find("got-term"), std::string::npos) << b.text();
}

// init leads a session of its own (sid 1 in the sandbox): the host terminal's signals for cordon's
// process group can't reach it directly, only through cordon's forwarding.
TEST(SandboxProcess, InitIsOutsideTheHostsSession) {
  SandboxFixture f;
  auto r = f.sh("cut -d' ' -f6 /proc/1/stat; cut -d' ' -f6 /proc/$$/stat");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "1\n2\n") << "init's and the program's session ids";
}

// A terminal's ^C goes to cordon's whole process group. The program must see it once (through
// cordon's forwarding), not a second time through init.
TEST(SandboxProcess, GroupSignalReachesTheProgramOnce) {
  SandboxFixture f;
  std::vector<std::string> argv = {
      cordon_bin(),
      "run",
      "-q",
      "--mode",
      writable_mode(),
      "--workspace",
      f.ws(),
      "--",
      "/bin/sh",
      "-c",
      "n=0; trap 'n=$((n+1)); echo int-$n' INT; trap 'echo count=$n; exit 0' TERM; "
      "echo ready; while :; do sleep 0.05; done"};
  Background b(argv, f.env(), f.ws());
  ASSERT_NE(b.read_until("ready\n").find("ready"), std::string::npos) << b.text();
  ::kill(-b.pid(), SIGINT);  // Background put cordon in its own process group
  ASSERT_NE(b.read_until("int-1").find("int-1"), std::string::npos) << b.text();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(b.pid(), SIGTERM);
  EXPECT_EQ(b.wait(), 0) << b.text();
  EXPECT_NE(b.text().find("count=1\n"), std::string::npos) << b.text();
}

// Host-side scan for a token in any process's command line.
bool process_with_token_alive(const std::string& token) {
  return !cordon::testing::host_pids_containing(token).empty();
}

TEST(SandboxProcess, TimeoutKillsTheWholeTree) {
  // The markers are read from the workspace itself: rw mode.
  CORDON_REQUIRE(fs_views_here(), "rw mode for this user (cordon-fs views: root, or /dev/fuse)");
  SandboxFixture f;
  f.make_workspace_owned();
  write_text(f.home() + "/p.json", R"({"version": 1, "process": {"kill_grace": "500ms"}})");
  std::string token = "cordon-timeout-" + std::to_string(::getpid());
  // The program ignores SIGTERM and leaves children that also ignore it and keep appending to a
  // marker (appending: a kill mid-write can't leave it shorter than it was).
  std::string script =
      "trap '' TERM; for i in 1 2 3; do (trap '' TERM; while :; do echo tick >> marker.$i; "
      "sleep 0.05; done) & done; while [ ! -s marker.1 ] || [ ! -s marker.3 ]; do sleep 0.05; "
      "done; echo started; while :; do sleep 0.05; done";
  auto start = std::chrono::steady_clock::now();
  auto r =
      f.run({"-q", "--mode", writable_mode(), "--timeout", "3s", "--policy", f.home() + "/p.json"},
            {"/bin/sh", "-c", script, token});
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 124) << r.err;
  EXPECT_NE(r.err.find("timeout"), std::string::npos) << r.err;
  ASSERT_NE(r.out.find("started"), std::string::npos) << "the children never ran: " << r.err;
  EXPECT_LT(took, std::chrono::seconds(20));
  EXPECT_FALSE(process_with_token_alive(token));
  std::vector<size_t> before;
  for (int i = 1; i <= 3; ++i) {
    before.push_back(read_text(f.ws() + "/marker." + std::to_string(i)).size());
    EXPECT_GT(before.back(), 0u);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(read_text(f.ws() + "/marker." + std::to_string(i)).size(), before[i - 1])
        << "child " << i << " kept running after the timeout";
  }
}

TEST(SandboxProcess, BadFlagValuesAreNamed) {
  SandboxFixture f;
  auto r = f.run({"--memory", "12Q"}, {"/bin/true"});
  EXPECT_EQ(r.exit_code(), 125);
  // The flag, the field it sets and the loader's own words for the field.
  EXPECT_NE(r.err.find("cordon: --memory: process.memory: \"12Q\" is not a size (accepted: "),
            std::string::npos)
      << r.err;
  auto t = f.run({"--timeout", "soon"}, {"/bin/true"});
  EXPECT_EQ(t.exit_code(), 125);
  EXPECT_NE(t.err.find("--timeout: process.timeout: \"soon\" is not a duration"), std::string::npos)
      << t.err;
}

// network.allow is enforced through cordon-netproxy (tests/launcher/network_test.cc); a missing
// proxy binary is a launch failure, never a sandbox with open network.
TEST(SandboxProcess, NetworkAllowFailsClosedWithoutTheProxy) {
  SandboxFixture f;
  // A copy of cordon alone in a directory: no cordon-netproxy beside it or in a build tree next
  // to it. (The installed libexec directory must not hold one either for this to mean anything.)
  TempDir bin;
  std::string copy = bin / "cordon";
  auto cp = run_program({"cp", cordon_bin(), build_path("launcher/cordon-capture.so"),
                         build_path("preload_shim/libcordon_preload.so"), bin.path()});
  ASSERT_EQ(cp.exit_code(), 0) << cp.err;
  CORDON_REQUIRE(::access(CORDON_LIBEXECDIR "/cordon-netproxy", X_OK) != 0,
                 "no installed cordon-netproxy (one is in " CORDON_LIBEXECDIR ")");
  RunSpec spec;
  spec.env = f.env();
  spec.cwd = f.ws();
  auto r = run_program({copy, "run", "--workspace", f.ws(), "--mode", "ro", "--allow-host",
                        "example.com:443", "--", "/bin/true"},
                       spec);
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("cordon-netproxy not found"), std::string::npos) << r.err;
  // Found missing before any namespace: no session was even started.
  EXPECT_EQ(r.err.find("cordon: session "), std::string::npos) << r.err;
}

TEST(SandboxProcess, SessionRecordIsWritten) {
  SandboxFixture f;
  auto r = f.run({"--mode", writable_mode()}, {"/bin/sh", "-c", "exit 4"});
  EXPECT_EQ(r.exit_code(), 4);
  EXPECT_NE(r.err.find("cordon: session "), std::string::npos) << r.err;
  // --quiet: no summary.
  auto q = f.sh("exit 0");
  EXPECT_EQ(q.err, "");
}

}  // namespace
}  // namespace cordon::testing
