// cordon-fs --direct: a pass-through view of a real directory (a filesystem.write grant, an rw
// workspace). Writes land in the directory at once; deny, deny_write and protect hold for files
// that exist and for files created, renamed or linked later; nothing of cordon-fs's own is left
// in the directory; the host's own changes show through.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

// A direct view of `dir_` (the "grant") mounted at `mnt_`, decided as absolute host paths.
class DirectView {
 public:
  // `policy` gets GRANT replaced by the grant's absolute path.
  explicit DirectView(std::string policy, bool workspace = false) : workspace_(workspace) {
    ::mkdir(grant_.c_str(), 0755);
    ::mkdir(mnt_.c_str(), 0755);
    for (size_t at; (at = policy.find("GRANT")) != std::string::npos;) {
      policy.replace(at, 5, grant_);
    }
    write_file(base_ / "policy.json", policy);
  }
  ~DirectView() { stop(); }

  std::string start() {
    std::vector<std::string> argv = {cordon::testing::build_path("fusefs/cordon-fs"),
                                     "--direct",
                                     "--upper",
                                     grant_,
                                     "--mountpoint",
                                     mnt_,
                                     "--policy",
                                     base_ / "policy.json",
                                     "--events",
                                     base_ / "events.jsonl",
                                     "--ready-fd",
                                     "3",
                                     "-f"};
    if (!workspace_) {
      argv.insert(argv.end(), {"--view-root", grant_});
    }
    std::string error;
    pid_ = start_cordon_fs(argv, base_ / "daemon.log", &error);
    if (!error.empty()) {
      stop();
    }
    return error;
  }

  void stop() {
    if (pid_ <= 0) {
      return;
    }
    cordon::testing::run_program({"fusermount3", "-u", "-z", mnt_},
                                 {.deadline = std::chrono::seconds(20)});
    int status = 0;
    for (int i = 0; i < 200 && ::waitpid(pid_, &status, WNOHANG) != pid_; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string grant(const std::string& rel = "") const {
    return rel.empty() ? grant_ : grant_ + "/" + rel;
  }
  std::string mnt(const std::string& rel = "") const {
    return rel.empty() ? mnt_ : mnt_ + "/" + rel;
  }
  std::string events() const { return read_file(base_ / "events.jsonl"); }

 private:
  cordon::testing::TempDir base_;
  std::string grant_ = base_ / "grant", mnt_ = base_ / "mnt";
  bool workspace_;
  pid_t pid_ = -1;
};

// errno of a step, 0 when it succeeded.
int err(int rc) { return rc == 0 ? 0 : errno; }

int write_at(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return errno;
  }
  bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  ::close(fd);
  return ok ? 0 : EIO;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

constexpr const char* kGrantPolicy = R"({"filesystem": {"write": ["GRANT"],
    "deny": ["**/.env"], "deny_write": ["GRANT/settings.json", "GRANT/state/config.json"],
    "protect": ["GRANT/hooks/**"]}})";

TEST(CowFsDirect, WritesLandAtOnceAndRulesHoldForExistingAndNewPaths) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  DirectView v(kGrantPolicy);
  write_file(v.grant("settings.json"), "{\"hooks\": {}}");
  ::mkdir(v.grant("projects").c_str(), 0755);
  ASSERT_EQ(v.start(), "");

  // Ordinary work lands in the real directory at once, under its real inode numbers.
  EXPECT_EQ(write_at(v.mnt("history.jsonl"), "one\n"), 0);
  EXPECT_EQ(read_file(v.grant("history.jsonl")), "one\n");
  EXPECT_EQ(err(::mkdir(v.mnt("projects/p1").c_str(), 0755)), 0);
  EXPECT_EQ(write_at(v.mnt("projects/p1/log"), "x"), 0);
  EXPECT_EQ(read_file(v.grant("projects/p1/log")), "x");
  struct stat in_view {
  }, on_host{};
  ASSERT_EQ(::stat(v.mnt("history.jsonl").c_str(), &in_view), 0);
  ASSERT_EQ(::stat(v.grant("history.jsonl").c_str(), &on_host), 0);
  EXPECT_EQ(in_view.st_ino, on_host.st_ino);
  EXPECT_EQ(err(::rename(v.mnt("history.jsonl").c_str(), v.mnt("h2").c_str())), 0);
  EXPECT_EQ(err(::unlink(v.mnt("h2").c_str())), 0);
  EXPECT_FALSE(exists(v.grant("h2")));
  EXPECT_EQ(err(::rmdir(v.mnt("projects/p1").c_str())), ENOTEMPTY);

  // deny_write on an existing file: no write, truncate, unlink, rename over, link, or symlink
  // route changes it.
  EXPECT_EQ(write_at(v.mnt("settings.json"), "PLANTED"), EACCES);
  EXPECT_EQ(err(::truncate(v.mnt("settings.json").c_str(), 0)), EACCES);
  EXPECT_EQ(err(::unlink(v.mnt("settings.json").c_str())), EACCES);
  ASSERT_EQ(write_at(v.mnt("evil"), "PLANTED"), 0);
  EXPECT_EQ(err(::rename(v.mnt("evil").c_str(), v.mnt("settings.json").c_str())), EACCES);
  EXPECT_EQ(err(::link(v.mnt("settings.json").c_str(), v.mnt("alias").c_str())), EACCES);
  EXPECT_EQ(err(::symlink("settings.json", v.mnt("sl").c_str())), 0);
  EXPECT_EQ(write_at(v.mnt("sl"), "PLANTED"), EACCES);  // resolved in the view, then refused
  EXPECT_EQ(read_file(v.grant("settings.json")), "{\"hooks\": {}}");

  // New paths: a protected directory cannot be made, nor moved into place ready-made, nor a
  // denied name created at any depth.
  EXPECT_EQ(err(::mkdir(v.mnt("hooks").c_str(), 0755)), EACCES);
  ASSERT_EQ(err(::mkdir(v.mnt("prepared").c_str(), 0755)), 0);
  ASSERT_EQ(write_at(v.mnt("prepared/evil.sh"), "#!/bin/sh\n"), 0);
  EXPECT_EQ(err(::rename(v.mnt("prepared").c_str(), v.mnt("hooks").c_str())), EACCES);
  EXPECT_EQ(write_at(v.mnt(".env"), "TOKEN=x"), EACCES);
  EXPECT_EQ(write_at(v.mnt("projects/.env"), "TOKEN=x"), EACCES);
  EXPECT_EQ(err(::link(v.mnt("evil").c_str(), v.mnt("projects/.env").c_str())), EACCES);
  EXPECT_FALSE(exists(v.grant("hooks")));
  EXPECT_FALSE(exists(v.grant(".env")));
  EXPECT_FALSE(exists(v.grant("projects/.env")));
  EXPECT_FALSE(exists(v.grant("alias")));

  // Each refusal is recorded under the host path it concerns.
  std::string ev = v.events();
  EXPECT_NE(ev.find("\"path\":\"" + v.grant("settings.json") + "\""), std::string::npos) << ev;
  EXPECT_NE(ev.find("\"rule\":\"filesystem.deny_write[0]\""), std::string::npos) << ev;
  EXPECT_NE(ev.find("\"rule\":\"filesystem.protect[0]\""), std::string::npos) << ev;

  // Nothing of cordon-fs's own (temp names, whiteouts) is left in the real directory.
  v.stop();
  std::string manifest = tree_manifest(v.grant());
  EXPECT_EQ(manifest.find(".wh."), std::string::npos) << manifest;
}

TEST(CowFsDirect, ARenamedDirectoryCannotCarryAProtectedFileIntoPlace) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  DirectView v(kGrantPolicy);
  ASSERT_EQ(v.start(), "");
  // state/config.json may not be written; state/ does not exist yet.
  ASSERT_EQ(err(::mkdir(v.mnt("tmp").c_str(), 0755)), 0);
  ASSERT_EQ(write_at(v.mnt("tmp/config.json"), "PLANTED"), 0);
  EXPECT_EQ(err(::rename(v.mnt("tmp").c_str(), v.mnt("state").c_str())), EACCES);
  EXPECT_FALSE(exists(v.grant("state/config.json")));
  EXPECT_EQ(write_at(v.mnt("state/config.json"), "PLANTED"), ENOENT);
  ASSERT_EQ(err(::mkdir(v.mnt("state").c_str(), 0755)), 0);
  EXPECT_EQ(write_at(v.mnt("state/config.json"), "PLANTED"), EACCES);
}

TEST(CowFsDirect, TheHostsOwnChangesShowThrough) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  DirectView v(kGrantPolicy);
  write_file(v.grant("shared.json"), "v1");
  ASSERT_EQ(v.start(), "");
  EXPECT_EQ(read_file(v.mnt("shared.json")), "v1");
  EXPECT_FALSE(exists(v.mnt("later.json")));
  // Another process on the host (the user's own agent session) writes meanwhile.
  write_file(v.grant("shared.json"), "version 2");
  write_file(v.grant("later.json"), "new");
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the view's cache timeout
  EXPECT_EQ(read_file(v.mnt("shared.json")), "version 2");
  EXPECT_EQ(read_file(v.mnt("later.json")), "new");
}

TEST(CowFsDirect, WorkspaceViewDecidesRelativeAndAbsoluteRules) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  DirectView v(R"({"filesystem": {"mode": "rw", "deny": ["GRANT/secret"],
      "protect": [".git/hooks/**"], "deny_write": []}})",
               /*workspace=*/true);
  write_file(v.grant("secret"), "s");
  ASSERT_EQ(v.start(), "");
  EXPECT_EQ(write_at(v.mnt("ok.txt"), "fine"), 0);
  EXPECT_EQ(read_file(v.grant("ok.txt")), "fine");
  EXPECT_LT(::open(v.mnt("secret").c_str(), O_RDONLY), 0);  // an absolute rule, by host path
  EXPECT_EQ(errno, EACCES);
  ASSERT_EQ(err(::mkdir(v.mnt(".git").c_str(), 0755)), 0);
  EXPECT_EQ(err(::mkdir(v.mnt(".git/hooks").c_str(), 0755)), EACCES);
  EXPECT_FALSE(exists(v.grant(".git/hooks")));
}

// filesystem.xattrs is about the copy-on-write view: a direct view is the host directory itself,
// whose xattrs a program keeps using (the policy here leaves xattrs at its default, false).
TEST(CowFsDirect, KeepsXattrsWhateverThePolicySays) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  DirectView v(R"({"filesystem": {"write": ["GRANT"], "deny": [], "protect": []}})");
  write_file(v.grant("f"), "f");
  ASSERT_EQ(::setxattr(v.grant("f").c_str(), "user.host", "h", 1, 0), 0) << std::strerror(errno);
  ASSERT_EQ(v.start(), "");
  char buf[16];
  ASSERT_EQ(::getxattr(v.mnt("f").c_str(), "user.host", buf, sizeof buf), 1);
  EXPECT_EQ(buf[0], 'h');
  ASSERT_EQ(err(::setxattr(v.mnt("f").c_str(), "user.view", "v", 1, 0)), 0);
  ASSERT_EQ(::getxattr(v.grant("f").c_str(), "user.view", buf, sizeof buf), 1);
  EXPECT_EQ(buf[0], 'v');
  EXPECT_EQ(err(::removexattr(v.mnt("f").c_str(), "user.host")), 0);
  EXPECT_LT(::getxattr(v.grant("f").c_str(), "user.host", buf, sizeof buf), 0);
}

TEST(CowFsDirect, RefusesOptionsThatMakeNoSense) {
  auto r =
      cordon::testing::run_program({cordon::testing::build_path("fusefs/cordon-fs"), "--direct",
                                    "--lower", "/tmp", "--upper", "/tmp", "--mountpoint", "/tmp"});
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_NE(r.err.find("--direct has no lower layer"), std::string::npos) << r.err;
  r = cordon::testing::run_program(
      {cordon::testing::build_path("fusefs/cordon-fs"), "--upper", "/tmp", "--mountpoint", "/tmp"});
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_NE(r.err.find("--lower is required"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cordon::fusefs::testing
