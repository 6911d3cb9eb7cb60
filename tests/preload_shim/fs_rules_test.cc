// File rules in the shim (--no-namespaces): filesystem.deny/deny_write/protect and the read-only
// workspace decided on hooked path calls however the path is spelled, refusals recorded as
// fs.refused with the process's identity, and the stated limit: a static binary is not stopped.
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) != nullptr ? std::string(buf) : p;
}

void put(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// A workspace with a secret, an allowed file, a write-protected one and ways to reach the secret.
class FsRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ws_ = real(ws_dir_.path());
    outside_ = real(outside_dir_.path());
    put(ws_ + "/.env", "SECRET=1\n");
    put(ws_ + "/ok.txt", "hello\n");
    put(ws_ + "/locked.txt", "locked\n");
    put(ws_ + "/run.secret", "#!/bin/sh\necho ran\n", 0755);
    put(outside_ + "/host-secret", "host\n");
    ASSERT_EQ(::mkdir((ws_ + "/sub").c_str(), 0755), 0);
    ASSERT_EQ(::symlink(".env", (ws_ + "/link-env").c_str()), 0);
    ASSERT_EQ(::symlink("../.env", (ws_ + "/sub/up").c_str()), 0);
    ASSERT_EQ(::symlink("new.secret", (ws_ + "/dangling").c_str()), 0);
  }

  std::string rules(const std::string& mode = "rw", const std::string& style = "eacces") const {
    return "CORDON_SHIM_FS_RULES=cordon-fs-rules 1\nworkspace " + ws_ + "\nmode " + mode +
           "\nstyle " + style + "\ndeny r **/.env\ndeny r **/*.secret\ndeny a " + outside_ +
           "/host-secret\ndeny_write r locked.txt\nprotect r .git/hooks/**\n";
  }

  RunResult probe(const std::vector<std::string>& ops, const std::vector<std::string>& env,
                  const std::string& program = "shim_fs_probe") const {
    std::vector<std::string> argv = {shim_program(program)};
    argv.insert(argv.end(), ops.begin(), ops.end());
    RunSpec spec;
    spec.env = env;
    spec.cwd = ws_;
    return run_program(argv, spec);
  }

  std::vector<std::string> shim_env(const std::vector<std::string>& extra) const {
    std::vector<std::string> e = base_env(extra);
    e.push_back("LD_PRELOAD=" + shim_library());
    e.push_back("CORDON_SHIM_SOCK=");  // no collector: the rules alone
    return e;
  }

  TempDir ws_dir_, outside_dir_;
  std::string ws_, outside_;
};

TEST_F(FsRulesTest, DeniedFileIsRefusedHoweverItIsNamed) {
  RunResult r = probe({"read",
                       ".env",
                       "read",
                       ws_ + "/.env",
                       "read",
                       "./sub/../.env",
                       "read",
                       ".//.env",
                       "read",
                       "link-env",
                       "read",
                       "sub/up",
                       "readat",
                       "sub",
                       "../.env",
                       "readat",
                       ws_,
                       ".env",
                       "readat",
                       ".",
                       "sub/../link-env",
                       "read",
                       "/proc/self/cwd/.env",
                       "read",
                       "ok.txt",
                       "read",
                       "missing.txt"},
                      shim_env({rules()}));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out,
            "read 13\nread 13\nread 13\nread 13\nread 13\nread 13\nreadat 13\nreadat 13\n"
            "readat 13\nread 13\nread =hello\nread 2\n")
      << r.err;
  EXPECT_EQ(r.out.find("SECRET"), std::string::npos);
  // One readable line per path and process, naming the rule and the pattern.
  std::string line = "cordon: read of " + ws_ + "/.env refused (filesystem.deny[0]: **/.env)\n";
  size_t first = r.err.find(line);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(line, first + 1), std::string::npos) << r.err;
}

TEST_F(FsRulesTest, WithoutRulesTheSameCallsSucceed) {
  // The control: what the first test refuses is readable without the rules (the test can fail).
  RunResult r =
      probe({"read", ".env", "read", "link-env", "readat", "sub", "../.env"}, shim_env({}));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "read =SECRET=1\nread =SECRET=1\nreadat =SECRET=1\n") << r.err;
}

TEST_F(FsRulesTest, CreatingRenamingAndLinkingIntoDeniedNamesIsRefused) {
  RunResult r = probe({"create",
                       "new.secret",
                       "create",
                       "dangling",
                       "creat",
                       "x.secret",
                       "fopen",
                       "y.secret",
                       "w",
                       "fopen",
                       ".env",
                       "r",
                       "fopen",
                       "ok.txt",
                       "r",
                       "open_creat_ro",
                       "ok.txt",
                       "rename",
                       ".env",
                       "stolen",
                       "link",
                       ".env",
                       "stolen2",
                       "rename",
                       "ok.txt",
                       "z.secret",
                       "unlink",
                       ".env",
                       "symlink",
                       ".env",
                       "innocent",
                       "read",
                       "innocent",
                       "exec",
                       "./run.secret",
                       "read",
                       outside_ + "/host-secret"},
                      shim_env({rules()}));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out,
            "create 13\ncreate 13\ncreat 13\nfopen 13\nfopen 13\nfopen 0\nopen_creat_ro 0\n"
            "rename 13\nlink 13\nrename 13\nunlink 13\nsymlink 0\nread 13\nexec 13\nread 13\n")
      << r.err;
  for (const char* f : {"new.secret", "x.secret", "y.secret", "stolen", "stolen2", "z.secret"}) {
    EXPECT_FALSE(exists(ws_ + "/" + f)) << f;
  }
  EXPECT_TRUE(exists(ws_ + "/.env"));
  EXPECT_TRUE(exists(ws_ + "/ok.txt"));
}

TEST_F(FsRulesTest, DenyWriteAndProtectRefuseWritesButNotReads) {
  RunResult r =
      probe({"read", "locked.txt", "write", "locked.txt", "truncate", "locked.txt", "mkdir", ".git",
             "mkdir", ".git/hooks", "create", ".git/config", "write", "ok.txt"},
            shim_env({rules()}));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "read =locked\nwrite 13\ntruncate 13\nmkdir 0\nmkdir 13\ncreate 0\nwrite 0\n")
      << r.err;
  EXPECT_NE(r.err.find("refused (filesystem.deny_write[0]: locked.txt)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("refused (filesystem.protect[0]: .git/hooks/**)"), std::string::npos)
      << r.err;
}

TEST_F(FsRulesTest, ReadOnlyWorkspaceRefusesWritesWithErofs) {
  RunResult r = probe({"create", "new.txt", "write", "ok.txt", "open_creat_ro", "ok.txt", "read",
                       "ok.txt", "rename", "ok.txt", "moved.txt", "mkdir", "d"},
                      shim_env({rules("ro")}));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "create 30\nwrite 30\nopen_creat_ro 0\nread =hello\nrename 30\nmkdir 30\n")
      << r.err;
  EXPECT_FALSE(exists(ws_ + "/new.txt"));
  EXPECT_NE(r.err.find("refused (filesystem.mode: the workspace is read-only)"), std::string::npos)
      << r.err;
}

TEST_F(FsRulesTest, HideStyleLooksLikeAMissingFile) {
  RunResult r = probe({"read", ".env", "read", "ok.txt"}, shim_env({rules("rw", "hide")}));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "read 2\nread =hello\n") << r.err;
}

TEST_F(FsRulesTest, StaticBinaryIsNotStoppedButWhatItCreatesIsRefusedToDynamicPrograms) {
  // The stated limit of the advisory mode: the shim never runs in a static binary.
  RunResult s = probe({"read", ".env", "create", "later.secret"}, shim_env({rules()}),
                      "shim_fs_probe_static");
  ASSERT_EQ(s.exit_code(), 0) << s.err;
  EXPECT_EQ(s.out, "read =SECRET=1\ncreate 0\n");
  // A file that appeared after start and matches a deny glob is decided at open, not at start.
  ASSERT_TRUE(exists(ws_ + "/later.secret"));
  RunResult d = probe({"read", "later.secret"}, shim_env({rules()}));
  EXPECT_EQ(d.out, "read 13\n") << d.err;
}

TEST_F(FsRulesTest, MalformedRulesAreReportedNotSilentlyIgnored) {
  RunResult r = probe({"read", "ok.txt"}, shim_env({"CORDON_SHIM_FS_RULES=garbage"}));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "read =hello\n");
  EXPECT_NE(r.err.find("CORDON_SHIM_FS_RULES is malformed"), std::string::npos) << r.err;
}

TEST_F(FsRulesTest, RefusalsAreFsRefusedEventsWithTheProcessIdentity) {
  ShimSession session;
  std::vector<std::string> env = session.env({rules()});
  RunResult r = probe({"read", "link-env", "rename", "ok.txt", "z.secret"}, env);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "read 13\nrename 13\n") << r.err;
  auto evs = of_kind(session.events(), "fs.refused");
  ASSERT_EQ(evs.size(), 2u);
  const auto& e = evs[0];
  EXPECT_EQ(e.value("source", ""), "shim");
  EXPECT_EQ(e.value("decision", ""), "deny");
  EXPECT_EQ(e.value("rule", ""), "filesystem.deny[0]");
  EXPECT_EQ(e.value("path", ""), ".env");
  EXPECT_EQ(e.value("host_path", ""), ws_ + "/.env");
  EXPECT_EQ(e.value("requested", ""), "link-env");
  EXPECT_EQ(e.value("op", ""), "read");
  EXPECT_EQ(e.value("via", ""), "open");
  EXPECT_EQ(e.value("errno", 0), 13);
  EXPECT_EQ(e.value("exe", ""), shim_program("shim_fs_probe"));
  EXPECT_EQ(e["argv"], nlohmann::json::array({shim_program("shim_fs_probe"), "read", "link-env",
                                              "rename", "ok.txt", "z.secret"}));
  EXPECT_TRUE(e.contains("pid"));
  EXPECT_TRUE(e.contains("cred"));
  const auto& m = evs[1];
  EXPECT_EQ(m.value("rule", ""), "filesystem.deny[1]");
  EXPECT_EQ(m.value("path", ""), "z.secret");
  EXPECT_EQ(m.value("op", ""), "rename");
  EXPECT_EQ(m.value("via", ""), "rename");
}

}  // namespace
}  // namespace cordon::testing
