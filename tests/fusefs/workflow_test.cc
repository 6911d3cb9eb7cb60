// Snapshots and rollback while mounted (control socket, kernel caches invalidated), and the
// offline workflow: diff, commit with conflict detection, snapshot/restore/discard.
#include "fusefs/workflow.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "fusefs/commit.h"
#include "tests/fusefs/commit_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";

void make_project(const std::string& root) {
  ::mkdir((root + "/src").c_str(), 0755);
  ::mkdir((root + "/docs").c_str(), 0755);
  write_file(root + "/src/main.c", "int main(){return 0;}\n");
  write_file(root + "/src/util.c", "int util(){return 1;}\n");
  write_file(root + "/docs/readme", "docs\n");
  write_file(root + "/top", "top\n");
}

TEST(CowFsWorkflow, SnapshotAndLiveRollbackRoundTrip) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  make_project(m.lower());
  ASSERT_EQ(m.start(), "");
  std::string start_view = tree_manifest(m.mnt());
  // Stage 1 of the agent's work.
  write_file(m.mnt("src/main.c"), "int main(){return 42;}\n");
  ASSERT_EQ(::unlink(m.mnt("docs/readme").c_str()), 0);
  ASSERT_EQ(::mkdir(m.mnt("build").c_str(), 0755), 0);
  write_file(m.mnt("build/out.o"), std::string(100000, 'o'));
  std::string stage1 = tree_manifest(m.mnt());
  auto reply = nlohmann::json::parse(m.control(R"({"op":"snapshot","name":"stage1"})"));
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  // Stage 2: more changes, and a file kept open (its page cache must not survive the rollback).
  int held = ::open(m.mnt("src/util.c").c_str(), O_RDONLY);
  char tmp[8];
  ASSERT_GT(::read(held, tmp, sizeof(tmp)), 0);
  write_file(m.mnt("src/util.c"), "changed in stage 2\n");
  write_file(m.mnt("stage2-only"), "s2");
  ASSERT_EQ(::rename(m.mnt("top").c_str(), m.mnt("top2").c_str()), 0);
  ASSERT_NE(tree_manifest(m.mnt()), stage1);
  // Roll back while mounted: the view equals stage 1 right away (stat, readdir and contents).
  reply = nlohmann::json::parse(m.control(R"({"op":"rollback","name":"stage1"})"));
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(tree_manifest(m.mnt()), stage1);
  EXPECT_EQ(read_file(m.mnt("src/util.c")), "int util(){return 1;}\n");
  EXPECT_NE(::access(m.mnt("stage2-only").c_str(), F_OK), 0);
  ::close(held);
  // Work continues on top of the restored state.
  write_file(m.mnt("after"), "after rollback");
  EXPECT_EQ(read_file(m.mnt("after")), "after rollback");
  // Back to the very start (no name).
  reply = nlohmann::json::parse(m.control(R"({"op":"rollback"})"));
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(tree_manifest(m.mnt()), start_view);
  // Bad names are refused, not used as paths.
  reply = nlohmann::json::parse(m.control(R"({"op":"snapshot","name":"../../etc"})"));
  EXPECT_FALSE(reply["ok"].get<bool>());
  reply = nlohmann::json::parse(m.control(R"({"op":"status"})"));
  EXPECT_TRUE(reply["ok"].get<bool>());
  // And the snapshot is still usable after the session ended (offline restore).
  m.stop();
  ASSERT_TRUE(restore_layer(m.upper(), m.base("snapshots/stage1")).ok());
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(tree_manifest(m.mnt()), stage1);
}

TEST(CowFsWorkflow, DiffAndCommitApplyChangesAtomically) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  make_project(m.lower());
  ASSERT_EQ(m.start(), "");
  write_file(m.mnt("src/main.c"), "int main(){return 7;}\n");
  ASSERT_EQ(::unlink(m.mnt("docs/readme").c_str()), 0);
  ASSERT_EQ(::mkdir(m.mnt("newdir").c_str(), 0700), 0);
  write_file(m.mnt("newdir/new.txt"), "new");
  ASSERT_EQ(::symlink("../top", m.mnt("newdir/link").c_str()), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, m.mnt("top").c_str(), nullptr, 0), 0);  // touch only
  // sed -i style: write a temp, rename over the original.
  write_file(m.mnt("src/util.tmp"), "int util(){return 2;}\n");
  ASSERT_EQ(::rename(m.mnt("src/util.tmp").c_str(), m.mnt("src/util.c").c_str()), 0);
  std::string view = tree_manifest(m.mnt());
  EXPECT_EQ(m.stop(), 0);
  auto diff = diff_layers(m.lower(), m.upper());
  ASSERT_TRUE(diff.ok()) << diff.error().to_string();
  std::vector<std::string> got;
  for (auto& c : *diff) {
    got.push_back(std::string(change_kind_name(c.kind)) + " " + c.path);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"deleted docs/readme", "added newdir",
                                           "added newdir/link", "added newdir/new.txt",
                                           "modified src/main.c", "modified src/util.c"}));
  auto report = commit_layers(m.lower(), m.upper(), commit_opts(m));
  ASSERT_TRUE(report.ok()) << report.error().to_string();
  EXPECT_TRUE(report->conflicts.empty());
  EXPECT_EQ(tree_manifest(m.lower()), view);
  auto after = diff_layers(m.lower(), m.upper());
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
}

TEST(CowFsWorkflow, CommitRefusesFilesChangedInTheWorkspaceSinceCopyUp) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  make_project(m.lower());
  ASSERT_EQ(m.start(), "");
  write_file(m.mnt("src/main.c"), "agent version\n");
  write_file(m.mnt("fresh"), "agent made this");
  ASSERT_EQ(::unlink(m.mnt("top").c_str()), 0);
  m.stop();
  // Meanwhile the user edits the real files.
  write_file(m.lower("src/main.c"), "user version, longer than before\n");
  write_file(m.lower("fresh"), "user made this too");
  write_file(m.lower("top"), "user changed top\n");
  std::string lower_before = tree_manifest(m.lower());
  auto report = commit_layers(m.lower(), m.upper(), commit_opts(m));
  ASSERT_TRUE(report.ok()) << report.error().to_string();
  ASSERT_EQ(report->conflicts.size(), 3u) << ::testing::PrintToString(report->conflicts);
  EXPECT_NE(report->conflicts[0].find("fresh"), std::string::npos);
  EXPECT_NE(report->conflicts[1].find("src/main.c"), std::string::npos);
  EXPECT_NE(report->conflicts[2].find("top"), std::string::npos);
  EXPECT_TRUE(report->applied.empty());
  EXPECT_EQ(tree_manifest(m.lower()), lower_before) << "a refused commit must change nothing";
  // Committing only a path without conflicts works.
  write_file(m.upper("other"), "o");
  CommitOptions only = commit_opts(m);
  only.only = {"other"};
  report = commit_layers(m.lower(), m.upper(), only);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->conflicts.empty());
  EXPECT_EQ(read_file(m.lower("other")), "o");
}

TEST(CowFsWorkflow, DiffFlagsProtectedPathsAndDiscardDropsEverything) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  make_project(m.lower());
  ASSERT_EQ(m.start(), "");
  ::mkdir(m.mnt(".vscode").c_str(), 0755);
  write_file(m.mnt(".vscode/tasks.json"), "{}");
  m.stop();
  policy::FilesystemPolicy fp;
  std::string why;
  fp.protect.push_back(*policy::PathPattern::parse(".vscode/**", "/root", &why));
  auto diff = diff_layers(m.lower(), m.upper(), &fp);
  ASSERT_TRUE(diff.ok());
  ASSERT_EQ(diff->size(), 2u);
  EXPECT_TRUE((*diff)[1].is_protected);
  ASSERT_TRUE(snapshot_layer(m.upper(), m.base("snap")).ok());
  ASSERT_TRUE(discard_layer(m.upper()).ok());
  EXPECT_TRUE(diff_layers(m.lower(), m.upper())->empty());
  ASSERT_TRUE(restore_layer(m.upper(), m.base("snap")).ok());
  EXPECT_EQ(diff_layers(m.lower(), m.upper())->size(), 2u);
}

}  // namespace
}  // namespace cordon::fusefs::testing
