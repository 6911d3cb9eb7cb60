// Path policy inside the workspace: denied, hidden and protected paths, for files that exist and
// files created later, and renames/links into or out of them; each refusal an fs.refused event.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

std::vector<nlohmann::json> events_of(const MountedFs& m, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::istringstream in(m.events());
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.value("kind", "") == kind) {
      out.push_back(j);
    }
  }
  return out;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  while (d != nullptr && (errno = 0, true)) {
    dirent* e = ::readdir(d);
    if (e == nullptr) break;
    out.push_back(e->d_name);
  }
  if (d) ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CowFsPolicy, DeniedFilesUnreadableIncludingOnesCreatedLater) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": ["**/.env", "secrets/**"], "protect": []}})");
  write_file(m.lower(".env"), "TOKEN=hunter2");
  ::mkdir(m.lower("app").c_str(), 0755);
  write_file(m.lower("app/.env"), "TOKEN=nested");
  ::mkdir(m.lower("secrets").c_str(), 0755);
  write_file(m.lower("secrets/key"), "k");
  write_file(m.lower("ok.txt"), "fine");
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(read_file(m.mnt("ok.txt")), "fine");
  EXPECT_LT(::open(m.mnt(".env").c_str(), O_RDONLY), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_LT(::open(m.mnt("app/.env").c_str(), O_RDONLY), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_LT(::open(m.mnt("secrets/key").c_str(), O_RDONLY), 0);
  // Created later, in a new directory: still covered (decided at each lookup/create).
  ASSERT_EQ(::mkdir(m.mnt("newdir").c_str(), 0755), 0);
  EXPECT_LT(::open(m.mnt("newdir/.env").c_str(), O_CREAT | O_WRONLY, 0600), 0);
  EXPECT_EQ(errno, EACCES);
  // Renaming into or out of a denied name, linking to one: refused.
  write_file(m.mnt("plain"), "p");
  EXPECT_NE(::rename(m.mnt("plain").c_str(), m.mnt("newdir/.env").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_NE(::rename(m.mnt(".env").c_str(), m.mnt("x").c_str()), 0);
  EXPECT_NE(::link(m.mnt("plain").c_str(), m.mnt(".env").c_str()), 0);
  EXPECT_NE(::symlink("plain", m.mnt(".env").c_str()), 0);
  // Nothing leaked into the upper layer, lower untouched.
  EXPECT_NE(::access(m.upper("newdir/.env").c_str(), F_OK), 0);
  EXPECT_EQ(read_file(m.lower(".env")), "TOKEN=hunter2");
  // Listed (EACCES style), but stat refuses.
  auto names = names_in(m.mnt());
  EXPECT_NE(std::find(names.begin(), names.end(), ".env"), names.end());
  auto ev = events_of(m, "fs.refused");
  ASSERT_FALSE(ev.empty());
  bool saw = false;
  for (auto& e : ev) {
    EXPECT_EQ(e["decision"], "deny");
    EXPECT_TRUE(e.contains("rule"));
    // The kernel looks the name up before it creates: the refusal comes at lookup.
    if (e["path"] == "newdir/.env" && (e["op"] == "create" || e["op"] == "lookup")) {
      saw = true;
      EXPECT_EQ(e["pid"].get<int>(), ::getpid());
      EXPECT_NE(e.value("exe", "").find("fusefs_test"), std::string::npos) << e.dump();
      EXPECT_EQ(e["rule"], "filesystem.deny[0]");
      EXPECT_EQ(e["source"], "fusefs");
    }
  }
  EXPECT_TRUE(saw) << m.events();
}

TEST(CowFsPolicy, HideStyleHidesFromReaddirAndLookup) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": ["**/*.pem"], "deny_style": "hide", "protect": []}})");
  write_file(m.lower("server.pem"), "-----BEGIN");
  write_file(m.lower("readme"), "r");
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(names_in(m.mnt()), (std::vector<std::string>{".", "..", "readme"}));
  struct stat st;
  EXPECT_NE(::stat(m.mnt("server.pem").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
  // Creating one is refused too (looks like a permission problem, not success).
  EXPECT_LT(::open(m.mnt("new.pem").c_str(), O_CREAT | O_WRONLY, 0600), 0);
  EXPECT_EQ(errno, EACCES);
  auto r = cordon::testing::run_program({"ls", "-la", m.mnt()});
  EXPECT_EQ(r.out.find("pem"), std::string::npos) << r.out;
}

TEST(CowFsPolicy, ProtectedPathsReadableButNotWritable) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": [], "protect": [".git/hooks/**", "**/.envrc"],
                  "deny_write": ["vendor/**"]}})");
  ::mkdir(m.lower(".git").c_str(), 0755);
  ::mkdir(m.lower(".git/hooks").c_str(), 0755);
  write_file(m.lower(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n");
  ::mkdir(m.lower("vendor").c_str(), 0755);
  write_file(m.lower("vendor/lib.c"), "int x;");
  write_file(m.lower("code.c"), "int y;");
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(read_file(m.mnt(".git/hooks/pre-commit")), "#!/bin/sh\nexit 0\n");
  EXPECT_LT(::open(m.mnt(".git/hooks/pre-commit").c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_LT(::open(m.mnt(".git/hooks/post-checkout").c_str(), O_CREAT | O_WRONLY, 0755), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_NE(::unlink(m.mnt(".git/hooks/pre-commit").c_str()), 0);
  EXPECT_NE(::chmod(m.mnt(".git/hooks/pre-commit").c_str(), 0777), 0);
  EXPECT_NE(::truncate(m.mnt(".git/hooks/pre-commit").c_str(), 0), 0);
  EXPECT_NE(::rename(m.mnt("code.c").c_str(), m.mnt(".git/hooks/pre-commit").c_str()), 0);
  EXPECT_NE(::rename(m.mnt(".git/hooks/pre-commit").c_str(), m.mnt("hook").c_str()), 0);
  // A hard link would be a second, writable name for the same bytes.
  EXPECT_NE(::link(m.mnt(".git/hooks/pre-commit").c_str(), m.mnt("alias").c_str()), 0);
  int fd = ::open(m.mnt("sub.envrc").c_str(), O_CREAT | O_WRONLY, 0600);  // not a match
  EXPECT_GE(fd, 0);
  ::close(fd);
  ::mkdir(m.mnt("proj").c_str(), 0755);
  EXPECT_LT(::open(m.mnt("proj/.envrc").c_str(), O_CREAT | O_WRONLY, 0600), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_LT(::open(m.mnt("vendor/lib.c").c_str(), O_RDWR), 0);
  EXPECT_EQ(read_file(m.mnt("vendor/lib.c")), "int x;");
  write_file(m.mnt("code.c"), "int z;");
  EXPECT_EQ(read_file(m.mnt("code.c")), "int z;");
  EXPECT_EQ(read_file(m.lower(".git/hooks/pre-commit")), "#!/bin/sh\nexit 0\n");
  auto ev = events_of(m, "fs.refused");
  EXPECT_GE(ev.size(), 8u);
}

// Protection holds however a path comes to exist (default protect list): a directory prepared
// aside and renamed into place, a rename exchange, a symlink or file at a protected directory
// name (a `.git` gitdir pointer), a hard link, at any depth.
TEST(CowFsPolicy, ProtectedPathsCannotBePreparedAsideAndMovedIn) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": []}})");
  write_file(m.lower("plain"), "p");
  ASSERT_EQ(m.start(), "");
  auto mk = [&](const std::string& rel) { return ::mkdir(m.mnt(rel).c_str(), 0755); };
  // `git init -q g && mv g/.git gitdir`, a hook and a config, then `mv gitdir .git`.
  ASSERT_EQ(mk("gitdir"), 0);
  ASSERT_EQ(mk("gitdir/hooks"), 0);
  ASSERT_EQ(mk("gitdir/objects"), 0);
  write_file(m.mnt("gitdir/hooks/pre-commit"), "#!/bin/sh\necho pwned\n");
  write_file(m.mnt("gitdir/config"), "[core]\n\tfsmonitor = echo pwned\n");
  write_file(m.mnt("gitdir/HEAD"), "ref: refs/heads/main\n");
  EXPECT_NE(::rename(m.mnt("gitdir").c_str(), m.mnt(".git").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_NE(::access(m.mnt(".git").c_str(), F_OK), 0);
  // Deeper, and by exchange with an existing directory.
  ASSERT_EQ(mk("sub"), 0);
  EXPECT_NE(::rename(m.mnt("gitdir").c_str(), m.mnt("sub/.git").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  ASSERT_EQ(mk("sub/.git"), 0);  // an empty .git directory is fine
  EXPECT_NE(::renameat2(AT_FDCWD, m.mnt("gitdir").c_str(), AT_FDCWD, m.mnt("sub/.git").c_str(),
                        RENAME_EXCHANGE),
            0);
  EXPECT_EQ(errno, EACCES);
  // `mv gh .github` with workflows inside; a single file moved to a protected name.
  ASSERT_EQ(mk("gh"), 0);
  ASSERT_EQ(mk("gh/workflows"), 0);
  write_file(m.mnt("gh/workflows/a.yml"), "on: push\n");
  EXPECT_NE(::rename(m.mnt("gh").c_str(), m.mnt(".github").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  ASSERT_EQ(mk("p"), 0);
  EXPECT_NE(mk("p/.vscode"), 0) << "the directory itself is covered by **/.vscode/**";
  EXPECT_NE(::rename(m.mnt("plain").c_str(), m.mnt("sub/.git/config").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  // A file or symlink where a protected directory would be: git or CI would read through it.
  int ok = ::open(m.mnt("sub/.gitx").c_str(), O_CREAT | O_WRONLY, 0644);  // a near miss is fine
  EXPECT_GE(ok, 0);
  ::close(ok);
  EXPECT_LT(::open(m.mnt("p/.git").c_str(), O_CREAT | O_WRONLY, 0644), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_NE(::symlink("gitdir", m.mnt("p/.git").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_NE(::symlink("gh", m.mnt(".github").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  EXPECT_NE(::link(m.mnt("plain").c_str(), m.mnt("p/.git").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  write_file(m.mnt("gitfile"), "gitdir: ../gitdir\n");
  EXPECT_NE(::rename(m.mnt("gitfile").c_str(), m.mnt(".git").c_str()), 0);
  EXPECT_EQ(errno, EACCES);
  // Nested repositories: config and hooks refused, the rest of .git is the agent's to write.
  EXPECT_LT(::open(m.mnt("sub/.git/config").c_str(), O_CREAT | O_WRONLY, 0644), 0);
  EXPECT_EQ(errno, EACCES);
  ASSERT_EQ(mk("sub/.git/objects"), 0);
  write_file(m.mnt("sub/.git/HEAD"), "ref: refs/heads/main\n");
  EXPECT_EQ(read_file(m.mnt("sub/.git/HEAD")), "ref: refs/heads/main\n");
  // What carries nothing protected still moves.
  ASSERT_EQ(mk("objs"), 0);
  ASSERT_EQ(mk("objs/pack"), 0);
  write_file(m.mnt("objs/pack/x"), "x");
  EXPECT_EQ(::rename(m.mnt("objs").c_str(), m.mnt("sub/.git/objects2").c_str()), 0);
  EXPECT_EQ(::rename(m.mnt("gitdir/objects").c_str(), m.mnt("moved-objects").c_str()), 0);
  // Nothing protected reached the upper layer.
  for (const char* p :
       {".git", ".github", "sub/.git/config", "sub/.git/hooks", "p/.git", "p/.vscode"}) {
    EXPECT_NE(::access(m.upper(p).c_str(), F_OK), 0) << p;
  }
  // Each refusal is an event naming the path that would have been protected.
  bool hook = false, workflow = false;
  for (auto& e : events_of(m, "fs.refused")) {
    if (e.value("op", "") != "rename") continue;
    hook = hook || e.value("path", "").rfind(".git/", 0) == 0;
    // .github is protected whole (its actions run in CI as its workflows do): the rename of
    // the prepared directory is refused at .github itself.
    workflow = workflow || e.value("path", "") == ".github" ||
               e.value("path", "") == ".github/workflows" ||
               e.value("path", "") == ".github/workflows/a.yml";
    EXPECT_EQ(e.value("rule", "").rfind("filesystem.protect[", 0), 0u) << e.dump();
  }
  EXPECT_TRUE(hook) << m.events();
  EXPECT_TRUE(workflow) << m.events();
}

// The subtree of a renamed directory is checked entry by entry up to a bound; beyond it the
// rename is refused with EXDEV (mv(1) then copies, every copy checked as it is created).
TEST(CowFsPolicy, RenamingAHugeTreeFallsBackToCopy) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": [], "quota": {"inodes": 0}}})");
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::mkdir(m.mnt("big").c_str(), 0755), 0);
  // Built in the upper layer directly (the daemon reads it on lookup): fast, and the same tree.
  constexpr size_t kDirs = 101, kFiles = 200;  // 101 * (1 + 200) = 20301 entries > 20000
  for (size_t d = 0; d < kDirs; ++d) {
    std::string dir = m.upper("big/d" + std::to_string(d));
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    for (size_t f = 0; f < kFiles; ++f) {
      int fd = ::open((dir + "/f" + std::to_string(f)).c_str(), O_CREAT | O_WRONLY, 0644);
      ASSERT_GE(fd, 0);
      ::close(fd);
    }
  }
  EXPECT_NE(::rename(m.mnt("big").c_str(), m.mnt("big2").c_str()), 0);
  EXPECT_EQ(errno, EXDEV);
  // Under the bound it moves.
  ASSERT_EQ(::unlink(m.upper("big/d0/f0").c_str()), 0);
  ASSERT_EQ(::system(("rm -rf " + m.upper("big/d1") + " " + m.upper("big/d2")).c_str()), 0);
  EXPECT_EQ(::rename(m.mnt("big").c_str(), m.mnt("big2").c_str()), 0) << std::strerror(errno);
}

}  // namespace
}  // namespace cordon::fusefs::testing
