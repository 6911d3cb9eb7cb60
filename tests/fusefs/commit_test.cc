// Commit as a transaction, against real cordon-fs layers and real failures: owners and modes as
// root, no window with a setuid bit or a wrong owner, every step failed and every step killed,
// conflicts below deleted directories, protected and unsupported changes held back, partial
// commits that leave the view right, and the journal's text.
#include "fusefs/commit.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <optional>
#include <set>

#include "fusefs/commit_journal.h"
#include "fusefs/renames.h"
#include "tests/fusefs/commit_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";

bool is_root() { return ::geteuid() == 0; }

struct stat lstat_of(const std::string& p) {
  struct stat st {};
  ::lstat(p.c_str(), &st);
  return st;
}

// Every entry under root that has a setuid/setgid bit, or belongs to root while `root_ok`
// does not list it: what must never be visible in the workspace during a commit.
std::vector<std::string> unsafe_entries(const std::string& root,
                                        const std::set<std::string>& root_ok) {
  std::vector<std::string> out;
  namespace fs = std::filesystem;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string rel = it->path().string().substr(root.size());
    if (rel.find(".cordon-commit-") != std::string::npos) {
      it.disable_recursion_pending();  // the 0700 staging directory: private, not the workspace
      continue;
    }
    struct stat st = lstat_of(it->path().string());
    if ((!S_ISDIR(st.st_mode) && (st.st_mode & (S_ISUID | S_ISGID)) != 0) ||
        (st.st_uid == 0 && root_ok.count(rel) == 0)) {
      out.push_back(rel);
    }
  }
  return out;
}

// A workspace with every kind of change: modified, deleted, a deleted tree, a file that becomes
// a directory and one that becomes a file, a directory's mode, new files, links, fifos.
void make_changes(MountedFs& m) {
  write_file(m.lower("mod"), "old\n");
  write_file(m.lower("del"), "delete me\n");
  ::mkdir(m.lower("tree").c_str(), 0755);
  ::mkdir(m.lower("tree/sub").c_str(), 0755);
  write_file(m.lower("tree/sub/x"), "x");
  write_file(m.lower("tree/y"), "y");
  write_file(m.lower("c"), "a file that becomes a directory");
  ::mkdir(m.lower("e").c_str(), 0755);
  write_file(m.lower("e/inner"), "a directory that becomes a file");
  ::mkdir(m.lower("m").c_str(), 0755);
  write_file(m.lower("m/keep"), "keep");
  write_file(m.lower("same"), "untouched");
  ASSERT_EQ(m.start(), "");
  write_file(m.mnt("mod"), "new\n");
  ASSERT_EQ(::unlink(m.mnt("del").c_str()), 0);
  ASSERT_EQ(std::system(("rm -rf " + m.mnt("tree")).c_str()), 0);
  ASSERT_EQ(::unlink(m.mnt("c").c_str()), 0);
  ASSERT_EQ(::mkdir(m.mnt("c").c_str(), 0750), 0);
  write_file(m.mnt("c/now"), "inside");
  ASSERT_EQ(std::system(("rm -rf " + m.mnt("e")).c_str()), 0);
  write_file(m.mnt("e"), "now a file");
  ASSERT_EQ(::chmod(m.mnt("m").c_str(), 0700), 0);
  ::mkdir(m.mnt("new").c_str(), 0755);
  ::mkdir(m.mnt("new/deeper").c_str(), 0755);
  write_file(m.mnt("new/deeper/file"), "deep");
  ASSERT_EQ(::symlink("../mod", m.mnt("new/link").c_str()), 0);
  ASSERT_EQ(::mkfifo(m.mnt("new/fifo").c_str(), 0640), 0);
  write_file(m.mnt("top-new"), "top");
  m.stop();
}

TEST(CommitTransaction, OwnersComeFromTheRealTreeAndSetuidAndCapabilitiesNever) {
  CORDON_REQUIRE(is_root(), "root (chown to the workspace's owners)");
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(::chown(m.lower().c_str(), 4242, 4243), 0);
  ::mkdir(m.lower("other").c_str(), 0755);
  ASSERT_EQ(::chown(m.lower("other").c_str(), 4343, 4344), 0);
  write_file(m.lower("theirs"), "owned by 4545");
  ASSERT_EQ(::chown(m.lower("theirs").c_str(), 4545, 4546), 0);
  timespec since = stamp_now(m.base("started"));
  ASSERT_EQ(m.start(), "");
  // `cp /bin/dash suid; chmod 4755 suid`, a setgid file, one with a file capability.
  ASSERT_EQ(std::system(("cp /bin/dash " + m.mnt("suid")).c_str()), 0);
  ASSERT_EQ(::chmod(m.mnt("suid").c_str(), 04755), 0);
  write_file(m.mnt("other/sgid"), "g");
  ASSERT_EQ(::chmod(m.mnt("other/sgid").c_str(), 02755), 0);
  write_file(m.mnt("theirs"), "rewritten by the session");
  ::mkdir(m.mnt("newdir").c_str(), 0755);
  write_file(m.mnt("newdir/inner"), "inner");
  m.stop();
  write_file(m.upper("capped"), "cap");
  const char cap[] = {1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0,
                      0, 0, 0, 0, 0, 0,    0, 0, 0, 0};  // v2, cap_sys_admin
  ASSERT_EQ(::setxattr(m.upper("capped").c_str(), "security.capability", cap, sizeof cap, 0), 0);
  ASSERT_EQ(::setxattr(m.upper("capped").c_str(), "user.note", "kept", 4, 0), 0);
  ASSERT_EQ(::setxattr(m.upper("capped").c_str(), "user.overlay.origin", "x", 1, 0), 0);
  CommitOptions o = commit_opts(m);
  o.since = since;
  auto r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_TRUE(r->conflicts.empty()) << ::testing::PrintToString(r->conflicts);
  struct stat st = lstat_of(m.lower("suid"));
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "setuid must not survive the commit";
  EXPECT_EQ(st.st_uid, 4242u);  // a new file: its directory's owner, never root, never 65534
  EXPECT_EQ(st.st_gid, 4243u);
  st = lstat_of(m.lower("other/sgid"));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_uid, 4343u);
  EXPECT_EQ(st.st_gid, 4344u);
  st = lstat_of(m.lower("theirs"));
  EXPECT_EQ(st.st_uid, 4545u) << "an existing file keeps its owner";
  EXPECT_EQ(st.st_gid, 4546u);
  EXPECT_EQ(read_file(m.lower("theirs")), "rewritten by the session");
  EXPECT_EQ(lstat_of(m.lower("newdir")).st_uid, 4242u);
  EXPECT_EQ(lstat_of(m.lower("newdir/inner")).st_uid, 4242u);
  char buf[64];
  EXPECT_LT(::getxattr(m.lower("capped").c_str(), "security.capability", buf, sizeof buf), 0);
  EXPECT_LT(::getxattr(m.lower("capped").c_str(), "user.overlay.origin", buf, sizeof buf), 0);
  ASSERT_EQ(::getxattr(m.lower("capped").c_str(), "user.note", buf, sizeof buf), 4);
  EXPECT_EQ(std::string(buf, 4), "kept");
  EXPECT_EQ(::access(m.lower(".cordon-commit-t-1").c_str(), F_OK), -1) << "staging left behind";
  EXPECT_EQ(::access(m.base("session/commit.journal").c_str(), F_OK), -1) << "journal left";
  auto after = diff_layers(m.lower(), m.upper());
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
}

TEST(CommitTransaction, NeverAWindowWithASetuidBitOrAWrongOwner) {
  CORDON_REQUIRE(is_root(), "root (the window this test looks for is a root-owned file)");
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(::chown(m.lower().c_str(), 4242, 4242), 0);
  write_file(m.lower("plain"), "p");
  ASSERT_EQ(::chown(m.lower("plain").c_str(), 4242, 4242), 0);
  ASSERT_EQ(m.start(), "");
  for (int i = 0; i < 20; ++i) {
    std::string n = m.mnt("s" + std::to_string(i));
    write_file(n, "#!/bin/sh\n");
    ASSERT_EQ(::chmod(n.c_str(), i % 2 ? 04755 : 06755), 0);
  }
  write_file(m.mnt("plain"), "changed");
  ASSERT_EQ(::chmod(m.mnt("plain").c_str(), 04711), 0);
  m.stop();
  CommitOptions o = commit_opts(m);
  size_t checks = 0;
  std::vector<std::string> seen;
  o.before_step = [&](size_t) {
    ++checks;
    for (auto& p : unsafe_entries(m.lower(), {})) {
      seen.push_back(p);
    }
  };
  auto r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(checks, 22u) << "20 new files, one swap, and the commit point";
  for (auto& p : unsafe_entries(m.lower(), {})) {
    seen.push_back(p);
  }
  EXPECT_TRUE(seen.empty()) << ::testing::PrintToString(seen);
  EXPECT_EQ(lstat_of(m.lower("s3")).st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_of(m.lower("plain")).st_mode & 07777, 0711u);
}

TEST(CommitTransaction, TooLongPathsSocketsAndReservedNamesAreHeldBackNotFatal) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(m.start(), "");
  write_file(m.mnt("suid"), "x");
  // The PATH_MAX path of the attack: 25 nested 200-character directories, built with *at().
  int fd = ::open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 25; ++i) {
    std::string n = "z" + std::to_string(i) + std::string(198, 'd');
    ASSERT_EQ(::mkdirat(fd, n.c_str(), 0755), 0) << i;
    int sub = ::openat(fd, n.c_str(), O_RDONLY | O_DIRECTORY);
    ::close(fd);
    fd = sub;
  }
  int f = ::openat(fd, "deepest", O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(f, 0);
  ::close(f);
  ::close(fd);
  write_file(m.mnt(".cordon-commit-t-1"), "a name the commit needs for itself");
  m.stop();
  // A unix socket in the layer (cordon-fs makes them for bind(); any layer may hold one).
  int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string sock = m.upper("sock");
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(s);
  auto diff = diff_layers(m.lower(), m.upper());
  ASSERT_TRUE(diff.ok()) << diff.error().to_string();
  bool listed = false;
  size_t beyond = 0;  // paths the real workspace cannot hold (PATH_MAX with its own path)
  for (auto& c : *diff) {
    listed = listed || (c.path == "sock" && c.type == 's');
    beyond += m.lower().size() + 1 + c.path.size() >= PATH_MAX ? 1 : 0;
  }
  ASSERT_GE(beyond, 1u);
  EXPECT_TRUE(listed) << "diff lists the socket as one";
  CommitOptions o = commit_opts(m);
  auto r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(read_file(m.lower("suid")), "x");
  std::map<std::string, std::string> held;
  for (auto& h : r->held) {
    held[h.path] = h.why;
  }
  EXPECT_NE(held["sock"].find("socket"), std::string::npos);
  EXPECT_NE(held[".cordon-commit-t-1"].find("reserved"), std::string::npos);
  size_t too_long = 0;
  for (auto& [p, why] : held) {
    too_long += why.find("too long") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(too_long, beyond);
  EXPECT_EQ(::access(m.lower("sock").c_str(), F_OK), -1);
  // What was held stays in the layer for review; the rest is gone from it.
  auto left = diff_layers(m.lower(), m.upper());
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->size(), beyond + 2) << "the socket, the reserved name and the long paths";
}

// Breaks a step of a running commit the way a user working on the workspace at the same time
// would: creates what is about to be created, rewrites (same bytes, same inode) the file about to
// be replaced, or adds a file to the directory about to be removed. restore() takes it back,
// times included, so the workspace can be compared with its state before the commit.
class Interference {
 public:
  Interference(const MountedFs& m, const std::string& path)
      : p_(m.lower(path)), parent_(p_.substr(0, p_.rfind('/'))) {
    parent_st_ = lstat_of(parent_);
    existed_ = ::lstat(p_.c_str(), &st_) == 0;
    if (!existed_) {
      write_file(p_, "created by the user during the commit");
    } else if (S_ISDIR(st_.st_mode)) {
      write_file(p_ + "/intruder", "written by the user during the commit");
    } else if (S_ISREG(st_.st_mode)) {
      content_ = read_file(p_);
      write_file(p_, content_);
    }
  }
  void restore() const {
    if (!existed_) {
      ::unlink(p_.c_str());
    } else if (S_ISDIR(st_.st_mode)) {
      ::unlink((p_ + "/intruder").c_str());
    }
    if (existed_) {
      timespec t[2] = {st_.st_atim, st_.st_mtim};
      ::utimensat(AT_FDCWD, p_.c_str(), t, AT_SYMLINK_NOFOLLOW);
    }
    timespec pt[2] = {parent_st_.st_atim, parent_st_.st_mtim};
    ::utimensat(AT_FDCWD, parent_.c_str(), pt, 0);
  }

 private:
  std::string p_, parent_, content_;
  struct stat st_ {
  }, parent_st_{};
  bool existed_ = false;
};

TEST(CommitTransaction, AFailureAtAnyStepPutsTheWorkspaceBackExactly) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  size_t failed_steps = 0;
  for (size_t k = 0;; ++k) {
    SCOPED_TRACE("failing step " + std::to_string(k));
    MountedFs m(kOpenPolicy);
    make_changes(m);
    const std::string before = tree_state(m.lower());
    auto upper_diff = diff_layers(m.lower(), m.upper());
    ASSERT_TRUE(upper_diff.ok());
    CommitOptions o = commit_opts(m);
    std::string target;
    std::optional<Interference> user;
    size_t steps = 0;
    o.before_step = [&](size_t i) {
      steps = i + 1;
      if (i != k) {
        return;
      }
      // The journal names the op about to run.
      auto j = parse_journal(read_file(m.base("session/commit.journal")));
      if (j.ok() && i < j->ops.size() && j->ops[i].kind != OpKind::Chmod) {
        target = j->ops[i].path;
        user.emplace(m, target);
      }
    };
    auto r = commit_layers(m.lower(), m.upper(), o);
    if (target.empty()) {
      if (k >= steps) {
        EXPECT_TRUE(r.ok()) << r.error().to_string();
        break;  // past the last op: every step has been failed once
      }
      continue;  // a chmod step or the commit point: nothing a user does there is a conflict
    }
    ASSERT_FALSE(r.ok()) << "interfering with " << target << " went unnoticed";
    EXPECT_NE(r.error().to_string().find("the workspace is as it was before the commit"),
              std::string::npos)
        << r.error().to_string();
    user->restore();
    EXPECT_EQ(tree_state(m.lower()), before);
    EXPECT_EQ(::access(m.lower(".cordon-commit-t-1").c_str(), F_OK), -1);
    EXPECT_EQ(::access(m.base("session/commit.journal").c_str(), F_OK), -1);
    auto again = diff_layers(m.lower(), m.upper());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->size(), upper_diff->size()) << "the session's changes are all still there";
    failed_steps++;
    ASSERT_LT(k, 40u);
  }
  EXPECT_EQ(failed_steps, 7u) << "2 removals, 3 swaps and 2 puts, each made to fail once";
}

TEST(CommitTransaction, KilledAtAnyStepIsUndoneByDiscardOrCompletedByTheNextCommit) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  for (int mode = 0; mode < 2; ++mode) {
    for (size_t k = 0;; ++k) {
      SCOPED_TRACE((mode == 0 ? "then discard, killed at step " : "then commit, killed at step ") +
                   std::to_string(k));
      MountedFs m(kOpenPolicy);
      make_changes(m);
      const std::string before = tree_state(m.lower());
      CommitOptions o = commit_opts(m);
      // Checked against the session's start as the CLI does: the workspace was made before it,
      // and what an undone commit moved back must not count as changed since.
      o.since = stamp_now(m.base("started"));
      pid_t child = ::fork();
      if (child == 0) {
        o.before_step = [k](size_t i) {
          if (i == k) {
            ::raise(SIGKILL);  // kill -9, at a known point
          }
        };
        auto r = commit_layers(m.lower(), m.upper(), o);
        ::_exit(r.ok() ? 0 : 1);
      }
      int status = 0;
      ASSERT_EQ(::waitpid(child, &status, 0), child);
      bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      if (!killed) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        break;  // k went past the commit point: the commit finished
      }
      EXPECT_EQ(::access(m.base("session/commit.journal").c_str(), F_OK), 0);
      if (mode == 0) {
        auto rec = recover_commit(m.lower(), m.upper(), o);
        ASSERT_TRUE(rec.ok()) << rec.error().to_string();
        auto j_done = rec->find("completed") != std::string::npos;
        if (!j_done) {
          EXPECT_NE(rec->find("undone"), std::string::npos) << *rec;
          EXPECT_EQ(tree_state(m.lower()), before);
        }
      } else {
        auto r = commit_layers(m.lower(), m.upper(), o);
        ASSERT_TRUE(r.ok()) << r.error().to_string();
        EXPECT_FALSE(r->recovered.empty());
        auto left = diff_layers(m.lower(), m.upper());
        ASSERT_TRUE(left.ok());
        EXPECT_TRUE(left->empty()) << "everything is committed after the second commit";
        EXPECT_EQ(read_file(m.lower("mod")), "new\n");
        EXPECT_EQ(read_file(m.lower("c/now")), "inside");
        EXPECT_EQ(read_file(m.lower("e")), "now a file");
        EXPECT_EQ(::access(m.lower("tree").c_str(), F_OK), -1);
      }
      EXPECT_EQ(::access(m.lower(".cordon-commit-t-1").c_str(), F_OK), -1);
      EXPECT_EQ(::access(m.base("session/commit.journal").c_str(), F_OK), -1);
      ASSERT_LT(k, 40u);
    }
  }
}

TEST(CommitTransaction, ChangesBelowADeletedDirectoryAreConflicts) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("docs").c_str(), 0755);
  write_file(m.lower("docs/a.md"), "a");
  ::mkdir(m.lower("old").c_str(), 0755);
  write_file(m.lower("old/b.md"), "b");
  timespec since = stamp_now(m.base("started"));
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(std::system(("rm -rf " + m.mnt("docs") + " " + m.mnt("old")).c_str()), 0);
  m.stop();
  // The user, meanwhile: a new file in one deleted directory, an edit in the other.
  write_file(m.lower("docs/new.md"), "the user's newer work");
  write_file(m.lower("old/b.md"), "b, edited by the user");
  const std::string before = tree_state(m.lower());
  CommitOptions o = commit_opts(m);
  o.since = since;
  auto r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  std::string all = ::testing::PrintToString(r->conflicts);
  EXPECT_NE(all.find("docs: changed in the workspace since the session started"), std::string::npos)
      << all;
  EXPECT_NE(all.find("docs/new.md"), std::string::npos) << all;
  EXPECT_NE(all.find("old/b.md"), std::string::npos) << all;
  EXPECT_TRUE(r->applied.empty());
  EXPECT_EQ(tree_state(m.lower()), before) << "nothing of a refused commit may be applied";
}

// Attack review F10: a chmod (or chown) on the host during the session changes neither size nor
// mtime; the session's edit must be a conflict, not a commit that puts the old mode back.
TEST(CommitTransaction, AHostChmodOrChownDuringTheSessionIsAConflict) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("config.yml"), "password: x\n");
  write_file(m.lower("owned.yml"), "o\n");
  ASSERT_EQ(::chmod(m.lower("config.yml").c_str(), 0644), 0);
  timespec since = stamp_now(m.base("started"));
  ASSERT_EQ(m.start(), "");
  {
    std::ofstream(m.mnt("config.yml"), std::ios::app) << "# edited\n";
    std::ofstream(m.mnt("owned.yml"), std::ios::app) << "# edited\n";
  }
  m.stop();
  ASSERT_EQ(::chmod(m.lower("config.yml").c_str(), 0600), 0);  // the user tightens it meanwhile
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::chown(m.lower("owned.yml").c_str(), 4242, 4242), 0);
  }
  const std::string before = tree_state(m.lower());
  CommitOptions o = commit_opts(m);
  o.since = since;
  auto r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  std::string all = ::testing::PrintToString(r->conflicts);
  EXPECT_NE(all.find("config.yml: changed in the workspace since the session read it"),
            std::string::npos)
      << all;
  if (root) {
    EXPECT_NE(all.find("owned.yml: changed in the workspace since the session read it"),
              std::string::npos)
        << all;
  }
  EXPECT_TRUE(r->applied.empty());
  EXPECT_EQ(tree_state(m.lower()), before) << "nothing of a refused commit may be applied";
  struct stat st {};
  ASSERT_EQ(::stat(m.lower("config.yml").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST(CommitTransaction, ProtectedChangesGoOnlyWhenNamed) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);  // the view lets them through: what reaches commit is what counts
  ASSERT_EQ(m.start(), "");
  for (const char* d :
       {"g", ".git", ".git/hooks", "sub", "sub/.vscode", ".github", ".github/workflows"}) {
    ASSERT_EQ(::mkdir(m.mnt(d).c_str(), 0755), 0) << d;
  }
  write_file(m.mnt(".git/hooks/pre-commit"), "#!/bin/sh\necho pwned\n");
  write_file(m.mnt(".git/config"), "[core]\n\tfsmonitor = echo pwned\n");
  write_file(m.mnt("sub/.vscode/tasks.json"), "{}");
  write_file(m.mnt("sub/.git"), "gitdir: ../g\n");
  write_file(m.mnt(".github/workflows/a.yml"), "on: push\n");
  write_file(m.mnt("sub/.mcp.json"), "{}");
  write_file(m.mnt("ordinary.c"), "int x;\n");
  m.stop();
  policy::FilesystemPolicy pol;
  pol.protect = policy::default_protected();
  CommitOptions o = commit_opts(m, &pol);
  auto r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(read_file(m.lower("ordinary.c")), "int x;\n");
  for (const char* p : {".git/hooks", ".git/config", "sub/.vscode", "sub/.git", "sub/.mcp.json",
                        ".github/workflows"}) {
    EXPECT_EQ(::access(m.lower(p).c_str(), F_OK), -1) << p << " was applied by a plain commit";
  }
  std::set<std::string> held;
  for (auto& h : r->held) {
    held.insert(h.path);
    EXPECT_NE(h.why.find("protected (filesystem.protect["), std::string::npos) << h.why;
  }
  EXPECT_TRUE(held.count("sub/.git")) << "a .git file points git elsewhere";
  EXPECT_TRUE(held.count(".git/config"));
  // Named: a protected path itself, or a protected directory above it.
  o.only = {".git/config", "sub/.vscode"};
  r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(read_file(m.lower(".git/config")), "[core]\n\tfsmonitor = echo pwned\n");
  EXPECT_EQ(read_file(m.lower("sub/.vscode/tasks.json")), "{}");
  EXPECT_EQ(::access(m.lower(".git/hooks").c_str(), F_OK), -1);
  // A parent that is not protected itself does not name what is beneath it.
  o.only = {"sub"};
  r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(::access(m.lower("sub/.git").c_str(), F_OK), -1);
  EXPECT_EQ(::access(m.lower("sub/.mcp.json").c_str(), F_OK), -1);
  EXPECT_EQ(::access(m.lower(".github/workflows").c_str(), F_OK), -1);
  o.only = {};
  o.include_protected = true;
  r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(r->held.empty());
  EXPECT_EQ(read_file(m.lower(".github/workflows/a.yml")), "on: push\n");
  EXPECT_EQ(read_file(m.lower("sub/.git")), "gitdir: ../g\n");
}

TEST(CommitTransaction, APartialCommitLeavesTheViewShowingWhatIsLeft) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("x").c_str(), 0755);
  write_file(m.lower("x/old1"), "1");
  write_file(m.lower("x/old2"), "2");
  ASSERT_EQ(m.start(), "");
  // Replace x wholesale (an opaque directory over the real one), then commit only part of it.
  ASSERT_EQ(std::system(("rm -rf " + m.mnt("x")).c_str()), 0);
  ASSERT_EQ(::mkdir(m.mnt("x").c_str(), 0755), 0);
  write_file(m.mnt("x/new1"), "n1");
  write_file(m.mnt("x/new2"), "n2");
  const std::string view = tree_manifest(m.mnt());
  m.stop();
  CommitOptions o = commit_opts(m);
  o.only = {"x/new1", "x/old1"};
  auto r = commit_layers(m.lower(), m.upper(), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->applied.size(), 2u);
  EXPECT_EQ(read_file(m.lower("x/new1")), "n1");
  EXPECT_EQ(::access(m.lower("x/old1").c_str(), F_OK), -1);
  EXPECT_EQ(read_file(m.lower("x/old2")), "2");
  // The session's view is unchanged: committed entries now come from the real tree, the rest
  // (x/old2 still deleted, x/new2 still new) from the layer.
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(tree_manifest(m.mnt()), view);
  m.stop();
  auto left = diff_layers(m.lower(), m.upper());
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 2u);
  EXPECT_EQ((*left)[0].path, "x/new2");
  EXPECT_EQ((*left)[1].path, "x/old2");
  EXPECT_EQ((*left)[1].kind, ChangeKind::Deleted);
}

// The kernel overlayfs format, built by hand: 0/0 character-device and xattr whiteouts, opaque
// directories, a device node; and the overlayfs features cordon cannot read back refused.
TEST(OverlayLayers, WhiteoutsOpaqueDirectoriesAndDevicesAreRead) {
  cordon::testing::TempDir dir;
  auto at = [&](const std::string& rel) { return dir.path() + "/" + rel; };
  for (const char* d : {"lower", "lower/d", "lower/e", "upper", "upper/d", "upper/e", "session"}) {
    ASSERT_EQ(::mkdir(at(d).c_str(), 0755), 0) << d;
  }
  for (const char* f : {"lower/a", "lower/b", "lower/d/x", "lower/d/y", "lower/e/z", "lower/e/w"}) {
    write_file(at(f), f);
  }
  timespec since = stamp_now(at("session/started"));
  ASSERT_EQ(::mknod(at("upper/a").c_str(), S_IFCHR | 0600, makedev(0, 0)), 0);
  write_file(at("upper/b"), "b, changed");
  ASSERT_EQ(::setxattr(at("upper/d").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  write_file(at("upper/d/new"), "new");
  ASSERT_EQ(::setxattr(at("upper/e").c_str(), "user.overlay.opaque", "x", 1, 0), 0);
  write_file(at("upper/e/z"), "");
  ASSERT_EQ(::setxattr(at("upper/e/z").c_str(), "user.overlay.whiteout", "", 0, 0), 0);
  bool devices = ::mknod(at("upper/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  auto diff = diff_layers(at("lower"), at("upper"), nullptr, LayerFormat::Overlay);
  ASSERT_TRUE(diff.ok()) << diff.error().to_string();
  std::vector<std::string> got;
  for (auto& c : *diff) {
    got.push_back(std::string(change_kind_name(c.kind)) + " " + c.path + " " + c.type);
  }
  std::vector<std::string> want = {"deleted a f",   "modified b f",  "added d/new f",
                                   "deleted d/x f", "deleted d/y f", "deleted e/z f"};
  if (devices) {
    want.push_back("added null c");
  }
  EXPECT_EQ(got, want);
  CommitOptions o;
  o.format = LayerFormat::Overlay;
  o.session_dir = at("session");
  o.session_id = "t-2";
  o.since = since;
  auto r = commit_layers(at("lower"), at("upper"), o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(r->conflicts.empty()) << ::testing::PrintToString(r->conflicts);
  EXPECT_EQ(::access(at("lower/a").c_str(), F_OK), -1);
  EXPECT_EQ(read_file(at("lower/b")), "b, changed");
  EXPECT_EQ(read_file(at("lower/d/new")), "new");
  EXPECT_EQ(::access(at("lower/d/x").c_str(), F_OK), -1);
  EXPECT_EQ(::access(at("lower/e/z").c_str(), F_OK), -1);
  EXPECT_EQ(read_file(at("lower/e/w")), "lower/e/w");
  EXPECT_EQ(::access(at("lower/null").c_str(), F_OK), -1) << "a device node was committed";
  if (devices) {
    ASSERT_EQ(r->held.size(), 1u);
    EXPECT_NE(r->held[0].why.find("device nodes are never committed"), std::string::npos);
  }
  // A redirect (redirect_dir) or metacopy layer was not written by cordon's fallback: refused.
  ASSERT_EQ(::mkdir(at("upper/moved").c_str(), 0755), 0);
  ASSERT_EQ(::setxattr(at("upper/moved").c_str(), "user.overlay.redirect", "/d", 2, 0), 0);
  auto refused = diff_layers(at("lower"), at("upper"), nullptr, LayerFormat::Overlay);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().to_string().find("moved uses overlayfs redirect"), std::string::npos)
      << refused.error().to_string();
  // The same of a file (read without opening it when it has no overlay xattr): other user
  // xattrs pass, a metacopy one is refused.
  ASSERT_EQ(::rmdir(at("upper/moved").c_str()), 0);
  write_file(at("upper/meta"), "meta");
  ASSERT_EQ(::setxattr(at("upper/meta").c_str(), "user.note", "n", 1, 0), 0);
  auto noted = diff_layers(at("lower"), at("upper"), nullptr, LayerFormat::Overlay);
  ASSERT_TRUE(noted.ok()) << noted.error().to_string();
  ASSERT_EQ(::setxattr(at("upper/meta").c_str(), "user.overlay.metacopy", "", 0, 0), 0);
  refused = diff_layers(at("lower"), at("upper"), nullptr, LayerFormat::Overlay);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().to_string().find("meta uses overlayfs metacopy"), std::string::npos)
      << refused.error().to_string();
}

// A layer nested deeper than any path can be (built with *at() calls) is refused by diff with
// a clear error, never walked until the stack or the fds run out, and discard still removes it.
TEST(DiffLayers, RefusesALayerNestedDeeperThanAnyPathAndDiscardRemovesIt) {
  cordon::testing::TempDir dir;
  ASSERT_EQ(::mkdir((dir.path() + "/lower").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir.path() + "/upper").c_str(), 0755), 0);
  int fd = ::open((dir.path() + "/upper").c_str(), O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 3000; ++i) {
    ASSERT_EQ(::mkdirat(fd, "d", 0755), 0);
    int sub = ::openat(fd, "d", O_RDONLY | O_DIRECTORY);
    ::close(fd);
    fd = sub;
  }
  ::close(fd);
  // As `cordon diff` does: as many fds as the hard limit allows.
  struct rlimit nofile {};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &nofile);
  auto diff = diff_layers(dir.path() + "/lower", dir.path() + "/upper");
  ASSERT_FALSE(diff.ok());
  std::string why = diff.error().to_string();
  EXPECT_TRUE(why.find("deeper than 2048 levels") != std::string::npos ||
              (nofile.rlim_max < 4200 && why.find("Too many open files") != std::string::npos))
      << why;
  // Snapshot and discard survive it too; discard holds one directory open at a time, so it
  // removes the tree under a limit of 64 fds (a walk with an fd per level fails with EMFILE).
  ASSERT_EQ(snapshot_layer(dir.path() + "/upper", dir.path() + "/snap").ok(), false);
  struct rlimit few = nofile;
  few.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &few), 0);
  auto discarded = discard_layer(dir.path() + "/upper");
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &nofile), 0);
  ASSERT_TRUE(discarded.ok()) << discarded.error().to_string();
  EXPECT_TRUE(diff_layers(dir.path() + "/lower", dir.path() + "/upper")->empty());
}

TEST(CommitJournal, RoundTripsAnyNameAndRefusesDamage) {
  Journal j;
  j.stages = {"", "mnt/point"};
  j.ops.push_back({.kind = OpKind::Remove,
                   .path = "a b/\x1b[2J\n%",
                   .stage = 0,
                   .name = "n0",
                   .old_ino = 77,
                   .old_size = 5,
                   .old_mtime_ns = -1000000001});
  j.ops.push_back(
      {.kind = OpKind::Put, .path = "new/\xff\xfe", .stage = 1, .name = "n1", .new_ino = 12});
  j.ops.push_back({.kind = OpKind::Swap,
                   .path = "x",
                   .stage = 0,
                   .name = "n2",
                   .new_ino = 13,
                   .old_ino = 14,
                   .old_size = 1 << 20,
                   .old_mtime_ns = 1764180000123456789});
  j.ops.push_back(
      {.kind = OpKind::Chmod, .path = "dir", .old_ino = 15, .old_mode = 0755, .new_mode = 02700});
  j.drop = {"a b/\x1b[2J\n%", "x"};
  j.clear_upper = false;
  std::string text(kJournalHeader);
  for (auto& s : j.stages) {
    text += journal_stage_line(s);
  }
  text += journal_ops_text(j);
  j.ops_complete = true;
  auto back = parse_journal(text);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(*back, j);
  // A torn last line was never acted on: ignored. The markers in their order.
  auto torn = parse_journal(text + "done\nmerg");
  ASSERT_TRUE(torn.ok());
  EXPECT_TRUE(torn->done);
  EXPECT_FALSE(torn->merged);
  for (const std::string& bad :
       {std::string("not a journal\n"), text + "done\ndone\n", text + "put 0 n9 ../x 1\n",
        text.substr(0, text.find("ops-end")) + "put 5 n9 x 1\n", text + "merged\n",
        std::string(kJournalHeader) + "stage /abs\n",
        std::string(kJournalHeader) + "remove 0 n0 x 1\n",
        text.substr(0, text.find("ops-end")) + "put 0 n9 a/./b 1\n",
        text.substr(0, text.find("ops-end")) + "put 0 a/b x 1\n",
        text.substr(0, text.find("ops-end")) + "chmod x 1 99999 0\n",
        text.substr(0, text.find("ops-end")) + "swap 0 n9 x 1 2 3\n"}) {
    EXPECT_FALSE(parse_journal(bad).ok()) << bad;
  }
  // The validated records of an undone commit.
  std::string v =
      validated_line("a b/\x1b", 7, 8, -9) + "\n" + validated_line("c", 1, 2, 3) + "\n" + "torn 1";
  auto recs = parse_validated(v);
  ASSERT_TRUE(recs.ok()) << recs.error().to_string();
  EXPECT_EQ(*recs, (std::map<std::string, std::string>{{"a b/\x1b", "7 8 -9"}, {"c", "1 2 3"}}));
  EXPECT_FALSE(parse_validated("../x 1 2 3\n").ok());
  EXPECT_FALSE(parse_validated("x 1 2\n").ok());
}

TEST(Renames, PairsIdenticalContentOnlyAndNeverEmptyFiles) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("a"), "same bytes");
  write_file(m.lower("b"), "other bytes");  // same size as "same bytes"? no: 11 vs 10
  write_file(m.lower("c"), "0123456789");
  write_file(m.lower("empty"), "");
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::rename(m.mnt("a").c_str(), m.mnt("a2").c_str()), 0);
  ASSERT_EQ(::unlink(m.mnt("c").c_str()), 0);
  write_file(m.mnt("c2"), "9876543210");  // same size, other bytes: not a rename
  ASSERT_EQ(::rename(m.mnt("empty").c_str(), m.mnt("empty2").c_str()), 0);
  m.stop();
  auto diff = diff_layers(m.lower(), m.upper());
  ASSERT_TRUE(diff.ok());
  UniqueFd l(::open(m.lower().c_str(), O_RDONLY | O_DIRECTORY));
  UniqueFd u(::open(m.upper().c_str(), O_RDONLY | O_DIRECTORY));
  std::vector<std::string> got;
  for (auto& e : pair_renames(*diff, l.get(), u.get())) {
    got.push_back(std::string(change_kind_name(e.change.kind)) + " " + e.change.path +
                  (e.renamed_from.empty() ? "" : " from " + e.renamed_from));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"added a2 from a", "deleted c", "added c2",
                                           "deleted empty", "added empty2"}));
}

}  // namespace
}  // namespace cordon::fusefs::testing
