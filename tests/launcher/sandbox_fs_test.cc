// The composed root, crossed from inside: $HOME invisible, system read-only, secrets masked,
// /tmp noexec and bounded, the workspace at its own path per mode, deny rules applied.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

TEST(SandboxFs, RealHomeIsInvisible) {
  SandboxFixture f;
  // As root: a workspace owner the user database does not know, whose "~" is the invoking
  // user's, so $HOME inside is the fake home (identity_test.cc covers real users' homes).
  f.make_workspace_owned();
  write_text(f.home() + "/canary.txt", "CANARY-6b1f\n");
  ::mkdir((f.home() + "/.ssh").c_str(), 0700);
  write_text(f.home() + "/.ssh/id_ed25519", "PRIVATE-KEY-6b1f\n");
  auto r = f.sh(
      "echo home=$HOME; ls -A \"$HOME\"; cat \"$HOME/canary.txt\"; "
      "cat \"$HOME/.ssh/id_ed25519\"; echo done");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find("home=" + f.home()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CANARY"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("PRIVATE-KEY"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("canary.txt"), std::string::npos)
      << "home listing shows host files: " << r.out;
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("done"), std::string::npos);
}

TEST(SandboxFs, HomeIsAnEmptyWritableTmpfs) {
  SandboxFixture f;
  auto r = f.sh("echo x > \"$HOME/new\" && cat \"$HOME/new\" && stat -f -c %T \"$HOME\"");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "x\ntmpfs\n");
  EXPECT_NE(::access((f.home() + "/new").c_str(), F_OK), 0) << "write reached the real home";
}

TEST(SandboxFs, SystemDirectoriesAreReadOnly) {
  SandboxFixture f;
  auto r = f.sh(
      "touch /usr/cordon-x; touch /etc/cordon-x; touch /cordon-x; mkdir /bin/x; "
      "touch /proc/sys/kernel/x; echo end");
  EXPECT_EQ(r.exit_code(), 0);
  // Every one of them fails with EROFS (not merely EACCES): the mounts themselves are read-only.
  size_t n = 0;
  for (size_t pos = 0; (pos = r.err.find("Read-only file system", pos)) != std::string::npos;
       ++pos) {
    ++n;
  }
  EXPECT_GE(n, 4u) << r.err;
  EXPECT_NE(::access("/usr/cordon-x", F_OK), 0);
  EXPECT_NE(::access("/etc/cordon-x", F_OK), 0);
}

TEST(SandboxFs, EtcSecretsMaskedAndNetworkFilesReplaced) {
  SandboxFixture f;
  auto r = f.sh(
      "stat -c %s /etc/shadow; cat /etc/hosts; cat /etc/resolv.conf; "
      "grep -c -v '^/run/cordon/libcordon_preload.so$' /etc/ld.so.preload; "
      "ls -A /etc/sudoers.d 2>/dev/null | wc -l; "
      "test -e /etc/passwd && echo passwd-ok");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  struct stat st {};
  if (::stat("/etc/shadow", &st) == 0) {
    EXPECT_GT(st.st_size, 0);  // the host's is real...
  }
  EXPECT_EQ(r.out.rfind("0\n", 0), 0u) << "...the sandbox's is empty: " << r.out;
  // ld.so.preload names only the preload shim (the "0" after the resolv.conf line below).
  EXPECT_NE(r.out.find("127.0.0.1\tlocalhost cordon"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("::1"), std::string::npos);
  EXPECT_NE(r.out.find("nameserver 127.0.0.1\n"), std::string::npos);
  EXPECT_NE(r.out.find("\n0\n0\npasswd-ok\n"), std::string::npos) << r.out;
}

TEST(SandboxFs, OnlyTheComposedRootIsThere) {
  SandboxFixture f;
  auto r = f.sh("ls -A /; ls /dev; ls /sys 2>&1 | head -1; echo run:$(ls -A /run)");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  for (const char* host_only : {"\nhome\n", "\nvar\n", "\nsrv\n", "\nopt\n", "\nmnt\n"}) {
    // A workspace or home under such a directory would create it; the tests use /tmp.
    if (f.ws().rfind("/tmp/", 0) == 0 && f.home().rfind("/tmp/", 0) == 0) {
      EXPECT_EQ(("\n" + r.out).find(host_only), std::string::npos) << host_only << " in " << r.out;
    }
  }
  for (const char* dev : {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm",
                          "fd", "stdin", "stdout", "stderr"}) {
    EXPECT_NE(r.out.find(std::string("\n") + dev + "\n"), std::string::npos) << dev;
  }
  // /run holds only cordon's own /run/cordon (the preload shim's library and socket).
  EXPECT_NE(r.out.find("\nrun:cordon\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nsda"), std::string::npos);
  EXPECT_EQ(r.out.find("\nvda"), std::string::npos) << "a host disk device is visible";
}

TEST(SandboxFs, TmpIsNoexecAndSizeLimited) {
  SandboxFixture f;
  write_text(f.home() + "/p.json", R"({"version": 1, "filesystem": {"tmp": "2M"}})");
  auto r = f.sh(
      "cp /bin/true /tmp/t && /tmp/t; echo rc=$?; "
      "dd if=/dev/zero of=/tmp/big bs=1M count=4 2>&1 | grep -o 'No space left on device'",
      {"--policy", f.home() + "/p.json"});
  EXPECT_NE(r.out.find("rc=126"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
}

TEST(SandboxFs, WorkspaceAtItsOwnPathAndCwd) {
  SandboxFixture f;
  f.make_workspace_owned();
  write_text(f.ws() + "/hello.txt", "hello\n");
  auto r = f.sh("pwd; cat hello.txt");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, f.ws() + "\nhello\n");
}

TEST(SandboxFs, ReadOnlyModeRefusesWrites) {
  SandboxFixture f;
  f.make_workspace_owned();
  write_text(f.ws() + "/hello.txt", "hello\n");
  auto r = f.run({"-q", "--mode", "ro"},
                 {"/bin/sh", "-c", "cat hello.txt; echo x > hello.txt; touch new; echo end"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello\nend\n");
  EXPECT_NE(r.err.find("Read-only file system"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(f.ws() + "/hello.txt"), "hello\n");
  EXPECT_NE(::access((f.ws() + "/new").c_str(), F_OK), 0);
}

TEST(SandboxFs, ReadWriteModeCreatesFilesOwnedByTheUnprivilegedId) {
  CORDON_REQUIRE(fs_views_here(), "rw mode for this user (cordon-fs views: root, or /dev/fuse)");
  SandboxFixture f;
  uid_t expect = f.make_workspace_owned();
  auto r = f.sh("id -u; id -g; echo data > made-inside");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, std::to_string(expect) + "\n" +
                       std::to_string(::geteuid() == 0 ? expect : ::getegid()) + "\n");
  struct stat st {};
  ASSERT_EQ(::stat((f.ws() + "/made-inside").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, expect);
  EXPECT_NE(st.st_uid, 0u) << "the sandbox wrote as host root";
  EXPECT_EQ(read_text(f.ws() + "/made-inside"), "data\n");
}

TEST(SandboxFs, AsRootTheSandboxIsNeverUidZero) {
  CORDON_REQUIRE_ROOT();
  SandboxFixture f;  // workspace owned by root: cordon falls back to nobody
  auto r = f.sh("id -u; cat /proc/self/uid_map");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "65534");
  EXPECT_EQ(r.out.find(" 0 "), std::string::npos) << "host uid 0 is mapped: " << r.out;
  // Without -q cordon says why, at start and in the summary, since the program cannot write
  // where root's modes keep others out (here: the workspace itself).
  auto said = f.run({"--mode", "rw"}, {"/bin/sh", "-c", "touch made-here"});
  EXPECT_NE(said.exit_code(), 0) << "nobody wrote into a root-owned 0755 workspace";
  const std::string why = "cordon: the program runs as uid 65534 (nobody): as root, cordon never";
  size_t first = said.err.find(why);
  ASSERT_NE(first, std::string::npos) << said.err;
  EXPECT_NE(said.err.find(why, first + 1), std::string::npos) << "not in the summary: " << said.err;
  EXPECT_NE(said.err.find("run cordon as the workspace's owner or through sudo"), std::string::npos)
      << said.err;

  // With sudo's variables, the invoking user's id is used.
  SandboxFixture g;
  g.env().push_back("SUDO_UID=4343");
  g.env().push_back("SUDO_GID=4343");
  auto s = g.sh("id -u; id -g");
  EXPECT_EQ(s.out, "4343\n4343\n") << s.err;
  auto quiet_about_ids = g.run({"--mode", "rw"}, {"/bin/true"});
  EXPECT_EQ(quiet_about_ids.err.find("(nobody)"), std::string::npos) << quiet_about_ids.err;
}

TEST(SandboxFs, DenyPatternsMaskWorkspaceFiles) {
  SandboxFixture f;
  f.make_workspace_owned();
  write_text(f.ws() + "/.env", "SECRET=top\n");
  ::mkdir((f.ws() + "/sub").c_str(), 0755);
  write_text(f.ws() + "/sub/server.pem", "-----BEGIN PRIVATE KEY-----\n");
  write_text(f.ws() + "/sub/ok.txt", "fine\n");
  auto r = f.sh("cat .env; cat sub/server.pem; cat sub/ok.txt; echo x > .env; echo end");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "fine\nend\n") << r.err;
  EXPECT_EQ(read_text(f.ws() + "/.env"), "SECRET=top\n");
}

TEST(SandboxFs, ProtectedFilesAreReadOnlyInRwMode) {
  CORDON_REQUIRE(fs_views_here(), "rw mode for this user (cordon-fs views: root, or /dev/fuse)");
  SandboxFixture f;
  f.make_workspace_owned();
  ::mkdir((f.ws() + "/.git").c_str(), 0755);
  ::mkdir((f.ws() + "/.git/hooks").c_str(), 0755);
  write_text(f.ws() + "/.git/config", "[core]\n");
  write_text(f.ws() + "/.git/hooks/pre-commit", "#!/bin/sh\n", 0755);
  if (::geteuid() == 0) {
    for (const char* p : {"/.git", "/.git/hooks", "/.git/config", "/.git/hooks/pre-commit"}) {
      (void)!::chown((f.ws() + p).c_str(), SandboxFixture::kTestUid, SandboxFixture::kTestUid);
    }
  }
  auto r = f.sh(
      "echo evil >> .git/config; echo evil > .git/hooks/pre-commit; "
      "echo fine > normal.txt; cat .git/config");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(read_text(f.ws() + "/.git/config"), "[core]\n");
  EXPECT_EQ(read_text(f.ws() + "/.git/hooks/pre-commit"), "#!/bin/sh\n");
  EXPECT_EQ(read_text(f.ws() + "/normal.txt"), "fine\n");
}

TEST(SandboxFs, ExtraReadAndWritePathsAppearAtTheirHostPaths) {
  CORDON_REQUIRE(fs_views_here(), "rw mode for this user (cordon-fs views: root, or /dev/fuse)");
  SandboxFixture f;
  TempDir extra_ro, extra_rw;
  write_text(f.home() + "/.gitconfig", "[user]\n");
  write_text(extra_ro.path() + "/data.txt", "ro-data\n");
  ::mkdir((extra_ro.path() + "/private").c_str(), 0755);
  write_text(extra_ro.path() + "/private/key.txt", "hidden\n");
  if (::geteuid() == 0) {
    (void)!::chown(extra_rw.path().c_str(), SandboxFixture::kTestUid, SandboxFixture::kTestUid);
    f.make_workspace_owned();
  }
  write_text(f.home() + "/p.json",
             "{\"version\": 1, \"filesystem\": {\"read\": [\"~/.gitconfig\", \"" + extra_ro.path() +
                 "\"], \"write\": [\"" + extra_rw.path() + "\"], \"deny\": [\"" + extra_ro.path() +
                 "/private\", \"~/missing-ok\"]}}");
  auto r = f.sh("cat ~/.gitconfig " + extra_ro.path() + "/data.txt; ls -A " + extra_ro.path() +
                    "/private; echo w > " + extra_rw.path() + "/out; echo x > " + extra_ro.path() +
                    "/new; echo y >> ~/.gitconfig; echo end",
                {"--policy", f.home() + "/p.json"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "[user]\nro-data\nend\n") << r.err;
  EXPECT_EQ(read_text(extra_rw.path() + "/out"), "w\n");
  EXPECT_NE(::access((extra_ro.path() + "/new").c_str(), F_OK), 0);
  EXPECT_EQ(read_text(f.home() + "/.gitconfig"), "[user]\n");
}

TEST(SandboxFs, CowModeKeepsTheWorkspaceUntouched) {
  SandboxFixture f;
  f.make_workspace_owned();
  auto r = f.run({"-q", "--mode", "cow"}, {"/bin/sh", "-c", "echo x > made; cat made"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "x\n") << r.err;
  EXPECT_NE(::access((f.ws() + "/made").c_str(), F_OK), 0);  // tests/launcher/cow_test.cc: more
}

TEST(SandboxFs, RootAsWorkspaceIsRefused) {
  SandboxFixture f;
  auto r = run_program({cordon_bin(), "run", "--mode", "ro", "--workspace", "/", "--", "/bin/true"},
                       RunSpec{.env = f.env()});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("resolves to \"/\""), std::string::npos) << r.err;
}

TEST(SandboxFs, MissingWorkspaceIsNamed) {
  SandboxFixture f;
  auto r = run_program(
      {cordon_bin(), "run", "--mode", "rw", "--workspace", "/nonexistent/wsp", "--", "/bin/true"},
      RunSpec{.env = f.env()});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("/nonexistent/wsp"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cordon::testing
