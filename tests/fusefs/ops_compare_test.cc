// The same operation sequence against a native tmpfs directory and against a cordon-fs mount of
// the same starting tree: every result and errno must match, the lower layer must not change.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

std::string err() { return std::string("err:") + strerrorname_np(errno); }
std::string rc(int r) { return r == 0 ? "ok" : err(); }

// The starting tree: regular files, a nested dir, an empty dir, a symlink, a sparse file.
void populate(const std::string& root) {
  ::mkdir((root + "/d1").c_str(), 0755);
  ::mkdir((root + "/d1/sub").c_str(), 0750);
  ::mkdir((root + "/empty").c_str(), 0700);
  ::mkdir((root + "/tree").c_str(), 0755);
  write_file(root + "/f1", "0123456789abcdef");
  write_file(root + "/f2", "second file");
  write_file(root + "/f3", "third");
  write_file(root + "/d1/a", "in d1");
  write_file(root + "/d1/sub/deep", "deep content");
  write_file(root + "/tree/x", "x");
  write_file(root + "/tree/y", "y");
  ::chmod((root + "/f3").c_str(), 0640);
  ::symlink("f1", (root + "/s0").c_str());
}

std::string stat_str(const std::string& p) {
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0) {
    return err();
  }
  char buf[128];
  // A directory's st_size is filesystem-specific (tmpfs counts entries, the upper holds
  // whiteouts): not compared.
  std::snprintf(buf, sizeof(buf), "mode=%o nlink=%lu size=%ld", st.st_mode,
                static_cast<unsigned long>(st.st_nlink),
                S_ISDIR(st.st_mode) ? 0L : static_cast<long>(st.st_size));
  return buf;
}

std::string listing(const std::string& p) {
  DIR* d = ::opendir(p.c_str());
  if (d == nullptr) {
    return err();
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    names.push_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  std::string out;
  for (auto& n : names) {
    out += n + ",";
  }
  return out;
}

std::string cat(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) {
    return err();
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) {
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string pwrite_at(const std::string& p, int flags, const std::string& data, off_t off) {
  int fd = ::open(p.c_str(), flags, 0644);
  if (fd < 0) {
    return err();
  }
  ssize_t n =
      off < 0 ? ::write(fd, data.data(), data.size()) : ::pwrite(fd, data.data(), data.size(), off);
  std::string r = n < 0 ? err() : "wrote " + std::to_string(n);
  ::close(fd);
  return r;
}

struct Op {
  std::string name;
  std::function<std::string(const std::string&)> run;
};

std::vector<Op> operations() {
  std::vector<Op> ops;
  auto add = [&](std::string n, std::function<std::string(const std::string&)> f) {
    ops.push_back({std::move(n), std::move(f)});
  };
  add("read lower file", [](auto& r) { return cat(r + "/f1"); });
  add("stat lower file", [](auto& r) { return stat_str(r + "/f3"); });
  add("list root", [](auto& r) { return listing(r); });
  add("list nested", [](auto& r) { return listing(r + "/d1"); });
  add("overwrite middle", [](auto& r) { return pwrite_at(r + "/f1", O_WRONLY, "XY", 4); });
  add("read after write", [](auto& r) { return cat(r + "/f1"); });
  add("append", [](auto& r) { return pwrite_at(r + "/f2", O_WRONLY | O_APPEND, "+more", -1); });
  add("read appended", [](auto& r) { return cat(r + "/f2"); });
  add("truncate shrink", [](auto& r) { return rc(::truncate((r + "/f1").c_str(), 3)); });
  add("truncate grow", [](auto& r) { return rc(::truncate((r + "/f1").c_str(), 10)); });
  add("read truncated", [](auto& r) { return cat(r + "/f1"); });
  add("O_TRUNC open", [](auto& r) { return pwrite_at(r + "/f3", O_WRONLY | O_TRUNC, "new", -1); });
  add("stat after O_TRUNC", [](auto& r) { return stat_str(r + "/f3") + cat(r + "/f3"); });
  add("create excl",
      [](auto& r) { return pwrite_at(r + "/n1", O_WRONLY | O_CREAT | O_EXCL, "n", -1); });
  add("create excl again",
      [](auto& r) { return pwrite_at(r + "/n1", O_WRONLY | O_CREAT | O_EXCL, "n", -1); });
  add("create in lower subdir",
      [](auto& r) { return pwrite_at(r + "/d1/sub/new", O_WRONLY | O_CREAT, "sub new", -1); });
  add("parent mode kept", [](auto& r) { return stat_str(r + "/d1/sub"); });
  add("open missing", [](auto& r) { return cat(r + "/missing"); });
  add("unlink lower", [](auto& r) { return rc(::unlink((r + "/f2").c_str())); });
  add("unlinked gone", [](auto& r) { return stat_str(r + "/f2"); });
  add("unlink missing", [](auto& r) { return rc(::unlink((r + "/f2").c_str())); });
  add("unlink dir", [](auto& r) { return rc(::unlink((r + "/d1").c_str())); });
  add("recreate unlinked",
      [](auto& r) { return pwrite_at(r + "/f2", O_WRONLY | O_CREAT | O_EXCL, "reborn", -1); });
  add("list after recreate", [](auto& r) { return listing(r); });
  add("rmdir non-empty", [](auto& r) { return rc(::rmdir((r + "/d1").c_str())); });
  add("rmdir file", [](auto& r) { return rc(::rmdir((r + "/f1").c_str())); });
  add("rmdir lower empty", [](auto& r) { return rc(::rmdir((r + "/empty").c_str())); });
  add("empty dir gone", [](auto& r) { return stat_str(r + "/empty"); });
  add("empty out tree", [](auto& r) {
    return rc(::unlink((r + "/tree/x").c_str())) + rc(::unlink((r + "/tree/y").c_str()));
  });
  add("rmdir emptied lower dir", [](auto& r) { return rc(::rmdir((r + "/tree").c_str())); });
  add("mkdir over deleted dir", [](auto& r) { return rc(::mkdir((r + "/tree").c_str(), 0711)); });
  add("recreated dir is empty",
      [](auto& r) { return listing(r + "/tree") + stat_str(r + "/tree"); });
  add("mkdir existing", [](auto& r) { return rc(::mkdir((r + "/d1").c_str(), 0755)); });
  add("rename lower file",
      [](auto& r) { return rc(::rename((r + "/f3").c_str(), (r + "/f3r").c_str())); });
  add("renamed content", [](auto& r) { return cat(r + "/f3r") + stat_str(r + "/f3"); });
  add("rename over existing",
      [](auto& r) { return rc(::rename((r + "/f3r").c_str(), (r + "/f1").c_str())); });
  add("replaced content", [](auto& r) { return cat(r + "/f1") + stat_str(r + "/f3r"); });
  add("rename into dir",
      [](auto& r) { return rc(::rename((r + "/n1").c_str(), (r + "/d1/n1").c_str())); });
  add("rename noreplace existing", [](auto& r) {
    return rc(::renameat2(AT_FDCWD, (r + "/d1/n1").c_str(), AT_FDCWD, (r + "/d1/a").c_str(),
                          RENAME_NOREPLACE));
  });
  add("rename noreplace free", [](auto& r) {
    return rc(::renameat2(AT_FDCWD, (r + "/d1/n1").c_str(), AT_FDCWD, (r + "/d1/n2").c_str(),
                          RENAME_NOREPLACE));
  });
  add("rename exchange", [](auto& r) {
    return rc(::renameat2(AT_FDCWD, (r + "/d1/n2").c_str(), AT_FDCWD, (r + "/d1/a").c_str(),
                          RENAME_EXCHANGE));
  });
  add("exchanged", [](auto& r) { return cat(r + "/d1/a") + "|" + cat(r + "/d1/n2"); });
  add("rename exchange missing", [](auto& r) {
    return rc(::renameat2(AT_FDCWD, (r + "/d1/a").c_str(), AT_FDCWD, (r + "/d1/zz").c_str(),
                          RENAME_EXCHANGE));
  });
  add("rename file over dir",
      [](auto& r) { return rc(::rename((r + "/f1").c_str(), (r + "/d1").c_str())); });
  add("mkdir new", [](auto& r) { return rc(::mkdir((r + "/nd").c_str(), 0755)); });
  add("file in new dir",
      [](auto& r) { return pwrite_at(r + "/nd/f", O_WRONLY | O_CREAT, "ndf", -1); });
  add("rename new dir",
      [](auto& r) { return rc(::rename((r + "/nd").c_str(), (r + "/nd2").c_str())); });
  add("renamed dir content", [](auto& r) { return listing(r + "/nd2") + cat(r + "/nd2/f"); });
  add("rename dir onto non-empty",
      [](auto& r) { return rc(::rename((r + "/nd2").c_str(), (r + "/d1").c_str())); });
  add("hard link", [](auto& r) { return rc(::link((r + "/f1").c_str(), (r + "/l1").c_str())); });
  add("link count", [](auto& r) { return stat_str(r + "/l1") + stat_str(r + "/f1"); });
  add("write through link", [](auto& r) { return pwrite_at(r + "/l1", O_WRONLY, "LL", 0); });
  add("seen through other name", [](auto& r) { return cat(r + "/f1"); });
  add("link existing",
      [](auto& r) { return rc(::link((r + "/f1").c_str(), (r + "/l1").c_str())); });
  add("symlink", [](auto& r) { return rc(::symlink("d1/a", (r + "/s1").c_str())); });
  add("readlink", [](auto& r) {
    char b[256];
    ssize_t n = ::readlink((r + "/s1").c_str(), b, sizeof(b));
    return n < 0 ? err() : std::string(b, static_cast<size_t>(n));
  });
  add("read via symlink", [](auto& r) { return cat(r + "/s1") + cat(r + "/s0"); });
  add("chmod lower file", [](auto& r) { return rc(::chmod((r + "/d1/sub/deep").c_str(), 0604)); });
  add("chmod result",
      [](auto& r) { return stat_str(r + "/d1/sub/deep") + cat(r + "/d1/sub/deep"); });
  add("utimens", [](auto& r) {
    timespec t[2] = {{1000000000, 5}, {1200000000, 7}};
    return rc(::utimensat(AT_FDCWD, (r + "/d1/sub/deep").c_str(), t, 0));
  });
  add("utimens result", [](auto& r) {
    struct stat st;
    if (::stat((r + "/d1/sub/deep").c_str(), &st) != 0) return err();
    return std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " " +
           std::to_string(st.st_atim.tv_sec);
  });
  add("setxattr",
      [](auto& r) { return rc(::setxattr((r + "/f1").c_str(), "user.k", "v1", 2, 0)); });
  add("setxattr create existing",
      [](auto& r) { return rc(::setxattr((r + "/f1").c_str(), "user.k", "v2", 2, XATTR_CREATE)); });
  add("getxattr", [](auto& r) {
    char b[16];
    ssize_t n = ::getxattr((r + "/f1").c_str(), "user.k", b, sizeof(b));
    return n < 0 ? err() : std::string(b, static_cast<size_t>(n));
  });
  add("getxattr missing", [](auto& r) {
    char b[16];
    return ::getxattr((r + "/f1").c_str(), "user.none", b, sizeof(b)) < 0 ? err() : "ok";
  });
  add("listxattr", [](auto& r) {
    char b[256];
    ssize_t n = ::listxattr((r + "/f1").c_str(), b, sizeof(b));
    return n < 0 ? err() : std::string(b, static_cast<size_t>(n));
  });
  add("removexattr", [](auto& r) { return rc(::removexattr((r + "/f1").c_str(), "user.k")); });
  add("fallocate grow", [](auto& r) {
    int fd = ::open((r + "/fa").c_str(), O_RDWR | O_CREAT, 0644);
    int x = ::fallocate(fd, 0, 0, 65536);
    std::string s = x == 0 ? "ok" : err();
    ::close(fd);
    return s + stat_str(r + "/fa");
  });
  add("sparse + SEEK_DATA/SEEK_HOLE", [](auto& r) {
    int fd = ::open((r + "/sparse").c_str(), O_RDWR | O_CREAT, 0644);
    (void)!::pwrite(fd, "a", 1, 1 << 20);
    off_t data = ::lseek(fd, 0, SEEK_DATA);
    off_t hole = ::lseek(fd, 0, SEEK_HOLE);
    off_t past = ::lseek(fd, (2 << 20), SEEK_DATA);
    std::string s = std::to_string(data) + " " + std::to_string(hole) + " " + std::to_string(past) +
                    (past < 0 ? err() : "");
    ::close(fd);
    return s;
  });
  add("punch hole", [](auto& r) {
    int fd = ::open((r + "/fa").c_str(), O_RDWR);
    int x = ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096);
    std::string s = x == 0 ? "ok" : err();
    ::close(fd);
    return s + stat_str(r + "/fa");
  });
  add("copy_file_range", [](auto& r) {
    int in = ::open((r + "/d1/sub/deep").c_str(), O_RDONLY);
    int out = ::open((r + "/cfr").c_str(), O_WRONLY | O_CREAT, 0644);
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 100, 0);
    std::string s = n < 0 ? err() : std::to_string(n);
    ::close(in);
    ::close(out);
    return s + cat(r + "/cfr");
  });
  add("mkfifo",
      [](auto& r) { return rc(::mkfifo((r + "/fifo").c_str(), 0600)) + stat_str(r + "/fifo"); });
  add("delete lower then mkdir same name", [](auto& r) {
    return rc(::unlink((r + "/d1/sub/deep").c_str())) +
           rc(::mkdir((r + "/d1/sub/deep").c_str(), 0755)) + listing(r + "/d1/sub/deep");
  });
  add("rename dir over an emptied lower dir", [](auto& r) {
    return rc(::rmdir((r + "/d1/sub/deep").c_str())) + rc(::unlink((r + "/d1/sub/new").c_str())) +
           rc(::rename((r + "/nd2").c_str(), (r + "/d1/sub").c_str())) + listing(r + "/d1/sub") +
           cat(r + "/d1/sub/f");
  });
  add("fstat/ftruncate/fchmod of an unlinked open file", [](auto& r) {
    int fd = ::open((r + "/tmpopen").c_str(), O_RDWR | O_CREAT, 0644);
    (void)!::write(fd, "12345", 5);
    std::string s = rc(::unlink((r + "/tmpopen").c_str()));
    struct stat st;
    s += ::fstat(fd, &st) == 0 ? " size=" + std::to_string(st.st_size) : err();
    s += rc(::ftruncate(fd, 2)) + rc(::fchmod(fd, 0600));
    s += ::fstat(fd, &st) == 0
             ? " size=" + std::to_string(st.st_size) + " mode=" + std::to_string(st.st_mode & 0777)
             : err();
    char b[8] = {};
    s += " read=" + std::to_string(::pread(fd, b, sizeof(b), 0)) + b;
    ::close(fd);
    return s;
  });
  add("O_TMPFILE written then linked in", [](auto& r) {
    int fd = ::open((r + "/d1").c_str(), O_TMPFILE | O_RDWR, 0640);
    if (fd < 0) {
      return err();
    }
    std::string s = std::to_string(::write(fd, "made unnamed", 12));
    struct stat st;
    s += ::fstat(fd, &st) == 0 ? " nlink=" + std::to_string(st.st_nlink) : err();
    s += " " + listing(r + "/d1");
    std::string proc = "/proc/self/fd/" + std::to_string(fd);
    s += rc(
        ::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, (r + "/d1/named").c_str(), AT_SYMLINK_FOLLOW));
    s += ::fstat(fd, &st) == 0 ? " nlink=" + std::to_string(st.st_nlink) : err();
    ::close(fd);
    return s + " " + cat(r + "/d1/named") + " " + stat_str(r + "/d1/named") + listing(r + "/d1");
  });
  add("O_TMPFILE never linked, and O_EXCL refuses a link", [](auto& r) {
    int fd = ::open(r.c_str(), O_TMPFILE | O_WRONLY | O_EXCL, 0600);
    if (fd < 0) {
      return err();
    }
    std::string s = std::to_string(::write(fd, "gone", 4));
    std::string proc = "/proc/self/fd/" + std::to_string(fd);
    s += rc(::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, (r + "/excl").c_str(), AT_SYMLINK_FOLLOW));
    ::close(fd);
    return s + " " + listing(r);
  });
  add("O_TMPFILE on a file is ENOTDIR", [](auto& r) {
    return ::open((r + "/f2").c_str(), O_TMPFILE | O_RDWR, 0600) < 0 ? err() : "opened";
  });
  add("flock and OFD locks conflict between open files", [](auto& r) {
    int a = ::open((r + "/f2").c_str(), O_RDWR);
    int b = ::open((r + "/f2").c_str(), O_RDWR);
    std::string s = rc(::flock(a, LOCK_EX | LOCK_NB)) + rc(::flock(b, LOCK_EX | LOCK_NB)) +
                    rc(::flock(b, LOCK_SH | LOCK_NB)) + rc(::flock(a, LOCK_UN)) +
                    rc(::flock(b, LOCK_SH | LOCK_NB));
    struct flock l = {};
    l.l_type = F_WRLCK;
    l.l_whence = SEEK_SET;
    l.l_start = 0;
    l.l_len = 10;
    s += rc(::fcntl(a, F_OFD_SETLK, &l));
    struct flock q = l;
    s += rc(::fcntl(b, F_OFD_SETLK, &q));
    q = l;
    q.l_start = 10;
    s += rc(::fcntl(b, F_OFD_SETLK, &q));
    q = l;
    q.l_type = F_RDLCK;
    s += rc(::fcntl(b, F_OFD_GETLK, &q)) + " type=" + std::to_string(q.l_type) +
         " start=" + std::to_string(q.l_start);
    ::close(a);
    ::close(b);
    return s;
  });
  add("final root listing", [](auto& r) { return listing(r); });
  add("final d1 listing", [](auto& r) { return listing(r + "/d1") + listing(r + "/d1/sub"); });
  return ops;
}

void same_results_as_native(const std::string& policy) {
  MountedFs m(policy);
  populate(m.lower());
  std::string native = m.base("native");
  ::mkdir(native.c_str(), 0755);
  populate(native);
  ::chmod(m.lower().c_str(), 0755);
  std::string lower_before = tree_manifest(m.lower(), true);
  ASSERT_EQ(m.start(), "");
  for (const Op& op : operations()) {
    std::string want = op.run(native);
    std::string got = op.run(m.mnt());
    EXPECT_EQ(got, want) << "op: " << op.name;
  }
  EXPECT_EQ(tree_manifest(m.mnt()), tree_manifest(native));
  EXPECT_EQ(tree_manifest(m.lower(), true), lower_before) << "the lower layer was modified";
  // The same view after a remount from the upper layer alone.
  EXPECT_EQ(m.stop(), 0) << "cordon-fs exit status (ASan/LSan report in daemon.log)";
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(tree_manifest(m.mnt()), tree_manifest(native));
}

// With xattrs kept (filesystem.xattrs), as a local filesystem keeps them.
TEST(CowFsOps, SameResultsAsNativeDirectory) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  same_results_as_native(R"({"filesystem": {"deny": [], "protect": [], "xattrs": true}})");
}

// Without a byte quota, writers use FUSE passthrough (as root): the same results.
TEST(CowFsOps, SameResultsAsNativeDirectoryWithoutByteQuota) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  same_results_as_native(
      R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": 0}, "xattrs": true}})");
}

TEST(CowFsOps, DirectoryWithLowerContentRenameIsExdev) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": [], "protect": []}})");
  populate(m.lower());
  ASSERT_EQ(m.start(), "");
  // Documented: like kernel overlayfs without redirect_dir; mv(1) falls back to copy + delete.
  EXPECT_NE(::rename(m.mnt("d1").c_str(), m.mnt("d9").c_str()), 0);
  EXPECT_EQ(errno, EXDEV);
  auto r = cordon::testing::run_program({"mv", m.mnt("d1"), m.mnt("d9")});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(read_file(m.mnt("d9/sub/deep")), "deep content");
  EXPECT_NE(::access(m.mnt("d1").c_str(), F_OK), 0);
  EXPECT_EQ(read_file(m.lower("d1/sub/deep")), "deep content");
}

TEST(CowFsOps, StableInodeNumbersAcrossCopyUp) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": [], "protect": []}})");
  populate(m.lower());
  ASSERT_EQ(m.start(), "");
  struct stat before, after;
  ASSERT_EQ(::stat(m.mnt("d1/a").c_str(), &before), 0);
  write_file(m.mnt("d1/a"), "changed");
  ASSERT_EQ(::stat(m.mnt("d1/a").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  // readdir's d_ino agrees with stat's st_ino.
  DIR* d = ::opendir(m.mnt("d1").c_str());
  ASSERT_NE(d, nullptr);
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    if (std::string(e->d_name) == "a") {
      found = true;
      EXPECT_EQ(e->d_ino, after.st_ino);
    }
  }
  ::closedir(d);
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace cordon::fusefs::testing
