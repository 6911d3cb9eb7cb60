// Confused-deputy probes: the daemon runs with more privilege than the caller (here root vs
// nobody) and must never follow a path the caller controls on the host side.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";
// xattrs kept (filesystem.xattrs): the xattr ops reach the daemon, which must act on the link.
constexpr const char* kXattrPolicy =
    R"({"filesystem": {"deny": [], "protect": [], "xattrs": true}})";
constexpr uid_t kNobody = 65534;

// Races a writer against a swapper that exchanges a directory with a symlink to `outside`, as an
// unprivileged caller. Bounded in iterations.
constexpr const char* kRaceScript = R"PY(
import ctypes, os, sys, threading
M, O = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
os.chdir(M)
def swapper():
    for i in range(2000):
        try: os.mkdir('d')
        except OSError: pass
        try: os.symlink(O, 's')
        except OSError: pass
        libc.renameat2(AT_FDCWD, b'd', AT_FDCWD, b's', RENAME_EXCHANGE)
        libc.renameat2(AT_FDCWD, b'lowerdir/sub', AT_FDCWD, b's', RENAME_EXCHANGE)
def writer():
    for i in range(2000):
        for p in ('d/f%d' % (i % 7), 's/f%d' % (i % 7), 'lowerdir/sub/g%d' % (i % 5)):
            try:
                with open(p, 'a') as f: f.write('x')
            except OSError: pass
        try: os.mkdir('d/sub%d' % (i % 3))
        except OSError: pass
t1, t2 = threading.Thread(target=swapper), threading.Thread(target=writer)
t1.start(); t2.start(); t1.join(); t2.join()
print('done')
)PY";

TEST(CowFsSecurity, SymlinkSwapRaceNeverWritesOutside) {
  CORDON_REQUIRE_ROOT();
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  std::string outside = m.base("outside");
  ::mkdir(outside.c_str(), 0755);  // root-owned: nobody cannot write here itself
  write_file(outside + "/victim", "do not touch");
  ::chmod(m.lower().c_str(), 0777);
  ::mkdir(m.lower("lowerdir").c_str(), 0777);
  ::mkdir(m.lower("lowerdir/sub").c_str(), 0777);
  write_file(m.lower("lowerdir/sub/existing"), "e");
  ::chmod(m.lower("lowerdir").c_str(), 0777);  // mkdir's mode went through the umask
  ::chmod(m.lower("lowerdir/sub").c_str(), 0777);
  ::chmod(m.base("").c_str(), 0755);
  std::string lower_before = tree_manifest(m.lower(), true);
  std::string outside_before = tree_manifest(outside, true);
  ASSERT_EQ(m.start({"--allow-other"}), "");
  auto r = cordon::testing::run_program(
      {"/usr/bin/python3", "-c", kRaceScript, m.mnt(), outside},
      {.deadline = std::chrono::seconds(120), .uid = kNobody, .gid = kNobody});
  EXPECT_EQ(r.out, "done\n") << r.err;
  // The race did real work through the view (copy-ups and creates as nobody).
  EXPECT_EQ(::access(m.upper("lowerdir/sub/g0").c_str(), F_OK), 0);
  EXPECT_EQ(tree_manifest(outside, true), outside_before) << "the daemon wrote outside the layers";
  EXPECT_EQ(tree_manifest(m.lower(), true), lower_before);
}

TEST(CowFsSecurity, LinksAndRenamesAcrossTheBoundaryFail) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  std::string outside = m.base("outside");
  ::mkdir(outside.c_str(), 0755);
  write_file(outside + "/secret", "host secret");
  write_file(m.lower("inside"), "in");
  ASSERT_EQ(m.start(), "");
  EXPECT_NE(::link((outside + "/secret").c_str(), m.mnt("stolen").c_str()), 0);
  EXPECT_EQ(errno, EXDEV);
  int fd = ::open((outside + "/secret").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  EXPECT_NE(::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, m.mnt("stolen").c_str(), AT_SYMLINK_FOLLOW),
            0);
  EXPECT_EQ(errno, EXDEV);
  ::close(fd);
  EXPECT_NE(::rename(m.mnt("inside").c_str(), (outside + "/moved").c_str()), 0);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_NE(::rename((outside + "/secret").c_str(), m.mnt("moved-in").c_str()), 0);
  EXPECT_EQ(errno, EXDEV);
  // An O_PATH fd of a mount dir cannot reach above the view with "..": the kernel walks it.
  int dfd = ::open(m.mnt().c_str(), O_PATH | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  struct stat st;
  EXPECT_NE(::fstatat(dfd, "../outside/secret/..", &st, 0), 0);
  ::close(dfd);
  EXPECT_NE(::access(m.mnt("stolen").c_str(), F_OK), 0);
  EXPECT_EQ(read_file(outside + "/secret"), "host secret");
}

TEST(CowFsSecurity, CopyUpOfASymlinkCopiesTheLinkNotItsTarget) {
  CORDON_REQUIRE_ROOT();
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kXattrPolicy);
  std::string outside = m.base("outside");
  ::mkdir(outside.c_str(), 0755);
  write_file(outside + "/target", "outside data");
  ::chmod((outside + "/target").c_str(), 0600);
  ASSERT_EQ(::symlink((outside + "/target").c_str(), m.lower("link").c_str()), 0);
  ASSERT_EQ(::symlink(outside.c_str(), m.lower("dirlink").c_str()), 0);
  std::string outside_before = tree_manifest(outside, true);
  ASSERT_EQ(m.start({"--allow-other"}), "");
  // Operations on the link itself reach the daemon; they must act on the link.
  ASSERT_EQ(::lchown(m.mnt("link").c_str(), 1234, 1234), 0);
  timespec t[2] = {{1000, 0}, {2000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, m.mnt("link").c_str(), t, AT_SYMLINK_NOFOLLOW), 0);
  struct stat st;
  ASSERT_EQ(::lstat(m.upper("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);
  EXPECT_NE(::lsetxattr(m.mnt("link").c_str(), "user.x", "1", 1, 0), 0);
  // An unprivileged caller following the symlinks is held by its own permissions.
  auto r = cordon::testing::run_program(
      {"sh", "-c", "cat " + m.mnt("link") + "; echo x > " + m.mnt("dirlink/new") + "; echo rc=$?"},
      {.uid = kNobody, .gid = kNobody});
  EXPECT_EQ(r.out.find("outside data"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rc=0"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  EXPECT_EQ(::unlink(m.mnt("link").c_str()), 0);
  EXPECT_EQ(tree_manifest(outside, true), outside_before);
  struct stat lst;
  ASSERT_EQ(::lstat(m.lower("link").c_str(), &lst), 0);
  EXPECT_TRUE(S_ISLNK(lst.st_mode));
  EXPECT_EQ(lst.st_uid, 0u);
}

}  // namespace
}  // namespace cordon::fusefs::testing
