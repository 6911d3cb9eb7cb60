// Path policy inside the workspace: denied, hidden and protected paths, for files that exist and
// files created later, and renames/links into or out of them; each refusal an fs.refused event.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace
}  // namespace cordon::fusefs::testing
