// A program installed where the sandbox does not look (/opt, an npm prefix, a home directory):
// `command not found` (127) says the host has it and names the --read that shows it, and --read
// then makes it run. The same for a script whose "#!" interpreter lives there.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

TEST(HostProgram, NotFoundSaysWhereTheHostHasItAndWhichFlagShowsIt) {
  SandboxFixture f;
  TempDir opt;  // under $CORDON_TEST_TMP: outside everything the sandbox is shown
  std::string prefix = opt.path() + "/agent";
  run_program({"mkdir", "-p", prefix + "/bin"});
  write_text(prefix + "/bin/agent-cli", "#!/bin/sh\necho agent ran\n", 0755);
  f.env()[0] = "PATH=" + prefix + "/bin:/usr/bin:/bin";

  auto r = f.run({"-q", "--mode", "ro"}, {"agent-cli"});
  EXPECT_EQ(r.exit_code(), 127) << r.err;
  EXPECT_NE(r.err.find("cordon: agent-cli: command not found in the sandbox; the host has it at " +
                       prefix +
                       "/bin/agent-cli, which the sandbox does not see; show it with "
                       "--read " +
                       prefix + " (filesystem.read)"),
            std::string::npos)
      << r.err;

  auto ok = f.run({"-q", "--mode", "ro", "--read", prefix}, {"agent-cli"});
  EXPECT_EQ(ok.exit_code(), 0) << ok.err;
  EXPECT_EQ(ok.out, "agent ran\n");

  // Not on the host either: the plain message.
  auto nf = f.run({"-q", "--mode", "ro"}, {"no-such-program-x7"});
  EXPECT_EQ(nf.exit_code(), 127);
  EXPECT_NE(nf.err.find("cordon: no-such-program-x7: command not found\n"), std::string::npos)
      << nf.err;
}

TEST(HostProgram, AMissingInterpreterIsNamedToo) {
  SandboxFixture f;
  TempDir opt;
  std::string node = opt.path() + "/node/bin/fake-node";
  run_program({"mkdir", "-p", opt.path() + "/node/bin"});
  write_text(node, "#!/bin/sh\necho interpreted \"$1\"\n", 0755);
  write_text(f.ws() + "/tool.js", "#!" + node + "\n", 0755);
  auto r = f.run({"-q", "--mode", "ro"}, {"./tool.js"});
  EXPECT_EQ(r.exit_code(), 127) << r.err;
  EXPECT_NE(r.err.find("its interpreter is " + node +
                       " on the host, which the sandbox does not "
                       "see; show it with --read " +
                       opt.path() + "/node"),
            std::string::npos)
      << r.err;
  auto ok = f.run({"-q", "--mode", "ro", "--read", opt.path() + "/node"}, {"./tool.js"});
  EXPECT_EQ(ok.exit_code(), 0) << ok.err;
  EXPECT_EQ(ok.out, "interpreted ./tool.js\n");
}

TEST(HostProgram, ReadAndWriteFlagsAreValidatedLikeThePolicyFile) {
  SandboxFixture f;
  auto r = f.run({"-q", "--read", "relative/dir"}, {"true"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("cordon: --read: filesystem.read[0]: \"relative/dir\" is relative"),
            std::string::npos)
      << r.err;
  r = f.run({"-q", "--write", "/tmp/*"}, {"true"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("cordon: --write: filesystem.write[0]: \"/tmp/*\" has a glob"),
            std::string::npos)
      << r.err;
}

TEST(HostProgram, WriteFlagGrantsAHostDirectoryReadWrite) {
  SandboxFixture f;
  uid_t uid = f.make_workspace_owned();
  TempDir out;
  if (::geteuid() == 0) {
    (void)!::chown(out.path().c_str(), uid, uid);
  }
  write_text(f.home() + "/p.json", R"({"filesystem": {"deny": [], "protect": []}})");
  auto r = f.run({"-q", "--mode", "ro", "--policy", f.home() + "/p.json", "--write", out.path()},
                 {"sh", "-c", "echo made > '" + out.path() + "/result.txt'"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(read_text(out.path() + "/result.txt"), "made\n");
}

}  // namespace
}  // namespace cordon::testing
