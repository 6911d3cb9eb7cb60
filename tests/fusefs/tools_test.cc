// Real tools on a cordon-fs mount: git, tar of thousands of files, sqlite3 in WAL mode, make of a
// C project, a python venv. Each checks its result, and the lower layer stays untouched.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

// git init writes .git/config and .git/hooks: the default protect list would refuse them.
constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";

cordon::testing::RunResult sh(const std::string& script, const std::string& cwd) {
  return cordon::testing::run_program(
      {"sh", "-ec", script},
      {.env = std::vector<std::string>{"PATH=/usr/bin:/bin:/usr/local/bin", "HOME=" + cwd,
                                       "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t",
                                       "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
                                       "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C"},
       .deadline = std::chrono::seconds(240),
       .cwd = cwd});
}

TEST(CowFsTools, GitInitAddCommitCheckout) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("src").c_str(), 0755);
  for (int i = 0; i < 50; i++) {
    write_file(m.lower("src/f" + std::to_string(i) + ".txt"), "line " + std::to_string(i) + "\n");
  }
  std::string lower_before = tree_manifest(m.lower(), true);
  ASSERT_EQ(m.start(), "");
  auto r =
      sh("git init -q -b main . && git add -A && git commit -qm first && "
         "git checkout -qb topic && echo changed > src/f1.txt && git rm -q src/f2.txt && "
         "git commit -qam second && git checkout -q main && cat src/f1.txt && "
         "test -f src/f2.txt && git status --porcelain && git log --oneline | wc -l && "
         "git fsck --no-progress 2>&1 && git gc -q && git checkout -q topic && cat src/f1.txt",
         m.mnt());
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "line 1\n1\nchanged\n");
  EXPECT_EQ(tree_manifest(m.lower(), true), lower_before);
}

TEST(CowFsTools, TarOfThousandsOfFilesRoundTrips) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(m.start(), "");
  std::string src = m.base("tarsrc");
  ::mkdir(src.c_str(), 0755);
  auto r =
      sh("for d in $(seq 1 30); do mkdir d$d; for f in $(seq 1 100); do echo $d-$f > d$d/f$f; "
         "done; done; tar cf ../t.tar .",
         src);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  r = sh("mkdir x && cd x && tar xf " + m.base("t.tar") + " && cd .. && tar cf " +
             m.base("t2.tar") + " -C x . && find x -type f | wc -l && rm -rf x && ls",
         m.mnt());
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "3000\n");
  r = sh("mkdir a b && tar xf t.tar -C a && tar xf t2.tar -C b && diff -r a b && echo same",
         m.base(""));
  EXPECT_EQ(r.out, "same\n") << r.err;
}

TEST(CowFsTools, Sqlite3WithWal) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(m.start(), "");
  // Two writers at once share the WAL index (-shm, mmapped MAP_SHARED) and its locks.
  auto r =
      sh("sqlite3 db 'PRAGMA journal_mode=WAL; CREATE TABLE t(x);' && "
         "w() { for i in $(seq 1 20); do sqlite3 -cmd '.timeout 10000' db "
         "\"INSERT INTO t VALUES($1$i);\"; done; }; "
         "w 1 & w 2 & wait && "
         "sqlite3 db 'SELECT count(*) FROM t; PRAGMA integrity_check;' && "
         "ls db*",
         m.mnt());
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  // The last connection checkpoints and removes -wal and -shm.
  EXPECT_EQ(r.out, "wal\n40\nok\ndb\n");
}

TEST(CowFsTools, MakeOfASmallCProject) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("a.c"), "int twice(int x) { return 2 * x; }\n");
  write_file(
      m.lower("main.c"),
      "#include <stdio.h>\nint twice(int);\nint main(void){printf(\"%d\\n\", twice(21));}\n");
  write_file(m.lower("Makefile"), "prog: a.o main.o\n\tcc -o $@ $^\n%.o: %.c\n\tcc -c -o $@ $<\n");
  std::string lower_before = tree_manifest(m.lower(), true);
  ASSERT_EQ(m.start(), "");
  auto r = sh("make -s && ./prog && sleep 1 && touch a.c && make && make -q && echo up-to-date",
              m.mnt());
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "42\ncc -c -o a.o a.c\ncc -o prog a.o main.o\nup-to-date\n");
  EXPECT_EQ(tree_manifest(m.lower(), true), lower_before);
}

TEST(CowFsTools, PythonVenv) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(m.start(), "");
  auto r =
      sh("python3 -m venv --without-pip venv && ./venv/bin/python -c "
         "'import sys; print(sys.prefix != sys.base_prefix)'",
         m.mnt());
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "True\n");
}

}  // namespace
}  // namespace cordon::fusefs::testing
