// filesystem.xattrs on the copy-on-write view. Off (the default), the view answers the xattr ops
// ENOSYS once and the kernel stops sending them for the mount (counted by the daemon's
// per-opcode request counters): nothing can be set, a workspace file's own xattrs are not shown,
// and commit neither invents xattrs nor drops the host file's own. On, they round-trip and
// commit. A --direct view keeps them whatever the policy says (direct_test.cc).
#include <errno.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fusefs/commit.h"
#include "tests/fusefs/commit_fixture.h"
#include "tests/support/xattr_names.h"

namespace cordon::fusefs::testing {
namespace {

using cordon::testing::xattr_names;

constexpr const char* kXattrsOff = R"({"filesystem": {"deny": [], "protect": []}})";
constexpr const char* kXattrsOn = R"({"filesystem": {"deny": [], "protect": [], "xattrs": true}})";

// errno of an xattr call, 0 when it succeeded.
int err_of(ssize_t rc) { return rc >= 0 ? 0 : errno; }

std::string value_of(const std::string& path, const char* name) {
  char buf[256];
  ssize_t n = ::getxattr(path.c_str(), name, buf, sizeof buf);
  return n < 0 ? "ERROR " + std::to_string(errno) : std::string(buf, static_cast<size_t>(n));
}

// How many requests of `opcode` ("GETXATTR") the daemon has served since it mounted.
uint64_t served(MountedFs& m, const char* opcode) {
  auto status = nlohmann::json::parse(m.control(R"({"op":"status"})"));
  return status.at("requests").value(opcode, uint64_t{0});
}

// A tarball of `files` small files in 10 directories, made in `dir`; returns its path.
std::string make_tarball(const std::string& dir, int files) {
  std::string src = dir + "/src";
  ::mkdir(src.c_str(), 0755);
  for (int i = 0; i < files; i++) {
    std::string d = src + "/d" + std::to_string(i % 10);
    ::mkdir(d.c_str(), 0755);
    write_file(d + "/f" + std::to_string(i), "file " + std::to_string(i) + "\n");
  }
  std::string tar = dir + "/small.tar";
  auto r = cordon::testing::run_program({"tar", "cf", tar, "-C", src, "."});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return tar;
}

// Untars `files` files into a fresh view under `policy`; returns the GETXATTRs it cost.
uint64_t getxattrs_for_untar(const char* policy, int files) {
  MountedFs m(policy);
  std::string tar = make_tarball(m.base(""), files);
  if (std::string e = m.start(); !e.empty()) {
    ADD_FAILURE() << e;
    return 0;
  }
  uint64_t before = served(m, "GETXATTR");
  auto r = cordon::testing::run_program({"tar", "xf", tar, "-C", m.mnt()},
                                        {.deadline = std::chrono::seconds(120)});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  uint64_t after = served(m, "GETXATTR");
  EXPECT_EQ(read_file(m.mnt("d7/f417")), "file 417\n");
  return after - before;
}

TEST(CowFsXattrs, OffByDefaultNoneCanBeSetAndNoneIsShown) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kXattrsOff);
  write_file(m.lower("host.txt"), "host\n");
  ASSERT_EQ(::setxattr(m.lower("host.txt").c_str(), "user.x", "1", 1, 0), 0)
      << "the scratch filesystem takes no user xattrs: " << std::strerror(errno);
  ASSERT_EQ(m.start(), "");
  write_file(m.mnt("new.txt"), "new\n");

  // What a program sees: EOPNOTSUPP from each call, the first (answered by the daemon) and
  // every later one (answered by the kernel alone).
  char buf[256];
  for (int round = 0; round < 2; round++) {
    SCOPED_TRACE(round);
    EXPECT_EQ(err_of(::setxattr(m.mnt("new.txt").c_str(), "user.x", "1", 1, 0)), EOPNOTSUPP);
    EXPECT_EQ(err_of(::getxattr(m.mnt("host.txt").c_str(), "user.x", buf, sizeof buf)), EOPNOTSUPP);
    EXPECT_EQ(err_of(::listxattr(m.mnt("host.txt").c_str(), buf, sizeof buf)), EOPNOTSUPP);
    EXPECT_EQ(err_of(::removexattr(m.mnt("host.txt").c_str(), "user.x")), EOPNOTSUPP);
  }
  // The tools' words for it.
  auto py = cordon::testing::run_program(
      {"python3", "-c", "import os, sys; os.setxattr(sys.argv[1], 'user.x', b'1')",
       m.mnt("new.txt")});
  EXPECT_NE(py.exit_code(), 0);
  EXPECT_NE(py.err.find("Operation not supported"), std::string::npos) << py.err;
  // Each op reached the daemon once: the kernel remembers the ENOSYS for the whole mount.
  EXPECT_EQ(served(m, "SETXATTR"), 1u);
  EXPECT_EQ(served(m, "GETXATTR"), 1u);
  EXPECT_EQ(served(m, "LISTXATTR"), 1u);
  EXPECT_EQ(served(m, "REMOVEXATTR"), 1u);

  // A write copies host.txt up; its own xattr goes with it (hidden), so commit leaves the host
  // file's xattrs as they were, and a file the session made has none.
  {
    std::ofstream f(m.mnt("host.txt"), std::ios::app);
    f << "more\n";
  }
  m.stop();
  auto r = commit_layers(m.lower(), m.upper(), commit_opts(m));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_TRUE(r->conflicts.empty()) << ::testing::PrintToString(r->conflicts);
  EXPECT_EQ(read_file(m.lower("host.txt")), "host\nmore\n");
  EXPECT_EQ(xattr_names(m.lower("host.txt")), std::vector<std::string>{"user.x"});
  EXPECT_EQ(value_of(m.lower("host.txt"), "user.x"), "1");
  EXPECT_EQ(read_file(m.lower("new.txt")), "new\n");
  EXPECT_EQ(xattr_names(m.lower("new.txt")), std::vector<std::string>{});
}

TEST(CowFsXattrs, KeptAndCommittedWhenThePolicySaysSo) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kXattrsOn);
  write_file(m.lower("host.txt"), "host\n");
  ASSERT_EQ(::setxattr(m.lower("host.txt").c_str(), "user.x", "1", 1, 0), 0);
  ASSERT_EQ(m.start(), "");
  write_file(m.mnt("new.txt"), "new\n");
  EXPECT_EQ(err_of(::setxattr(m.mnt("new.txt").c_str(), "user.y", "2", 1, 0)), 0);
  EXPECT_EQ(value_of(m.mnt("new.txt"), "user.y"), "2");
  EXPECT_EQ(xattr_names(m.mnt("new.txt")), std::vector<std::string>{"user.y"});
  EXPECT_EQ(value_of(m.mnt("host.txt"), "user.x"), "1");
  // A workspace file changed in the session: its xattrs as the view left them go with it (diff
  // and commit see a change of bytes or mode; an xattr change alone is not one).
  EXPECT_EQ(err_of(::removexattr(m.mnt("host.txt").c_str(), "user.x")), 0);
  EXPECT_EQ(err_of(::setxattr(m.mnt("host.txt").c_str(), "user.z", "3", 1, 0)), 0);
  EXPECT_EQ(xattr_names(m.mnt("host.txt")), std::vector<std::string>{"user.z"});
  {
    std::ofstream f(m.mnt("host.txt"), std::ios::app);
    f << "more\n";
  }
  EXPECT_EQ(xattr_names(m.lower("host.txt")), std::vector<std::string>{"user.x"})
      << "the lower is never written";
  m.stop();
  auto r = commit_layers(m.lower(), m.upper(), commit_opts(m));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_TRUE(r->conflicts.empty()) << ::testing::PrintToString(r->conflicts);
  EXPECT_EQ(value_of(m.lower("new.txt"), "user.y"), "2");
  EXPECT_EQ(read_file(m.lower("host.txt")), "host\nmore\n");
  EXPECT_EQ(xattr_names(m.lower("host.txt")), std::vector<std::string>{"user.z"});
  EXPECT_EQ(value_of(m.lower("host.txt"), "user.z"), "3");
}

// The point of answering ENOSYS: the kernel's security.capability probes (one before the first
// write of every new file, one at every chown) stop after the first. With xattrs kept, every
// untarred file costs at least one GETXATTR.
TEST(CowFsXattrs, UntarAsksForNoXattrAfterTheFirst) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  constexpr int kFiles = 1000;
  uint64_t off = getxattrs_for_untar(kXattrsOff, kFiles);
  uint64_t on = getxattrs_for_untar(kXattrsOn, kFiles);
  EXPECT_LE(off, 1u);
  EXPECT_GE(on, static_cast<uint64_t>(kFiles));
  std::printf("GETXATTR for %d untarred files: %llu with xattrs off, %llu with xattrs on\n", kFiles,
              static_cast<unsigned long long>(off), static_cast<unsigned long long>(on));
}

}  // namespace
}  // namespace cordon::fusefs::testing
