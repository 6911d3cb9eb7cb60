// Session retention through the built binary: `cordon prune` with every selector, pending changes
// that are never dropped without --force, running sessions, records planted with symlinks and
// mounts, the retention pass of `cordon run`, and `cordon ls`'s size and pending columns.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

constexpr int64_t kDay = 86400;

class PruneTest : public ::testing::Test {
 protected:
  std::string root() const { return state_ / "sessions"; }
  std::vector<std::string> env() const {
    return {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home_.path(), "LANG=C.UTF-8",
            "CORDON_STATE_DIR=" + state_.path(), "CORDON_RETENTION=0"};
  }
  RunResult cordon(std::vector<std::string> args, std::vector<std::string> extra_env = {}) const {
    args.insert(args.begin(), cordon_bin());
    RunSpec spec;
    spec.env = env();
    for (const auto& kv :
         extra_env) {  // replaces a default of the same name: getenv takes the first
      std::string name = kv.substr(0, kv.find('=') + 1);
      std::erase_if(*spec.env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
      spec.env->push_back(kv);
    }
    spec.cwd = ws_.path();
    return run_program(args, spec);
  }
  // One finished session (read-only workspace: nothing pending). Returns its id.
  std::string finished_session(const std::string& word = "x") {
    auto before = sessions();
    RunResult r = cordon({"run", "-q", "--mode", "ro", "-w", ws_.path(), "--", "echo", word});
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    return newest_since(before);
  }
  // One finished cow session that changed a file and was neither committed nor discarded.
  std::string pending_session() {
    if (::geteuid() == 0) {
      (void)!::chown(ws_.path().c_str(), SandboxFixture::kTestUid, SandboxFixture::kTestUid);
    }
    auto before = sessions();
    RunResult r = cordon({"run", "-q", "-w", ws_.path(), "--", "sh", "-c", "echo work > out.txt"});
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    return newest_since(before);
  }
  std::set<std::string> sessions() const {
    std::set<std::string> out;
    if (DIR* d = ::opendir(root().c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] != '.') out.insert(e->d_name);
      }
      ::closedir(d);
    }
    return out;
  }
  std::string newest_since(const std::set<std::string>& before) const {
    for (const auto& id : sessions()) {
      if (!before.count(id)) return id;
    }
    ADD_FAILURE() << "no new session under " << root();
    return "";
  }
  bool exists(const std::string& id) const { return sessions().count(id) == 1; }
  // Makes a session's record look as if it was last written `days` ago. policy.json keeps its
  // time: it is the creation instant that orders sessions started within one second.
  void age(const std::string& id, int64_t days) const {
    const std::string dir = root() + "/" + id;
    timespec t[2];
    t[0].tv_sec = t[1].tv_sec = ::time(nullptr) - days * kDay;
    t[0].tv_nsec = t[1].tv_nsec = 0;
    for (const char* f : {"summary.json", "events.jsonl", ""}) {
      std::string p = *f ? dir + "/" + f : dir;
      ::utimensat(AT_FDCWD, p.c_str(), t, AT_SYMLINK_NOFOLLOW);
    }
  }

  TempDir ws_, home_, state_;
};

TEST_F(PruneTest, OlderThanTakesOnlySessionsThatEndedBeforeIt) {
  std::string a = finished_session("a"), b = finished_session("b"), c = finished_session("c");
  age(a, 10);
  age(b, 8);
  age(c, 6);
  RunResult r = cordon({"prune", "--older-than", "7d"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_FALSE(exists(a));
  EXPECT_FALSE(exists(b));
  EXPECT_TRUE(exists(c)) << "ended 6 days ago";
  EXPECT_NE(r.out.find("removed " + a + " (ended 10 days ago"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("removed 2 sessions"), std::string::npos) << r.out;
}

TEST_F(PruneTest, WithoutSelectorsSevenDaysIsTheDefault) {
  std::string a = finished_session("a"), b = finished_session("b");
  age(a, 8);
  RunResult r = cordon({"prune"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_FALSE(exists(a));
  EXPECT_TRUE(exists(b));
}

TEST_F(PruneTest, KeepLeavesTheNewestWhateverTheirAge) {
  std::vector<std::string> ids;
  for (const char* w : {"a", "b", "c", "d"}) ids.push_back(finished_session(w));
  RunResult r = cordon({"prune", "--keep", "2"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_FALSE(exists(ids[0]));
  EXPECT_FALSE(exists(ids[1]));
  EXPECT_TRUE(exists(ids[2]));
  EXPECT_TRUE(exists(ids[3]));
  r = cordon({"prune", "--keep", "0"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_TRUE(sessions().empty());
}

TEST_F(PruneTest, WithBothSelectorsBothMustAllow) {
  std::vector<std::string> ids;
  for (const char* w : {"a", "b", "c", "d"}) ids.push_back(finished_session(w));
  age(ids[0], 30);
  age(ids[1], 30);
  age(ids[2], 30);
  RunResult r = cordon({"prune", "--older-than", "7d", "--keep", "3"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_FALSE(exists(ids[0])) << "old and not among the 3 newest";
  EXPECT_TRUE(exists(ids[1])) << "old, but among the 3 newest";
  EXPECT_TRUE(exists(ids[2]));
  EXPECT_TRUE(exists(ids[3])) << "new";
}

TEST_F(PruneTest, DryRunSaysWhatWouldGoAndRemovesNothing) {
  std::string a = finished_session("a"), b = finished_session("b");
  RunResult r = cordon({"prune", "--dry-run", "--keep", "0"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_NE(r.out.find("would remove " + a), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("would remove " + b), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("would remove 2 sessions"), std::string::npos) << r.out;
  EXPECT_TRUE(exists(a));
  EXPECT_TRUE(exists(b));
}

TEST_F(PruneTest, UncommittedChangesAreNeverDroppedWithoutForce) {
  std::string p = pending_session();
  std::string clean = finished_session();
  age(p, 90);
  age(clean, 90);
  RunResult ls = cordon({"ls"});
  EXPECT_NE(ls.out.find("PENDING"), std::string::npos) << ls.out;
  size_t row = ls.out.find(p);
  ASSERT_NE(row, std::string::npos) << ls.out;
  std::string line = ls.out.substr(row, ls.out.find('\n', row) - row);
  EXPECT_NE(line.find(" yes "), std::string::npos) << line;
  EXPECT_NE(line.find(" KiB "), std::string::npos) << "size column: " << line;

  RunResult r = cordon({"prune", "--keep", "0"});
  EXPECT_EQ(r.exit_code(), 1) << "refused: " << r.out << r.err;
  EXPECT_TRUE(exists(p));
  EXPECT_FALSE(exists(clean)) << "the clean one goes in the same pass";
  EXPECT_NE(r.out.find("kept " + p), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cordon diff " + p), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(root() + "/" + p + "/upper/out.txt"), "work\n") << "the change is intact";

  // The retention of `cordon run` never takes it either.
  RunResult run = cordon({"run", "-q", "--mode", "ro", "-w", ws_.path(), "--", "true"},
                         {"CORDON_RETENTION=1d"});
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_TRUE(exists(p));

  // Committed (where the workflow reads the layer), nothing is pending and prune takes it.
  if (read_text(root() + "/" + p + "/cow.json").find("cordon-fs") != std::string::npos) {
    RunResult c = cordon({"commit", p});
    ASSERT_EQ(c.exit_code(), 0) << c.out << c.err;
    EXPECT_EQ(read_text(ws_ / "out.txt"), "work\n");
    age(p, 90);
    r = cordon({"prune", "--older-than", "1d"});
    EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
    EXPECT_FALSE(exists(p));
    p = pending_session();
  }
  r = cordon({"prune", "--keep", "0", "--force"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_FALSE(exists(p));
  EXPECT_NE(r.out.find("with uncommitted changes (--force)"), std::string::npos) << r.out;
}

TEST_F(PruneTest, ARunningSessionIsNeverPrunedAndAKilledOneIs) {
  std::vector<std::string> argv = {cordon_bin(), "run", "--mode", "ro", "-w",
                                   ws_.path(),   "--",  "sh",     "-c", "echo started; sleep 60"};
  auto before = sessions();
  Background bg(argv, env(), ws_.path());
  ASSERT_NE(bg.read_until("started").find("started"), std::string::npos) << bg.text();
  std::string id = newest_since(before);
  age(id, 90);  // its record looks old: only its liveness keeps it
  RunResult ls = cordon({"ls"});
  EXPECT_NE(ls.out.find(id), std::string::npos);
  EXPECT_NE(ls.out.find(" running "), std::string::npos) << ls.out;
  RunResult r = cordon({"prune", "--keep", "0", "--force"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_TRUE(exists(id));
  EXPECT_NE(r.out.find("1 still running"), std::string::npos) << r.out;

  // cordon killed: its lock goes with it, and the record (which never got its end) can go.
  ::kill(-bg.pid(), SIGKILL);
  bg.wait();
  for (int i = 0; i < 100; ++i) {  // the sandbox's init follows its cordon within moments
    ls = cordon({"ls"});
    if (ls.out.find("no end") != std::string::npos) break;
    ::usleep(100000);
  }
  EXPECT_NE(ls.out.find("no end"), std::string::npos) << ls.out;
  r = cordon({"prune", "--keep", "0"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_FALSE(exists(id));
  EXPECT_NE(r.out.find("stopped without recording its end"), std::string::npos) << r.out;
}

// A record someone tampered with: symlinks to the outside at every level prune walks, a hard link
// to an outside file, directories closed to their owner. Prune removes the record and nothing else.
TEST_F(PruneTest, PlantedSymlinksNeverLeadPruneOutsideTheStateDir) {
  TempDir outside;
  write_text(outside / "canary", "still here\n");
  ASSERT_EQ(::mkdir((outside / "dir").c_str(), 0755), 0);
  write_text(outside / "dir/canary", "still here\n");
  std::string id = finished_session();
  const std::string dir = root() + "/" + id;
  ASSERT_EQ(::symlink(outside.path().c_str(), (dir + "/upper/to-outside").c_str()), 0);
  ASSERT_EQ(::symlink((outside / "dir").c_str(), (dir + "/upper/to-dir").c_str()), 0);
  ASSERT_EQ(::link((outside / "canary").c_str(), (dir + "/upper/hardlink").c_str()), 0);
  ASSERT_EQ(::rmdir((dir + "/snapshots").c_str()), 0);
  ASSERT_EQ(::symlink((outside / "dir").c_str(), (dir + "/snapshots").c_str()), 0);
  ASSERT_EQ(::mkdir((dir + "/upper/locked").c_str(), 0755), 0);
  write_text(dir + "/upper/locked/file", "x");
  ASSERT_EQ(::mkdir((dir + "/upper/locked/shut").c_str(), 0755), 0);
  write_text(dir + "/upper/locked/shut/file", "x");
  ASSERT_EQ(::chmod((dir + "/upper/locked/shut").c_str(), 0), 0);
  ASSERT_EQ(::chmod((dir + "/upper/locked").c_str(), 0555), 0);
  // Not a session, though named like one: a symlink in the sessions root.
  const std::string fake = "20260101-000000-abcdef";
  ASSERT_EQ(::symlink(outside.path().c_str(), (root() + "/" + fake).c_str()), 0);

  RunResult r = cordon({"prune", "--keep", "0", "--force"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_FALSE(exists(id)) << r.out;
  EXPECT_EQ(read_text(outside / "canary"), "still here\n");
  EXPECT_EQ(read_text(outside / "dir/canary"), "still here\n");
  struct stat st;
  ASSERT_EQ(::lstat((root() + "/" + fake).c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "not a session: left alone";
}

// A mount inside a record (as root: a bind mount of an outside directory) is neither entered nor
// removed: prune fails for that record, says why, and the outside stays whole.
TEST_F(PruneTest, AMountInsideARecordStopsItsRemoval) {
  CORDON_REQUIRE_ROOT();
  TempDir outside;
  write_text(outside / "canary", "still here\n");
  std::string id = finished_session();
  const std::string target = root() + "/" + id + "/upper/mounted";
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  ASSERT_EQ(::mount(outside.path().c_str(), target.c_str(), nullptr, MS_BIND, nullptr), 0);
  RunResult r = cordon({"prune", "--keep", "0", "--force"});
  EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;
  EXPECT_NE(r.err.find("a mount inside the record"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(outside / "canary"), "still here\n");
  ASSERT_EQ(::umount2(target.c_str(), MNT_DETACH), 0);
  r = cordon({"prune", "--keep", "0", "--force"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_FALSE(exists(id));
  EXPECT_EQ(read_text(outside / "canary"), "still here\n");
}

TEST_F(PruneTest, RunAppliesRetentionOncePerHourAndNeverToPendingChanges) {
  std::string old_clean = finished_session("a"), pending = pending_session();
  std::string recent = finished_session("b");
  age(old_clean, 40);
  age(pending, 40);
  RunResult r = cordon({"run", "-q", "--mode", "ro", "-w", ws_.path(), "--", "true"},
                       {"CORDON_RETENTION=30d"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_FALSE(exists(old_clean));
  EXPECT_TRUE(exists(pending));
  EXPECT_TRUE(exists(recent));
  // Within the hour no second pass runs.
  std::string another = finished_session("c");
  age(another, 40);
  r = cordon({"run", "-q", "--mode", "ro", "-w", ws_.path(), "--", "true"},
             {"CORDON_RETENTION=30d"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(exists(another));
  // Off with 0; a bad value is said and changes nothing.
  ASSERT_EQ(::unlink((root() + "/.retention").c_str()), 0);
  r = cordon({"run", "-q", "--mode", "ro", "-w", ws_.path(), "--", "true"}, {"CORDON_RETENTION=0"});
  EXPECT_TRUE(exists(another));
  r = cordon({"run", "-q", "--mode", "ro", "-w", ws_.path(), "--", "true"},
             {"CORDON_RETENTION=soon"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("CORDON_RETENTION=soon is not a duration"), std::string::npos) << r.err;
  EXPECT_TRUE(exists(another));
}

TEST_F(PruneTest, BadOptionsAreUsageErrorsAndHelpSaysTheExitStatus) {
  RunResult r = cordon({"prune", "--older-than", "banana"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("--older-than banana: not a duration"), std::string::npos) << r.err;
  r = cordon({"prune", "--keep", "many"});
  EXPECT_EQ(r.exit_code(), 125) << r.err;
  r = cordon({"prune", "--everything"});
  EXPECT_EQ(r.exit_code(), 125) << r.err;
  r = cordon({"prune", "--help"});
  EXPECT_EQ(r.exit_code(), 0);
  for (const char* s : {"--older-than", "--keep", "--dry-run", "--force", "Exit status: 0 done; 1",
                        "125", "CORDON_RETENTION"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  r = cordon({"prune"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find("no sessions yet"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cordon::testing
