// The kernel's cached names across a live rollback: a name the kernel holds as missing (a
// negative dentry, whether a LOOKUP said ENOENT or the kernel's own unlink/rmdir made it) must be
// found again once a rollback restores it; and missing names stay cached however many a session
// has looked up.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";

// lstat's errno (0 when the name exists).
int lstat_errno(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? 0 : errno;
}

void snapshot(MountedFs& m, const std::string& name) {
  auto reply = nlohmann::json::parse(m.control(R"({"op":"snapshot","name":")" + name + "\"}"));
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
}

void rollback(MountedFs& m, const std::string& name) {
  std::string req =
      name.empty() ? R"({"op":"rollback"})" : R"({"op":"rollback","name":")" + name + "\"}";
  auto reply = nlohmann::json::parse(m.control(req));
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
}

// FUSE requests the daemon has read so far, over either transport.
uint64_t requests_served(MountedFs& m) {
  auto reply = nlohmann::json::parse(m.control(R"({"op":"status"})"));
  uint64_t n = 0;
  if (reply.contains("ring_requests")) {
    n += reply["ring_requests"].get<uint64_t>();
  }
  if (reply.contains("dev_requests")) {
    n += reply["dev_requests"].get<uint64_t>();
  }
  return n;
}

// The kernel's own unlink turns the dentry negative without asking the daemon; once the inode is
// forgotten the daemon no longer knows the name. The rollback must still make it reappear.
TEST(CowFsRollbackCache, FileUnlinkedInTheSessionReappearsAfterRollback) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::mkdir(m.mnt("sub").c_str(), 0755), 0);
  for (const char* p : {"x", "sub/y"}) {
    write_file(m.mnt(p), std::string("content of ") + p);
  }
  snapshot(m, "s1");
  for (const char* p : {"x", "sub/y"}) {
    ASSERT_EQ(::unlink(m.mnt(p).c_str()), 0);
    EXPECT_EQ(lstat_errno(m.mnt(p)), ENOENT) << p;
  }
  rollback(m, "s1");
  for (const char* p : {"x", "sub/y"}) {
    EXPECT_EQ(lstat_errno(m.mnt(p)), 0) << p;
    EXPECT_EQ(read_file(m.mnt(p)), std::string("content of ") + p);
  }
}

// A real workspace file deleted in the view (a whiteout in the upper layer), then restored by a
// rollback to a snapshot taken before the delete.
TEST(CowFsRollbackCache, LowerFileDeletedInTheViewReappearsAfterRollback) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("dir").c_str(), 0755);
  write_file(m.lower("real"), "real file\n");
  write_file(m.lower("dir/inner"), "inner file\n");
  ASSERT_EQ(m.start(), "");
  write_file(m.mnt("dir/other"), "so that dir has an upper side");
  snapshot(m, "before");
  for (const char* p : {"real", "dir/inner"}) {
    EXPECT_EQ(lstat_errno(m.mnt(p)), 0) << p;
    ASSERT_EQ(::unlink(m.mnt(p).c_str()), 0);
    EXPECT_EQ(lstat_errno(m.mnt(p)), ENOENT) << p;
  }
  rollback(m, "before");
  EXPECT_EQ(read_file(m.mnt("real")), "real file\n");
  EXPECT_EQ(read_file(m.mnt("dir/inner")), "inner file\n");
  EXPECT_EQ(read_file(m.mnt("dir/other")), "so that dir has an upper side");
  // And to the very start: same for the whiteouts' names, which were never in the upper.
  ASSERT_EQ(::unlink(m.mnt("real").c_str()), 0);
  EXPECT_EQ(lstat_errno(m.mnt("real")), ENOENT);
  rollback(m, "");
  EXPECT_EQ(read_file(m.mnt("real")), "real file\n");
  EXPECT_EQ(lstat_errno(m.mnt("dir/other")), ENOENT);
}

// Names a LOOKUP answered ENOENT (cached by the kernel) that a rollback brings into the view,
// in a known directory and in one the rollback itself brings back.
TEST(CowFsRollbackCache, NamesLookedUpWhileMissingAppearAfterRollback) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("keep"), "keep");
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::mkdir(m.mnt("d").c_str(), 0755), 0);
  write_file(m.mnt("n"), "made in the session");
  write_file(m.mnt("d/m"), "in d");
  snapshot(m, "with-n");
  rollback(m, "");  // n and d are gone
  for (const char* p : {"n", "d", "d/m"}) {
    EXPECT_EQ(lstat_errno(m.mnt(p)), ENOENT) << p;  // LOOKUP: ENOENT, cached
    EXPECT_EQ(lstat_errno(m.mnt(p)), ENOENT) << p;
  }
  rollback(m, "with-n");
  EXPECT_EQ(read_file(m.mnt("n")), "made in the session");
  EXPECT_EQ(read_file(m.mnt("d/m")), "in d");
  EXPECT_EQ(read_file(m.mnt("keep")), "keep");
}

// rmdir of a directory with content (children unlinked first, as rm -r does): the rollback
// restores the directory, and its children are reachable through it.
TEST(CowFsRollbackCache, RemovedTreeIsReachableAfterRollback) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("low").c_str(), 0755);
  write_file(m.lower("low/a"), "lower a");
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::mkdir(m.mnt("tree").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(m.mnt("tree/sub").c_str(), 0755), 0);
  write_file(m.mnt("tree/f"), "f");
  write_file(m.mnt("tree/sub/g"), "g");
  write_file(m.mnt("low/b"), "upper b");
  snapshot(m, "full");
  for (const char* p : {"tree/sub/g", "tree/f", "low/a", "low/b"}) {
    ASSERT_EQ(::unlink(m.mnt(p).c_str()), 0) << p;
  }
  for (const char* p : {"tree/sub", "tree", "low"}) {
    ASSERT_EQ(::rmdir(m.mnt(p).c_str()), 0) << p;
    EXPECT_EQ(lstat_errno(m.mnt(p)), ENOENT) << p;
  }
  rollback(m, "full");
  EXPECT_EQ(read_file(m.mnt("tree/f")), "f");
  EXPECT_EQ(read_file(m.mnt("tree/sub/g")), "g");
  EXPECT_EQ(read_file(m.mnt("low/a")), "lower a");
  EXPECT_EQ(read_file(m.mnt("low/b")), "upper b");
}

// A name created after a snapshot, then removed by rolling back, then looked up as missing: the
// kernel must not keep the created file's dentry (positive) nor, after a second rollback to a
// state with it, the negative one.
TEST(CowFsRollbackCache, CreateRollbackLookupRollbackRoundTrip) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(m.start(), "");
  snapshot(m, "empty");
  write_file(m.mnt("late"), "late");
  ASSERT_EQ(::link(m.mnt("late").c_str(), m.mnt("late2").c_str()), 0);
  snapshot(m, "late");
  rollback(m, "empty");
  EXPECT_EQ(lstat_errno(m.mnt("late")), ENOENT);
  EXPECT_EQ(lstat_errno(m.mnt("late2")), ENOENT);  // the second name of a hard link too
  rollback(m, "late");
  EXPECT_EQ(read_file(m.mnt("late")), "late");
  EXPECT_EQ(read_file(m.mnt("late2")), "late");
}

// Missing names are cached however many the session looked up: after more than 65536 distinct
// missing names (the old bookkeeping's cap), a fresh missing name costs one LOOKUP, and looking
// it up again costs none (counted by the daemon's request counters).
TEST(CowFsRollbackCache, MissingNamesStayCachedPastManyLookups) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::mkdir(m.mnt("many").c_str(), 0755), 0);
  std::string dir = m.mnt("many") + "/";
  for (int i = 0; i < 70000; i++) {
    ASSERT_EQ(lstat_errno(dir + "missing-" + std::to_string(i)), ENOENT);
  }
  uint64_t before = requests_served(m);
  ASSERT_GT(before, 70000u);  // the counters do count LOOKUPs
  for (int i = 0; i < 200; i++) {
    ASSERT_EQ(lstat_errno(dir + "fresh"), ENOENT);
  }
  uint64_t after = requests_served(m);
  // One LOOKUP, plus slack for requests the kernel sends on its own (FORGETs).
  EXPECT_LT(after - before, 20u) << "missing names are not cached";
}

}  // namespace
}  // namespace cordon::fusefs::testing
