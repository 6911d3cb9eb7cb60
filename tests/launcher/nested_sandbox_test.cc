// process.nested_sandbox: an agent's own bubblewrap sandbox works inside cordon with it on, and
// with it off (the default) the refused user namespace shows in the record and the summary.
// `policy check` refuses what `run` would refuse (process.seccomp.allow: ["unshare"]).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

// A minimal bubblewrap sandbox, as agents' tool runners make one: new user, mount, pid, net,
// ipc and uts namespaces and a root of its own.
const std::vector<std::string> kBwrap = {"bwrap",
                                         "--ro-bind",
                                         "/usr",
                                         "/usr",
                                         "--symlink",
                                         "usr/bin",
                                         "/bin",
                                         "--symlink",
                                         "usr/lib",
                                         "/lib",
                                         "--symlink",
                                         "usr/lib64",
                                         "/lib64",
                                         "--proc",
                                         "/proc",
                                         "--dev",
                                         "/dev",
                                         "--tmpfs",
                                         "/tmp",
                                         "--unshare-all",
                                         "--die-with-parent",
                                         "--",
                                         "/bin/sh",
                                         "-c",
                                         "echo inner-sandbox pid $$; touch /tmp/x && echo wrote"};

bool have_bwrap() { return ::access("/usr/bin/bwrap", X_OK) == 0; }

TEST(NestedSandbox, BubblewrapWorksInsideWhenAllowed) {
  CORDON_REQUIRE(have_bwrap(), "bubblewrap (/usr/bin/bwrap)");
  SandboxFixture f;
  write_text(f.home() + "/p.json", R"({"process": {"nested_sandbox": true}})");
  std::vector<std::string> flags = {"-q", "--mode", "ro", "--policy", f.home() + "/p.json"};
  auto r = f.run(flags, kBwrap);
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_NE(r.out.find("inner-sandbox pid "), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("wrote\n"), std::string::npos) << r.out;
  // Still cordon's sandbox around it: the rest of the filter holds (a keyring call, say).
  auto k = f.run(flags, {"python3", "-c",
                         "import ctypes, os\n"
                         "libc = ctypes.CDLL(None, use_errno=True)\n"
                         "r = libc.syscall(250, 0, 0, 0, 0, 0)\n"  // keyctl
                         "print('keyctl', r, os.strerror(ctypes.get_errno()))\n"});
  EXPECT_NE(k.out.find("keyctl -1 Operation not permitted"), std::string::npos) << k.out << k.err;
}

TEST(NestedSandbox, RefusedByDefaultAndTheRefusalIsRecorded) {
  CORDON_REQUIRE(have_bwrap(), "bubblewrap (/usr/bin/bwrap)");
  SandboxFixture f;
  auto r = f.run({"--mode", "ro"}, kBwrap);
  EXPECT_NE(r.exit_code(), 0) << r.out;
  EXPECT_EQ(r.out.find("inner-sandbox"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("bwrap:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("to create a user namespace"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("process.nested_sandbox: true allows it"), std::string::npos) << r.err;
  auto log = run_program({cordon_bin(), "log", "last", "--json"}, {.env = f.env()});
  EXPECT_NE(log.out.find("\"kind\":\"proc.refused\""), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("CLONE_NEWUSER"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("\"exe\":\"/usr/bin/bwrap\""), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("\"rule\":\"process.nested_sandbox\""), std::string::npos) << log.out;
}

TEST(NestedSandbox, ARawUnshareIsRefusedWithEpermAndRecordedWithItsProgram) {
  SandboxFixture f;
  auto r = f.run({"-q", "--mode", "ro"},
                 {"python3", "-c",
                  "import ctypes, os\n"
                  "libc = ctypes.CDLL(None, use_errno=True)\n"
                  "for i in range(3):\n"
                  "    if libc.unshare(0x10000000 | 0x00020000) == 0:\n"  // NEWUSER | NEWNS
                  "        print('unshared')\n"
                  "    else:\n"
                  "        print('refused', ctypes.get_errno())\n"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "refused 1\nrefused 1\nrefused 1\n");
  auto log = run_program({cordon_bin(), "log", "last", "--json"}, {.env = f.env()});
  size_t n = 0;
  for (size_t at = 0; (at = log.out.find("\"kind\":\"proc.refused\"", at)) != std::string::npos;
       ++at) {
    ++n;
  }
  EXPECT_EQ(n, 3u) << log.out;
  EXPECT_NE(log.out.find("\"flags\":\"CLONE_NEWUSER|CLONE_NEWNS\""), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("\"syscall\":\"unshare\""), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("python3"), std::string::npos) << log.out;
}

TEST(NestedSandbox, CheckAgreesWithRunAboutLiftingTheFilter) {
  SandboxFixture f;
  write_text(f.home() + "/p.json", R"({"process": {"seccomp": {"allow": ["unshare"]}}})");
  auto check =
      run_program({cordon_bin(), "policy", "check", f.home() + "/p.json"}, {.env = f.env()});
  EXPECT_NE(check.exit_code(), 0);
  EXPECT_NE(check.err.find("process.seccomp.allow[0]: \"unshare\" cannot be allowed"),
            std::string::npos)
      << check.err;
  EXPECT_NE(check.err.find("process.nested_sandbox: true"), std::string::npos) << check.err;
  auto run = f.run({"-q", "--policy", f.home() + "/p.json"}, {"true"});
  EXPECT_EQ(run.exit_code(), 125);
  EXPECT_NE(run.err.find("process.seccomp.allow[0]: \"unshare\" cannot be allowed"),
            std::string::npos)
      << run.err;
  // A name libseccomp does not know: refused by both as well.
  write_text(f.home() + "/q.json", R"({"process": {"seccomp": {"deny": ["no_such_call"]}}})");
  check = run_program({cordon_bin(), "policy", "check", f.home() + "/q.json"}, {.env = f.env()});
  EXPECT_NE(check.exit_code(), 0);
  EXPECT_NE(check.err.find("\"no_such_call\" is not a syscall known to libseccomp"),
            std::string::npos)
      << check.err;
  run = f.run({"-q", "--policy", f.home() + "/q.json"}, {"true"});
  EXPECT_EQ(run.exit_code(), 125);
  // And the explanation states the risk.
  write_text(f.home() + "/n.json", R"({"process": {"nested_sandbox": true}})");
  auto explain =
      run_program({cordon_bin(), "policy", "explain", f.home() + "/n.json"}, {.env = f.env()});
  EXPECT_NE(explain.out.find("RISK: a new user namespace hands the program every capability"),
            std::string::npos)
      << explain.out;
}

}  // namespace
}  // namespace cordon::testing
