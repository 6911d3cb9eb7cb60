// Real tools inside the sandbox, on the copy-on-write workspace served by cordon-fs: git
// (init, add, commit, branch, checkout, clone), tar of 2000 files and back, a python venv,
// sqlite3 in WAL mode, make of a small C project (and an incremental rebuild); xattrs as
// filesystem.xattrs says. Each result is checked inside; the real workspace stays empty until
// `cordon commit last`, after which the host's own git reads the committed repository.
// tests/fusefs/tools_test.cc runs the same tools on a bare mount.
#include <gtest/gtest.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/xattr_names.h"

namespace cordon::testing {
namespace {

bool fuse_usable() { return ::access("/dev/fuse", R_OK | W_OK) == 0; }

constexpr const char* kScript = R"SH(
set -eu
export HOME="$PWD/home" GIT_CONFIG_NOSYSTEM=1 LC_ALL=C
mkdir -p "$HOME"
git config --global user.name t
git config --global user.email t@t
# git: init, commit, branch, checkout, clone
git init -q -b main repo
cd repo
for i in $(seq 1 50); do echo "line $i" > "f$i.txt"; done
git add -A
git commit -qm one
git checkout -qb feature
echo changed > f1.txt
git commit -qam two
git checkout -q main
echo "main f1: $(cat f1.txt)"
cd ..
git clone -q repo clone
echo "clone main: $(git -C clone rev-list --count HEAD)"
echo "clone feature: $(git -C clone rev-list --count origin/feature)"
git -C clone fsck --strict > /dev/null && echo "fsck ok"
# tar of 2000 files, out and back in
for d in $(seq 1 20); do
  mkdir -p "t/d$d"
  for f in $(seq 1 100); do echo "$d/$f" > "t/d$d/$f"; done
done
tar cf t.tar t
mkdir u
tar xf t.tar -C u
diff -r t u/t && echo "tar ok: $(find u -type f | wc -l) files"
# python venv
python3 -m venv --without-pip venv
venv/bin/python -c 'import sys; print("venv", sys.prefix != sys.base_prefix)'
# sqlite3 in WAL mode, readers and a writer
sqlite3 db.sqlite 'PRAGMA journal_mode=WAL;' 'CREATE TABLE t(x INTEGER);' > /dev/null
for i in $(seq 1 20); do sqlite3 db.sqlite "INSERT INTO t VALUES($i);"; done
echo "sqlite sum: $(sqlite3 db.sqlite 'SELECT sum(x) FROM t;') $(sqlite3 db.sqlite 'PRAGMA journal_mode;')"
# make of a small C project, then an incremental rebuild
mkdir c
printf 'int add(int a, int b);\n' > c/util.h
printf '#include "util.h"\nint add(int a, int b) { return a + b; }\n' > c/util.c
printf '#include <stdio.h>\n#include "util.h"\nint main(void) { printf("sum %%d\\n", add(40, 2)); return 0; }\n' > c/main.c
printf 'prog: main.o util.o\n\tcc -o prog main.o util.o\n%%.o: %%.c util.h\n\tcc -c $<\n' > c/Makefile
make -s -C c
./c/prog
sleep 1
printf '#include "util.h"\nint add(int a, int b) { return a * b; }\n' > c/util.c
echo "rebuilt: $(make -C c | grep -c '^cc')"
./c/prog
)SH";

TEST(CowTools, GitTarVenvSqliteAndMakeInsideTheSandbox) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  f.make_workspace_owned();
  // git init writes .git/config and hooks, which the default policy protects.
  write_text(f.home() + "/p.json",
             R"({"version": 1, "filesystem": {"mode": "cow", "protect": []}})");
  RunResult r = f.run({"-q", "--policy", f.home() + "/p.json"}, {"/bin/sh", "-c", kScript},
                      RunSpec{.deadline = std::chrono::seconds(240)});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "main f1: line 1\n"
            "clone main: 1\n"
            "clone feature: 2\n"
            "fsck ok\n"
            "tar ok: 2000 files\n"
            "venv True\n"
            "sqlite sum: 210 wal\n"
            "sum 42\n"
            "rebuilt: 2\n"
            "sum 80\n")
      << r.err;
  // The real workspace saw none of it.
  EXPECT_EQ(::access((f.ws() + "/repo").c_str(), F_OK), -1);
  RunResult c =
      run_program({cordon_bin(), "commit", "last"}, RunSpec{.env = f.env(), .cwd = f.ws()});
  ASSERT_EQ(c.exit_code(), 0) << c.err;
  // The committed repository is whole for the host's own git.
  RunResult log = run_program(
      {"git", "-c", "safe.directory=*", "-C", f.ws() + "/repo", "rev-list", "--count", "feature"},
      RunSpec{.env = f.env()});
  EXPECT_EQ(log.out, "2\n") << log.err;
  RunResult fsck =
      run_program({"git", "-c", "safe.directory=*", "-C", f.ws() + "/repo", "fsck", "--strict"},
                  RunSpec{.env = f.env()});
  EXPECT_EQ(fsck.exit_code(), 0) << fsck.err;
  EXPECT_EQ(read_text(f.ws() + "/u/t/d7/42"), "7/42\n");
}

// filesystem.xattrs through `cordon run` and `cordon commit`: off (the default), setting an
// xattr in the workspace is refused as unsupported, none is listed, and the committed file has
// none; with "xattrs": true the xattr is there inside and on the host after the commit.
constexpr const char* kXattrScript = R"PY(
import os
open("f", "w").write("data\n")
for what, call in (("set", lambda: os.setxattr("f", "user.x", b"1")),
                   ("get", lambda: os.getxattr("f", "user.x")),
                   ("list", lambda: os.listxattr("f"))):
    try:
        print(what, call())
    except OSError as e:
        print(what, e.strerror)
)PY";

TEST(CowTools, XattrsAreRefusedUnlessThePolicyKeepsThem) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "xattrs: true" : "xattrs: default");
    SandboxFixture f;
    f.make_workspace_owned();
    write_text(f.home() + "/p.json", std::string(R"({"version": 1, "filesystem": {"mode": "cow")") +
                                         (keep ? R"(, "xattrs": true}})" : "}}"));
    RunResult r = f.run({"-q", "--policy", f.home() + "/p.json"}, {"python3", "-c", kXattrScript});
    ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
    EXPECT_EQ(r.out, keep ? "set None\nget b'1'\nlist ['user.x']\n"
                          : "set Operation not supported\nget Operation not supported\n"
                            "list Operation not supported\n")
        << r.err;
    RunResult c =
        run_program({cordon_bin(), "commit", "last"}, RunSpec{.env = f.env(), .cwd = f.ws()});
    ASSERT_EQ(c.exit_code(), 0) << c.err;
    EXPECT_EQ(read_text(f.ws() + "/f"), "data\n");
    EXPECT_EQ(xattr_names(f.ws() + "/f"),
              keep ? std::vector<std::string>{"user.x"} : std::vector<std::string>{});
  }
}

}  // namespace
}  // namespace cordon::testing
