// Landlock: process.exec_allow holds against static and dynamic binaries, allowed programs run,
// and the write layer refuses writes outside the planned places even on a writable mount.
#include "launcher/sandbox/landlock.h"

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

// Landlock checks EXECUTE at execve, not at mmap(PROT_EXEC): `ld.so ./prog` would run a binary the
// program wrote. With exec_allow in force, every writable mount exec_allow does not reach is
// noexec, so the loader's mapping fails too. Interpreters still read scripts (noexec does not
// govern read(2)): that stays possible, and is documented as the limit.
TEST(Landlock, LoaderCannotRunAProgramWrittenWhereExecAllowDoesNotReach) {
  CORDON_REQUIRE(launcher::landlock_abi() > 0, "the kernel has no Landlock");
  SandboxFixture f;
  f.make_workspace_owned();
  RunResult cp = run_program({"cp", "/usr/bin/true", f.ws() + "/true"});
  ASSERT_EQ(cp.exit_code(), 0) << cp.err;
  write_text(f.ws() + "/script.sh", "echo script-ran\n");
  RunResult file = run_program({"file", "-L", f.ws() + "/true"});
  ASSERT_NE(file.out.find("dynamically linked"), std::string::npos) << file.out;
  // Only the shell and cp: /usr/bin/true itself is not listed either.
  write_text(f.home() + "/p.json",
             R"({"version": 1, "process": {"exec_allow": ["/usr/bin/dash", "/usr/bin/cp"]}})");
  const std::string probe =
      "./true; echo direct=$?; /lib64/ld-linux-x86-64.so.2 ./true; echo loader=$?; "
      "sh ./script.sh; echo script=$?; "
      "cp /usr/bin/true \"$HOME/t\" && /lib64/ld-linux-x86-64.so.2 \"$HOME/t\"; echo home=$?; "
      "cp /usr/bin/true /dev/shm/t && /lib64/ld-linux-x86-64.so.2 /dev/shm/t; echo shm=$?; "
      "cp /usr/bin/true /tmp/t && /lib64/ld-linux-x86-64.so.2 /tmp/t; echo tmp=$?; "
      "/usr/bin/true; echo system-direct=$?; "
      "/lib64/ld-linux-x86-64.so.2 /usr/bin/true; echo system-loader=$?";
  // rw: the workspace is a read-write bind.
  // The last line is the documented limit: an installed program on a read-only (exec) system
  // mount that exec_allow does not list still runs through the loader.
  RunResult rw = f.sh(probe, {"--policy", f.home() + "/p.json"});
  ASSERT_EQ(rw.exit_code(), 0) << rw.err;
  EXPECT_EQ(rw.out,
            "direct=126\nloader=127\nscript-ran\nscript=0\nhome=127\nshm=127\ntmp=127\n"
            "system-direct=126\nsystem-loader=0\n")
      << rw.err;
  EXPECT_NE(rw.err.find("failed to map segment"), std::string::npos) << rw.err;
  // cow: the workspace is cordon-fs's view (or the overlay fallback); a binary written there is
  // refused the same way.
  RunResult cow = f.run({"-q", "--mode", "cow", "--policy", f.home() + "/p.json"},
                        {"/bin/sh", "-c",
                         "/lib64/ld-linux-x86-64.so.2 ./true; echo loader=$?; cp ./true ./t2 && "
                         "/lib64/ld-linux-x86-64.so.2 ./t2; echo written=$?"});
  ASSERT_EQ(cow.exit_code(), 0) << cow.err;
  EXPECT_EQ(cow.out, "loader=127\nwritten=127\n") << cow.err;
  // The control: an exec_allow entry in the workspace keeps that mount exec (the policy asked for
  // it), so both ways of running the program work there, and the other writable mounts stay
  // noexec.
  write_text(
      f.home() + "/p2.json",
      R"({"version": 1, "process": {"exec_allow": ["/usr/bin/dash", "/usr/bin/cp", "true"]}})");
  RunResult listed = f.sh(
      "./true; echo direct=$?; /lib64/ld-linux-x86-64.so.2 ./true; echo loader=$?; "
      "cp /usr/bin/true /dev/shm/t && /lib64/ld-linux-x86-64.so.2 /dev/shm/t; echo shm=$?",
      {"--policy", f.home() + "/p2.json"});
  ASSERT_EQ(listed.exit_code(), 0) << listed.err;
  EXPECT_EQ(listed.out, "direct=0\nloader=0\nshm=127\n") << listed.err;
}

// Without exec_allow nothing is restricted, so no mount is made noexec beyond /tmp's default.
TEST(Landlock, WithoutExecAllowWritableMountsStayExec) {
  SandboxFixture f;
  f.make_workspace_owned();
  RunResult cp = run_program({"cp", "/usr/bin/true", f.ws() + "/true"});
  ASSERT_EQ(cp.exit_code(), 0) << cp.err;
  RunResult r = f.sh(
      "./true; echo direct=$?; /lib64/ld-linux-x86-64.so.2 ./true; echo loader=$?; "
      "cp /usr/bin/true /dev/shm/t && /dev/shm/t; echo shm=$?");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "direct=0\nloader=0\nshm=0\n") << r.err;
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
