// Landlock: process.exec_allow holds against static and dynamic binaries, allowed programs run,
// and the write layer refuses writes outside the planned places even on a writable mount.
#include "launcher/landlock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

std::string compile(SandboxFixture& f, const std::string& name, bool static_link) {
  std::string src = f.home() + "/" + name + ".c";
  write_text(src, "#include <stdio.h>\nint main(void) { puts(\"ran " + name + "\"); return 0; }\n");
  std::vector<std::string> argv = {"gcc", "-O1", "-o", f.ws() + "/" + name, src};
  if (static_link) {
    argv.push_back("-static");
  }
  RunResult r = run_program(argv);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return f.ws() + "/" + name;
}

TEST(Landlock, ExecAllowStopsStaticAndDynamicBinariesAndAllowsTheRest) {
  CORDON_REQUIRE(launcher::landlock_abi() > 0, "the kernel has no Landlock");
  SandboxFixture f;
  compile(f, "static_bin", true);
  compile(f, "dyn_bin", false);
  compile(f, "allowed_bin", false);
  RunResult file = run_program({"file", f.ws() + "/static_bin"});
  ASSERT_NE(file.out.find("statically linked"), std::string::npos) << file.out;
  write_text(f.home() + "/p.json",
             R"({"version": 1, "process": {"exec_allow": ["/usr/bin", "allowed_bin"]}})");
  RunResult r = f.sh(
      "./static_bin; echo static=$?; ./dyn_bin; echo dyn=$?; ./allowed_bin; echo allowed=$?; "
      "cat /etc/hostname; /usr/bin/env true; echo env=$?",
      {"--policy", f.home() + "/p.json"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "static=126\ndyn=126\nran allowed_bin\nallowed=0\ncordon\nenv=0\n") << r.err;
  EXPECT_EQ(r.out.find("ran static_bin"), std::string::npos);
  // The shim's readable reason (dash calls execve, which the shim hooks).
  EXPECT_NE(r.err.find("cordon: exec of ./dyn_bin refused (not in process.exec_allow)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cordon: exec of ./static_bin refused"), std::string::npos) << r.err;
}

TEST(Landlock, ExecAllowThatLandlockCannotExpressIsRefusedAtStart) {
  SandboxFixture f;
  write_text(f.home() + "/p.json",
             R"({"version": 1, "process": {"exec_allow": ["/usr/bin/py*"]}})");
  RunResult r = f.sh("true", {"--policy", f.home() + "/p.json"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("process.exec_allow[0] \"/usr/bin/py*\""), std::string::npos) << r.err;
}

TEST(Landlock, InTheSandboxWritesGoOnlyWhereTheMountPlanAllows) {
  CORDON_REQUIRE(launcher::landlock_abi() > 0, "the kernel has no Landlock");
  SandboxFixture f;
  f.make_workspace_owned();
  RunResult r = f.sh(
      "echo a > /tmp/a && mv /tmp/a /tmp/b && echo tmp-ok; echo w > ws-file && mkdir d && "
      "mv ws-file d/ && echo ws-ok; echo x > /dev/null && echo null-ok; "
      "echo y > /dev/shm/y && echo shm-ok; echo $HOME > $HOME/h && echo home-ok");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "tmp-ok\nws-ok\nnull-ok\nshm-ok\nhome-ok\n") << r.err;
}

// The second layer on its own: a writable directory that the plan does not list refuses creates,
// writes and renames into it, while the listed one works. Runs the real Landlock syscalls in a
// forked child (restrict_self is one-way).
TEST(Landlock, WritesOutsideThePlannedPathsAreRefusedEvenOnAWritableMount) {
  int abi = launcher::landlock_abi();
  CORDON_REQUIRE(abi > 0, "the kernel has no Landlock");
  TempDir allowed, other;
  write_text(other.path() + "/existing", "old");
  launcher::LandlockPlan plan;
  plan.enabled = true;
  plan.abi = abi;
  plan.write_paths = {allowed.path(), "/dev/null"};
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        !launcher::apply_landlock_in_program(plan).ok()) {
      ::_exit(10);
    }
    int code = 0;
    auto expect_refused = [&](int rc, int bit) {
      if (rc == 0 || errno != EACCES) code |= bit;
    };
    int fd = ::open((allowed.path() + "/new").c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd < 0 || ::write(fd, "x", 1) != 1) code |= 1;
    ::close(fd);
    if (::rename((allowed.path() + "/new").c_str(), (allowed.path() + "/renamed").c_str()) != 0) {
      code |= 2;
    }
    int nul = ::open("/dev/null", O_WRONLY);
    if (nul < 0) code |= 4;
    ::close(nul);
    int bad = ::open((other.path() + "/new").c_str(), O_WRONLY | O_CREAT, 0644);
    expect_refused(bad < 0 ? -1 : 0, 8);
    bad = ::open((other.path() + "/existing").c_str(), O_WRONLY | O_TRUNC);
    expect_refused(bad < 0 ? -1 : 0, 16);
    expect_refused(::mkdir((other.path() + "/dir").c_str(), 0755), 32);
    expect_refused(::unlink((other.path() + "/existing").c_str()), 64);
    expect_refused(
        ::rename((allowed.path() + "/renamed").c_str(), (other.path() + "/moved").c_str()), 128);
    // Reading is not Landlock's business here: the mount plan governs it.
    int rd = ::open((other.path() + "/existing").c_str(), O_RDONLY);
    if (rd < 0) code |= 4;
    ::_exit(code);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "failed checks bitmask " << WEXITSTATUS(st);
  EXPECT_EQ(read_text(other.path() + "/existing"), "old");
  struct stat sb {};
  EXPECT_NE(::stat((other.path() + "/new").c_str(), &sb), 0);
}

}  // namespace
}  // namespace cordon::testing
