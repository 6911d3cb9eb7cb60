// The cow review workflow end to end: `cordon run` in cow mode through cordon-fs, then
// `cordon diff / commit / snapshot / rollback / discard` on the session, live and after. Real
// FUSE mounts: as root only (this host keeps /dev/fuse 0600, so an ordinary user gets the kernel
// overlay fallback, whose sessions these commands refuse — tested too).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "tests/launcher/review_fixture.h"

namespace cordon::testing {
namespace {

namespace fs = std::filesystem;

// The workspace a user would own: files to modify, delete, rename, and a binary file.
void populate(SandboxFixture& f) {
  write_text(f.ws() + "/mod.txt", "line one\nline two\n");
  write_text(f.ws() + "/del.txt", "delete me\n");
  write_text(f.ws() + "/ren.txt", "rename me\n");
  write_text(f.ws() + "/keep.txt", "keep\n");
  std::ofstream(f.ws() + "/blob.bin", std::ios::binary) << std::string("\0\1\2\3", 4);
  ::mkdir((f.ws() + "/sub").c_str(), 0755);
  write_text(f.ws() + "/sub/inner.txt", "inner\n");
  uid_t uid = f.make_workspace_owned();
  if (::geteuid() == 0) {
    for (const char* p :
         {"/mod.txt", "/del.txt", "/ren.txt", "/keep.txt", "/blob.bin", "/sub", "/sub/inner.txt"}) {
      EXPECT_EQ(::chown((f.ws() + p).c_str(), uid, uid), 0) << p;
    }
  }
}

const char* kEdits =
    "set -e; echo 'line 2 changed' > mod.txt.new; printf 'line one\\nline TWO\\nline three\\n' > "
    "mod.txt; rm mod.txt.new; rm del.txt; mv ren.txt renamed.txt; echo fresh > new.txt;"
    " printf '\\0\\377\\0\\377\\0' > blob.bin; mkdir newdir; echo deep > newdir/deep.txt";

// `cordon diff --stat` of kEdits, after its count line.
const char* kEditsStat =
    "M blob.bin  (5 bytes)\n"
    "D del.txt\n"
    "M mod.txt  (29 bytes)\n"
    "A new.txt  (6 bytes, 0644)\n"
    "A newdir/  (0755)\n"
    "A newdir/deep.txt  (5 bytes, 0644)\n"
    "R ren.txt -> renamed.txt  (10 bytes, 0644)\n";

TEST(WorkflowCli, RunThenDiffShowsEveryKindOfChangeWithContent) {
  REQUIRE_FUSE();
  SandboxFixture f;
  populate(f);
  const std::string before = tree_state(f.ws());
  auto r = f.run({}, {"/bin/sh", "-c", kEdits});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(tree_state(f.ws()), before) << "the real workspace changed";
  // The summary gives the count and the commands.
  // blob.bin, del.txt, mod.txt, new.txt, newdir, newdir/deep.txt, ren.txt, renamed.txt.
  EXPECT_NE(r.err.find("cordon: 8 files changed in the copy-on-write layer"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("review: cordon diff "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("apply: cordon commit "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("undo: cordon rollback "), std::string::npos) << r.err;

  auto stat = cordon(f, {"diff", "last", "--stat"});
  ASSERT_EQ(stat.exit_code(), 0) << stat.err;
  // The counts first; new entries with their modes.
  EXPECT_EQ(stat.out, "7 changes in session " + stat.out.substr(stat.out.find("session ") + 8, 22) +
                          " against " + f.ws() + ": 3 added, 2 modified, 1 deleted, 1 renamed\n" +
                          kEditsStat);

  auto full = cordon(f, {"diff", "last"});
  ASSERT_EQ(full.exit_code(), 0) << full.err;
  const std::string& d = full.out;
  // Text: a unified diff with the real lines.
  EXPECT_NE(d.find("--- a/mod.txt\n+++ b/mod.txt\n@@ -1,2 +1,3 @@\n line one\n-line two\n+line "
                   "TWO\n+line three\n"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("--- a/del.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-delete me\n"), std::string::npos)
      << d;
  EXPECT_NE(d.find("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+fresh\n"), std::string::npos)
      << d;
  EXPECT_NE(d.find("renamed ren.txt -> renamed.txt  (10 bytes, 0644)\n"), std::string::npos) << d;
  // Binary: sizes, no bytes.
  EXPECT_NE(d.find("Binary file blob.bin: 4 -> 5 bytes\n"), std::string::npos) << d;
  EXPECT_EQ(d.find("keep.txt"), std::string::npos) << d;
  EXPECT_EQ(d.find("\033["), std::string::npos) << "no colour when stdout is not a tty";
  // On a terminal (script(1) gives it one): added lines green, removed red, like git.
  auto tty =
      run_program({"/usr/bin/script", "-qec", cordon_bin() + " diff last mod.txt", "/dev/null"},
                  RunSpec{.env = f.env(), .cwd = f.ws()});
  EXPECT_NE(tty.out.find("\033[32m+line TWO\033[0m"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("\033[31m-line two\033[0m"), std::string::npos) << tty.out;

  // PATH arguments narrow it.
  auto some = cordon(f, {"diff", "last", "--stat", "newdir", "del.txt"});
  ASSERT_EQ(some.exit_code(), 0) << some.err;
  EXPECT_EQ(some.out.substr(some.out.find('\n') + 1),
            "D del.txt\nA newdir/  (0755)\nA newdir/deep.txt  (5 bytes, 0644)\n");
}

TEST(WorkflowCli, CommitAppliesTheChangesAndRefusesFilesChangedInTheRealTree) {
  REQUIRE_FUSE();
  SandboxFixture f;
  populate(f);
  auto r = f.run({"-q"}, {"/bin/sh", "-c", kEdits});
  ASSERT_EQ(r.exit_code(), 0) << r.err;

  // The user edits a file the session also changed: commit must refuse, listing it, and apply
  // nothing at all.
  write_text(f.ws() + "/mod.txt", "edited on the host\n");
  const std::string before = tree_state(f.ws());
  auto refused = cordon(f, {"commit", "last"});
  EXPECT_EQ(refused.exit_code(), 1) << refused.err;
  EXPECT_NE(refused.err.find("nothing was applied"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("  mod.txt: changed in the workspace since the session read it\n"),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(tree_state(f.ws()), before) << "a refused commit wrote something";

  // Everything else, by name.
  auto ok = cordon(
      f, {"commit", "last", "del.txt", "ren.txt", "renamed.txt", "new.txt", "newdir", "blob.bin"});
  ASSERT_EQ(ok.exit_code(), 0) << ok.err << ok.out;
  EXPECT_NE(ok.out.find("cordon: committed "), std::string::npos) << ok.out;
  EXPECT_EQ(read_text(f.ws() + "/mod.txt"), "edited on the host\n");
  EXPECT_EQ(::access((f.ws() + "/del.txt").c_str(), F_OK), -1);
  EXPECT_EQ(::access((f.ws() + "/ren.txt").c_str(), F_OK), -1);
  EXPECT_EQ(read_text(f.ws() + "/renamed.txt"), "rename me\n");
  EXPECT_EQ(read_text(f.ws() + "/new.txt"), "fresh\n");
  EXPECT_EQ(read_text(f.ws() + "/newdir/deep.txt"), "deep\n");
  EXPECT_EQ(read_text(f.ws() + "/blob.bin"), std::string("\0\377\0\377\0", 5));
  EXPECT_EQ(read_text(f.ws() + "/keep.txt"), "keep\n");
  // Committed files belong to whoever the sandbox ran as, not to root who ran commit.
  struct stat st {};
  ASSERT_EQ(::stat((f.ws() + "/new.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid() == 0 ? SandboxFixture::kTestUid : ::geteuid());
  // No temp files of the atomic renames are left.
  for (const auto& e : fs::directory_iterator(f.ws())) {
    EXPECT_EQ(e.path().filename().string().find(".cordon-commit"), std::string::npos) << e.path();
  }
  // What is left to review is the refused file only.
  auto left = cordon(f, {"diff", "last", "--stat"});
  EXPECT_EQ(left.out.substr(left.out.find('\n') + 1), "M mod.txt  (29 bytes)\n") << left.out;
}

// A cordon run whose program reads its stdin, so the test can step it between workflow commands.
Background stepped(SandboxFixture& f, const std::string& script) {
  return Background(
      {cordon_bin(), "run", "-q", "--workspace", f.ws(), "--", "/bin/sh", "-c", script}, f.env(),
      f.ws(), /*piped_stdin=*/true);
}

TEST(WorkflowCli, LiveSnapshotAndRollbackWhileTheProgramRuns) {
  REQUIRE_FUSE();
  SandboxFixture f;
  populate(f);
  Background run =
      stepped(f,
              "echo v1 > a.txt; echo s1; read x;"
              " echo v2 > a.txt; echo b > b.txt; rm keep.txt; echo s2; read x;"
              " echo \"a=$(cat a.txt) b=$(ls b.txt 2>&1) keep=$(cat keep.txt)\"; echo s3; read x;"
              " echo \"start a=$(cat a.txt 2>&1)\"; echo end");
  ASSERT_NE(run.read_until("s1\n").find("s1"), std::string::npos);
  auto snap = cordon(f, {"snapshot", "last", "one"});
  ASSERT_EQ(snap.exit_code(), 0) << snap.err;
  EXPECT_NE(snap.out.find("(taken live)"), std::string::npos) << snap.out;
  // The same name twice is refused.
  EXPECT_EQ(cordon(f, {"snapshot", "last", "one"}).exit_code(), 1);
  run.send("\n");
  ASSERT_NE(run.read_until("s2\n").find("s2"), std::string::npos);
  auto back = cordon(f, {"rollback", "last", "one"});
  ASSERT_EQ(back.exit_code(), 0) << back.err;
  EXPECT_NE(back.out.find("(live: the program sees it now)"), std::string::npos) << back.out;
  // Commit and discard wait for the end of the session.
  EXPECT_EQ(cordon(f, {"commit", "last"}).exit_code(), 1);
  EXPECT_EQ(cordon(f, {"discard", "last"}).exit_code(), 1);
  run.send("\n");
  std::string seen = run.read_until("s3\n");
  EXPECT_NE(seen.find("a=v1 b=ls: cannot access 'b.txt': No such file or directory keep=keep\n"),
            std::string::npos)
      << seen;
  ASSERT_EQ(cordon(f, {"rollback", "last"}).exit_code(), 0);  // to the start
  run.send("\n");
  seen = run.read_until("end\n");
  EXPECT_NE(seen.find("start a=cat: a.txt: No such file or directory\n"), std::string::npos)
      << seen;
  EXPECT_EQ(run.wait(), 0);
  EXPECT_EQ(::access((f.ws() + "/a.txt").c_str(), F_OK), -1);
}

TEST(WorkflowCli, SnapshotRollbackAndDiscardAfterTheSessionEnded) {
  REQUIRE_FUSE();
  SandboxFixture f;
  populate(f);
  const std::string before = tree_state(f.ws());
  ASSERT_EQ(f.run({"-q"}, {"/bin/sh", "-c", "echo x > x.txt; rm del.txt"}).exit_code(), 0);
  auto snap = cordon(f, {"snapshot", "last", "after-run"});
  ASSERT_EQ(snap.exit_code(), 0) << snap.err;
  EXPECT_EQ(snap.out.find("(taken live)"), std::string::npos) << snap.out;

  ASSERT_EQ(cordon(f, {"rollback", "last"}).exit_code(), 0);
  EXPECT_NE(cordon(f, {"diff", "last", "--stat"}).out.find("0 changes"), std::string::npos);
  auto missing = cordon(f, {"rollback", "last", "nope"});
  EXPECT_EQ(missing.exit_code(), 1);
  EXPECT_NE(missing.err.find("has no snapshot \"nope\"; its snapshots: after-run"),
            std::string::npos)
      << missing.err;
  ASSERT_EQ(cordon(f, {"rollback", "last", "after-run"}).exit_code(), 0);
  auto again = cordon(f, {"diff", "last", "--stat"});
  EXPECT_EQ(again.out.substr(again.out.find('\n') + 1), "D del.txt\nA x.txt  (2 bytes, 0644)\n")
      << again.out;

  auto discard = cordon(f, {"discard", "last"});
  ASSERT_EQ(discard.exit_code(), 0) << discard.err;
  EXPECT_NE(cordon(f, {"diff", "last", "--stat"}).out.find("0 changes"), std::string::npos);
  EXPECT_EQ(cordon(f, {"rollback", "last", "after-run"}).exit_code(), 1) << "snapshots dropped";
  EXPECT_EQ(tree_state(f.ws()), before);
}

TEST(WorkflowCli, BadIdsAndSessionsWithoutALayerAreRefusedClearly) {
  SandboxFixture f;
  f.make_workspace_owned();
  auto none = cordon(f, {"diff", "last"});
  EXPECT_EQ(none.exit_code(), 125);
  EXPECT_NE(none.err.find("no sessions under"), std::string::npos) << none.err;
  auto bad = cordon(f, {"commit", "../../etc"});
  EXPECT_EQ(bad.exit_code(), 125);
  EXPECT_NE(bad.err.find("is not a session id"), std::string::npos) << bad.err;

  ASSERT_EQ(f.run({"-q", "--mode", "ro"}, {"true"}).exit_code(), 0);
  auto ro = cordon(f, {"diff", "last"});
  EXPECT_EQ(ro.exit_code(), 1);
  EXPECT_NE(ro.err.find("has no copy-on-write layer"), std::string::npos) << ro.err;

  auto usage = cordon(f, {"snapshot"});
  EXPECT_EQ(usage.exit_code(), 125) << usage.err;
  auto help = cordon(f, {"commit", "--help"});
  EXPECT_EQ(help.exit_code(), 0);
  EXPECT_NE(help.out.find("1 refused (commit conflicts"), std::string::npos) << help.out;
}

// Without FUSE (an ordinary user here), cow runs on kernel overlayfs: said at start and at the
// end, and its layer (0/0 whiteouts, opaque xattrs) is reviewed and committed like cordon-fs's.
TEST(WorkflowCli, OverlayFallbackIsStatedAndItsLayerReviewable) {
  SandboxFixture f;
  populate(f);
  if (fuse_usable()) {
    f.env().push_back("CORDON_COW_BACKEND=overlay");  // as root: force the fallback
  }
  auto r = f.run({}, {"/bin/sh", "-c", kEdits});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("cordon: copy-on-write through kernel overlayfs, not cordon-fs ("),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cordon: copy-on-write ran on kernel overlayfs, not cordon-fs ("),
            std::string::npos)
      << r.err;
  auto d = cordon(f, {"diff", "last", "--stat"});
  ASSERT_EQ(d.exit_code(), 0) << d.err;
  EXPECT_EQ(d.out.substr(d.out.find('\n') + 1), kEditsStat) << d.out;
  auto c = cordon(f, {"commit", "last"});
  ASSERT_EQ(c.exit_code(), 0) << c.err << c.out;
  EXPECT_EQ(read_text(f.ws() + "/mod.txt"), "line one\nline TWO\nline three\n");
  EXPECT_EQ(::access((f.ws() + "/del.txt").c_str(), F_OK), -1);
  EXPECT_EQ(read_text(f.ws() + "/renamed.txt"), "rename me\n");
  EXPECT_EQ(read_text(f.ws() + "/newdir/deep.txt"), "deep\n");
  EXPECT_NE(cordon(f, {"diff", "last", "--stat"}).out.find("0 changes"), std::string::npos);
}

// The names, link targets and lines the agent wrote reach the reviewer's terminal only as text:
// an OSC 52 in a name (which would set the host's clipboard) or a title escape in a line shows as
// \x1b..., in `cordon diff`, `--stat` and `cordon commit`'s list.
TEST(WorkflowCli, EscapeSequencesTheAgentWroteNeverReachTheTerminal) {
  REQUIRE_FUSE();
  SandboxFixture f;
  populate(f);
  auto r = f.run({}, {"/bin/sh", "-c",
                      "printf 'x\\n' > \"$(printf 'clip\\033]52;c;cm0gLXJmIH4=\\007.txt')\"; "
                      "printf 'line one\\nline \\033]0;owned\\007two\\tend\\n' > mod.txt; "
                      "ln -s \"$(printf '\\033[2J')\" link"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto stat = cordon(f, {"diff", "last", "--stat"});
  ASSERT_EQ(stat.exit_code(), 0) << stat.err;
  EXPECT_NE(stat.out.find("A clip\\x1b]52;c;cm0gLXJmIH4=\\x07.txt  (2 bytes, 0644)\n"),
            std::string::npos)
      << stat.out;
  auto full = cordon(f, {"diff", "last"});
  ASSERT_EQ(full.exit_code(), 0) << full.err;
  EXPECT_NE(full.out.find("+line \\x1b]0;owned\\x07two\tend\n"), std::string::npos) << full.out;
  EXPECT_NE(full.out.find(" -> \\x1b[2J  (0777)\n"), std::string::npos) << full.out;
  EXPECT_NE(full.out.find("+++ b/clip\\x1b]52;c;cm0gLXJmIH4=\\x07.txt\n"), std::string::npos)
      << full.out;
  auto commit = cordon(f, {"commit", "last"});
  ASSERT_EQ(commit.exit_code(), 0) << commit.err;
  EXPECT_NE(commit.out.find("  A clip\\x1b]52;c;cm0gLXJmIH4=\\x07.txt\n"), std::string::npos)
      << commit.out;
  for (const std::string* out : {&stat.out, &full.out, &commit.out, &commit.err}) {
    EXPECT_EQ(out->find_first_of("\033\007"), std::string::npos) << *out;
  }
}

}  // namespace
}  // namespace cordon::testing
