// The upper layer's format seen from outside: whiteouts, opaque dirs, reserved names, the lower
// layer untouched, and crash safety of copy-up under kill -9.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";
// The view keeps xattrs only when the policy says so (xattrs_test.cc has the default, off).
constexpr const char* kXattrPolicy =
    R"({"filesystem": {"deny": [], "protect": [], "xattrs": true}})";

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return out;
  }
  while (dirent* e = ::readdir(d)) {
    out.push_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CowFsLayers, DeleteLowerFileLeavesWhiteoutAndLowerIntact) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("dir").c_str(), 0755);
  write_file(m.lower("dir/gone"), "lower bytes");
  write_file(m.lower("dir/kept"), "kept");
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::unlink(m.mnt("dir/gone").c_str()), 0);
  EXPECT_NE(::access(m.mnt("dir/gone").c_str(), F_OK), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(names_in(m.mnt("dir")), (std::vector<std::string>{".", "..", "kept"}));
  EXPECT_EQ(read_file(m.lower("dir/gone")), "lower bytes");
  struct stat st;
  ASSERT_EQ(::stat(m.upper("dir/.wh.gone").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  // rmdir of a dir that is empty in the view but not in the lower, then mkdir: opaque.
  ASSERT_EQ(::unlink(m.mnt("dir/kept").c_str()), 0);
  ASSERT_EQ(::rmdir(m.mnt("dir").c_str()), 0);
  ASSERT_EQ(::mkdir(m.mnt("dir").c_str(), 0755), 0);
  EXPECT_EQ(names_in(m.mnt("dir")), (std::vector<std::string>{".", ".."}));
  EXPECT_EQ(::access(m.upper("dir/.wh..wh..opq").c_str(), F_OK), 0);
  EXPECT_EQ(read_file(m.lower("dir/kept")), "kept");
  // The same after a remount (state comes from the upper layer only).
  EXPECT_EQ(m.stop(), 0) << "cordon-fs exit status (ASan/LSan report in daemon.log)";
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(names_in(m.mnt("dir")), (std::vector<std::string>{".", ".."}));
}

TEST(CowFsLayers, ReaderOpenedBeforeCopyUpSeesTheCopiedUpBytes) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("f"), "lower");
  ASSERT_EQ(m.start(), "");
  int rfd = ::open(m.mnt("f").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(rfd, 0);
  char buf[16] = {};
  ASSERT_EQ(::pread(rfd, buf, sizeof(buf), 0), 5);
  EXPECT_EQ(std::string(buf, 5), "lower");
  int wfd = ::open(m.mnt("f").c_str(), O_WRONLY | O_CLOEXEC);  // copies the file up
  ASSERT_GE(wfd, 0);
  ASSERT_EQ(::pwrite(wfd, "UPPER", 5, 0), 5);
  ::close(wfd);
  // Drop the cached pages so the read reaches the daemon through the reader's own handle.
  ASSERT_EQ(::posix_fadvise(rfd, 0, 0, POSIX_FADV_DONTNEED), 0);
  std::memset(buf, 0, sizeof(buf));
  ASSERT_EQ(::pread(rfd, buf, sizeof(buf), 0), 5);
  EXPECT_EQ(std::string(buf, 5), "UPPER");
  ::close(rfd);
  EXPECT_EQ(read_file(m.lower("f")), "lower");
}

// Small files opened for reading have their bytes pushed into the kernel's page cache with the
// open; a writer racing with that first open must never have its bytes replaced by older ones.
TEST(CowFsLayers, PrimedPageCacheNeverHidesAConcurrentWrite) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  constexpr int kFiles = 300;
  for (int i = 0; i < kFiles; i++) {
    write_file(m.lower("p" + std::to_string(i)), "lower version of " + std::to_string(i));
  }
  ASSERT_EQ(m.start(), "");
  for (int i = 0; i < kFiles; i++) {
    std::string path = m.mnt("p" + std::to_string(i));
    std::string want = "written " + std::to_string(i) + std::string(i % 7, '!');
    std::atomic<bool> opening{false};
    std::thread reader([&] {
      opening = true;
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      char b[64];
      if (fd >= 0) {
        (void)!::read(fd, b, sizeof(b));
        ::close(fd);
      }
    });
    while (!opening) {
    }
    // The write lands at varying points of the reader's open (and its priming).
    std::this_thread::sleep_for(std::chrono::microseconds((i * 37) % 1500));
    int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, want.data(), want.size()), static_cast<ssize_t>(want.size()));
    ::close(fd);
    reader.join();
    EXPECT_EQ(read_file(path), want) << path;
    EXPECT_EQ(read_file(m.upper("p" + std::to_string(i))), want) << path;
  }
}

TEST(CowFsLayers, ReservedNamesCannotBeSeenOrMade) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("f"), "x");
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::unlink(m.mnt("f").c_str()), 0);  // makes upper/.wh.f
  write_file(m.mnt("g"), "y");
  // Not visible by name, not listed.
  EXPECT_NE(::access(m.mnt(".wh.f").c_str(), F_OK), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_NE(::access(m.mnt(".wh..wh..opq").c_str(), F_OK), 0);
  EXPECT_EQ(names_in(m.mnt()), (std::vector<std::string>{".", "..", "g"}));
  // Not creatable by any op.
  EXPECT_LT(::open(m.mnt(".wh.g").c_str(), O_CREAT | O_WRONLY, 0644), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::mkdir(m.mnt(".wh..wh..opq").c_str(), 0755), 0);
  EXPECT_NE(::symlink("x", m.mnt(".wh.x").c_str()), 0);
  EXPECT_NE(::link(m.mnt("g").c_str(), m.mnt(".wh.g").c_str()), 0);
  EXPECT_NE(::rename(m.mnt("g").c_str(), m.mnt(".wh.g").c_str()), 0);
  EXPECT_NE(::mkfifo(m.mnt(".wh.p").c_str(), 0600), 0);
  // Deleting "g" must not be forgeable: its whiteout name is unreachable, g still readable.
  EXPECT_EQ(read_file(m.mnt("g")), "y");
  // ".." and "." are never looked up by name by the daemon; the view's root has no way up.
  struct stat a, b;
  ASSERT_EQ(::stat(m.mnt("..").c_str(), &a), 0);
  ASSERT_EQ(::stat(m.base("").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
}

TEST(CowFsLayers, CopyUpPreservesModeTimesXattrsAndRecordsOrigin) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("a").c_str(), 0751);
  ::mkdir(m.lower("a/b").c_str(), 0705);
  write_file(m.lower("a/b/file"), "original");
  ::chmod(m.lower("a/b/file").c_str(), 0640);
  ASSERT_EQ(::setxattr(m.lower("a/b/file").c_str(), "user.tag", "t1", 2, 0), 0);
  timespec t[2] = {{1500000000, 1}, {1600000000, 2}};
  ASSERT_EQ(::utimensat(AT_FDCWD, m.lower("a/b/file").c_str(), t, 0), 0);
  struct stat lst;
  ASSERT_EQ(::stat(m.lower("a/b/file").c_str(), &lst), 0);
  ASSERT_EQ(m.start(), "");
  // chmod-only: a metadata change still copies the bytes up.
  ASSERT_EQ(::chmod(m.mnt("a/b/file").c_str(), 0600), 0);
  struct stat ust, da, db;
  ASSERT_EQ(::stat(m.upper("a/b/file").c_str(), &ust), 0);
  EXPECT_EQ(ust.st_mode & 07777, 0600u);
  EXPECT_EQ(ust.st_mtim.tv_sec, 1600000000);
  EXPECT_EQ(read_file(m.upper("a/b/file")), "original");
  char v[8] = {};
  EXPECT_EQ(::getxattr(m.upper("a/b/file").c_str(), "user.tag", v, sizeof(v)), 2);
  EXPECT_EQ(std::string(v), "t1");
  ASSERT_EQ(::stat(m.upper("a").c_str(), &da), 0);
  ASSERT_EQ(::stat(m.upper("a/b").c_str(), &db), 0);
  EXPECT_EQ(da.st_mode & 07777, 0751u);
  EXPECT_EQ(db.st_mode & 07777, 0705u);
  std::string origin = read_file(m.upper("a/b/.wh..wh.orig.file"));
  // inode, size, mtime, then mode, uid and gid: a host chmod or chown is a conflict too.
  EXPECT_EQ(origin, std::to_string(lst.st_ino) + " 8 " +
                        std::to_string(1600000000LL * 1000000000 + 2) + " " +
                        std::to_string(lst.st_mode & 07777) + " " + std::to_string(lst.st_uid) +
                        " " + std::to_string(lst.st_gid) + "\n");
  EXPECT_EQ(read_file(m.lower("a/b/file")), "original");
}

// kill -9 of the daemon in the middle of copy-ups of many large lower files: afterwards every
// upper file is either absent (copy-up never finished) or a complete copy plus what the workload
// appended; temp files are hidden and cleaned at the next start.
// The kernel asks security.capability before the first write(2) of a new file and at every
// chown: a capability set on a file made through the view must be seen there, and be removed by
// the next write(2) as on a local filesystem (any shortcut in answering must keep this).
TEST(CowFsLayers, CapabilitiesOfANewFileAreSeenAndKilledByWrite) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  CORDON_REQUIRE(::geteuid() == 0, "setting security.capability needs CAP_SETFCAP (run as root)");
  MountedFs m(kXattrPolicy);
  ASSERT_EQ(m.start(), "");
  int fd = ::open(m.mnt("tool").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "v1", 2), 2);
  char v[64];
  EXPECT_EQ(::getxattr(m.mnt("tool").c_str(), "security.capability", v, sizeof(v)), -1);
  EXPECT_EQ(errno, ENODATA);
  // VFS_CAP_REVISION_2 with the effective bit, permitted = CAP_NET_RAW (bit 13).
  const unsigned char caps[20] = {0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0,
                                  0,    0, 0, 0,    0, 0,    0, 0, 0, 0};
  ASSERT_EQ(::setxattr(m.mnt("tool").c_str(), "security.capability", caps, sizeof(caps), 0), 0)
      << std::strerror(errno);
  ASSERT_EQ(::getxattr(m.mnt("tool").c_str(), "security.capability", v, sizeof(v)),
            static_cast<ssize_t>(sizeof(caps)));
  EXPECT_EQ(std::memcmp(v, caps, sizeof(caps)), 0);
  ASSERT_EQ(::getxattr(m.upper("tool").c_str(), "security.capability", v, sizeof(v)),
            static_cast<ssize_t>(sizeof(caps)));
  // A chown keeps asking (and the answer stays right); a write removes the capability.
  ASSERT_EQ(::fchown(fd, 0, 0), 0);
  ASSERT_EQ(::pwrite(fd, "v2", 2, 0), 2);
  ::close(fd);
  EXPECT_EQ(::getxattr(m.mnt("tool").c_str(), "security.capability", v, sizeof(v)), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(::getxattr(m.upper("tool").c_str(), "security.capability", v, sizeof(v)), -1);
  EXPECT_EQ(read_file(m.upper("tool")), "v2");
}

// The daemon answers the kernel's security.capability probes of files it made without a syscall
// while it knows there is none: the answer must follow every way a capability can appear on such
// a file (another hard link's setxattr, a rollback to a tree where the name has one) and go away
// with removexattr.
TEST(CowFsLayers, CapabilityAnswersStayExactAcrossLinksRemovalAndRollback) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  CORDON_REQUIRE(::geteuid() == 0, "setting security.capability needs CAP_SETFCAP (run as root)");
  MountedFs m(kXattrPolicy);
  ASSERT_EQ(m.start(), "");
  const unsigned char caps[20] = {0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0,
                                  0,    0, 0, 0,    0, 0,    0, 0, 0, 0};
  char v[64];
  auto has_caps = [&](const std::string& path) {
    ssize_t n = ::getxattr(path.c_str(), "security.capability", v, sizeof(v));
    if (n < 0) {
      EXPECT_EQ(errno, ENODATA) << path;
      return false;
    }
    EXPECT_EQ(n, static_cast<ssize_t>(sizeof(caps)));
    EXPECT_EQ(std::memcmp(v, caps, sizeof(caps)), 0);
    return true;
  };
  write_file(m.mnt("t"), "t");
  EXPECT_FALSE(has_caps(m.mnt("t")));
  ASSERT_EQ(::link(m.mnt("t").c_str(), m.mnt("t2").c_str()), 0);
  ASSERT_EQ(::setxattr(m.mnt("t2").c_str(), "security.capability", caps, sizeof(caps), 0), 0)
      << std::strerror(errno);
  EXPECT_TRUE(has_caps(m.mnt("t")));
  ASSERT_EQ(::removexattr(m.mnt("t").c_str(), "security.capability"), 0);
  EXPECT_FALSE(has_caps(m.mnt("t2")));
  ASSERT_EQ(::setxattr(m.mnt("t").c_str(), "security.capability", caps, sizeof(caps), 0), 0);
  ASSERT_EQ(::unlink(m.mnt("t2").c_str()), 0);
  auto reply = nlohmann::json::parse(m.control(R"({"op":"snapshot","name":"capped"})"));
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  // A new file under the same name (no capability), kept open so its node lives through the
  // rollback, which restores the capped file under that name.
  ASSERT_EQ(::unlink(m.mnt("t").c_str()), 0);
  int fd = ::open(m.mnt("t").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "new", 3), 3);
  EXPECT_FALSE(has_caps(m.mnt("t")));
  EXPECT_EQ(::fgetxattr(fd, "security.capability", v, sizeof(v)), -1);
  reply = nlohmann::json::parse(m.control(R"({"op":"rollback","name":"capped"})"));
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_TRUE(has_caps(m.mnt("t")));
  EXPECT_EQ(read_file(m.mnt("t")), "t");
  ::close(fd);
  EXPECT_TRUE(has_caps(m.mnt("t")));
  EXPECT_TRUE(has_caps(m.upper("t")));
}

// Attribute changes by name reach the object itself whether or not it is open (an open handle's
// fd serves them), after an unlink through the open fd, and on a symlink never its target.
TEST(CowFsLayers, AttributeChangesByNameOpenOrUnlinkedHitTheObject) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("low"), "lower bytes");
  ASSERT_EQ(m.start(), "");
  int fd = ::open(m.mnt("f").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(m.mnt("f").c_str(), 0751), 0);
  timespec tv[2] = {{1000000, 5}, {2000000, 7}};
  ASSERT_EQ(::utimensat(AT_FDCWD, m.mnt("f").c_str(), tv, 0), 0);
  struct stat st, ust;
  ASSERT_EQ(::stat(m.mnt("f").c_str(), &st), 0);
  ASSERT_EQ(::stat(m.upper("f").c_str(), &ust), 0);
  for (const struct stat* s : {&st, &ust}) {
    EXPECT_EQ(s->st_mode & 07777, 0751u);
    EXPECT_EQ(s->st_mtim.tv_sec, 2000000);
    EXPECT_EQ(s->st_mtim.tv_nsec, 7);
    EXPECT_EQ(s->st_atim.tv_sec, 1000000);
  }
  // The name goes; the open file keeps taking changes.
  ASSERT_EQ(::unlink(m.mnt("f").c_str()), 0);
  ASSERT_EQ(::fchmod(fd, 0604), 0);
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0604u);
  ::close(fd);
  // Closed, by name: a copied-up lower file, then a symlink (its own times, the target's kept).
  ASSERT_EQ(::chmod(m.mnt("low").c_str(), 0640), 0);
  ASSERT_EQ(::stat(m.upper("low").c_str(), &ust), 0);
  EXPECT_EQ(ust.st_mode & 07777, 0640u);
  ASSERT_EQ(::stat(m.lower("low").c_str(), &st), 0);
  EXPECT_NE(st.st_mode & 07777, 0640u) << "the lower file must never change";
  ASSERT_EQ(::symlink("low", m.mnt("ln").c_str()), 0);
  struct stat before;
  ASSERT_EQ(::stat(m.mnt("low").c_str(), &before), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, m.mnt("ln").c_str(), tv, AT_SYMLINK_NOFOLLOW), 0);
  ASSERT_EQ(::lstat(m.mnt("ln").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000000);
  ASSERT_EQ(::lstat(m.upper("ln").c_str(), &ust), 0);
  EXPECT_EQ(ust.st_mtim.tv_sec, 2000000);
  ASSERT_EQ(::stat(m.mnt("low").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(st.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
}

// Every readdir batch carries attributes (READDIRPLUS, not "auto"): a directory far larger than
// one batch lists each name once, with the d_ino and attributes a later stat of it agrees with.
TEST(CowFsLayers, LargeDirectoryListsEveryEntryWithMatchingAttributes) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("big").c_str(), 0755);
  for (int i = 0; i < 1500; i++) {
    write_file(m.lower("big/lower_file_with_a_longer_name_" + std::to_string(i)),
               std::string(static_cast<size_t>(i % 7), 'l'));
  }
  ASSERT_EQ(m.start(), "");
  for (int i = 0; i < 1500; i++) {
    write_file(m.mnt("big/upper_file_with_a_longer_name_" + std::to_string(i)),
               std::string(static_cast<size_t>(i % 5), 'u'));
  }
  for (int i = 0; i < 1500; i += 15) {
    ASSERT_EQ(::unlink(m.mnt("big/lower_file_with_a_longer_name_" + std::to_string(i)).c_str()), 0);
  }
  DIR* d = ::opendir(m.mnt("big").c_str());
  ASSERT_NE(d, nullptr);
  std::map<std::string, ino_t> listed;
  while (dirent* de = ::readdir(d)) {
    std::string name = de->d_name;
    if (name != "." && name != "..") {
      EXPECT_TRUE(listed.emplace(name, de->d_ino).second) << "listed twice: " << name;
    }
  }
  ASSERT_EQ(listed.size(), 2900u);
  for (const auto& [name, ino] : listed) {
    struct stat st;
    ASSERT_EQ(::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW), 0) << name;
    EXPECT_EQ(st.st_ino, ino) << name;
    int i = std::stoi(name.substr(name.rfind('_') + 1));
    bool upper = name.rfind("upper_", 0) == 0;
    EXPECT_EQ(st.st_size, upper ? i % 5 : i % 7) << name;
    EXPECT_TRUE(upper || i % 15 != 0) << "deleted but listed: " << name;
  }
  ::closedir(d);
}

// READDIRPLUS lists names the kernel already holds without attributes (nodeid 0: no host stat,
// no lookup count), as after `git status` statted every file: what the listing and a stat after
// it show must still be the current truth, for files looked up, copied up, changed, renamed,
// hard-linked and created in the session, and for names never looked up.
TEST(CowFsLayers, ListingNamesTheKernelHoldsShowsTheirCurrentAttributes) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::mkdir(m.lower("d").c_str(), 0755);
  for (int i = 0; i < 60; i++) {
    write_file(m.lower("d/f" + std::to_string(i)), std::string(static_cast<size_t>(i), 'x'));
  }
  ASSERT_EQ(m.start(), "");
  std::map<std::string, struct stat> before;
  for (int i = 0; i < 40; i++) {  // f40..f59 are never looked up before the listing
    std::string n = "f" + std::to_string(i);
    ASSERT_EQ(::lstat(m.mnt("d/" + n).c_str(), &before[n]), 0) << n;
  }
  write_file(m.mnt("d/f1"), "copied up and rewritten");  // copy-up
  ASSERT_EQ(::chmod(m.mnt("d/f2").c_str(), 0600), 0);    // copy-up, mode
  ASSERT_EQ(::truncate(m.mnt("d/f3").c_str(), 1), 0);    // copy-up, size
  ASSERT_EQ(::rename(m.mnt("d/f4").c_str(), m.mnt("d/renamed").c_str()), 0);
  ASSERT_EQ(::link(m.mnt("d/f5").c_str(), m.mnt("d/hardlink").c_str()), 0);
  write_file(m.mnt("d/new"), "made in the session");
  ASSERT_EQ(::unlink(m.mnt("d/f6").c_str()), 0);
  std::map<std::string, std::pair<ino_t, unsigned char>> listed;
  for (int pass = 0; pass < 2; pass++) {  // the second listing comes from the kernel's cache
    listed.clear();
    DIR* dir = ::opendir(m.mnt("d").c_str());
    ASSERT_NE(dir, nullptr);
    while (dirent* de = ::readdir(dir)) {
      std::string n = de->d_name;
      if (n != "." && n != "..") {
        listed[n] = {de->d_ino, de->d_type};
      }
    }
    ::closedir(dir);
    ASSERT_EQ(listed.size(), 61u) << "pass " << pass;  // 60 - f4 - f6 + renamed + hardlink + new
    EXPECT_EQ(listed.count("f4") + listed.count("f6"), 0u);
    for (const auto& [n, id] : listed) {
      struct stat st;
      ASSERT_EQ(::lstat(m.mnt("d/" + n).c_str(), &st), 0) << n;
      EXPECT_EQ(st.st_ino, id.first) << n << " pass " << pass;
      EXPECT_EQ(id.second, DT_REG) << n;
    }
  }
  struct stat st;
  ASSERT_EQ(::lstat(m.mnt("d/f1").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 23);
  EXPECT_EQ(st.st_ino, before["f1"].st_ino);  // a copy-up keeps the number
  EXPECT_EQ(read_file(m.mnt("d/f1")), "copied up and rewritten");
  ASSERT_EQ(::lstat(m.mnt("d/f2").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::lstat(m.mnt("d/f3").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1);
  ASSERT_EQ(::lstat(m.mnt("d/renamed").c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, before["f4"].st_ino);
  EXPECT_EQ(st.st_size, 4);
  struct stat a, b;
  ASSERT_EQ(::lstat(m.mnt("d/f5").c_str(), &a), 0);
  ASSERT_EQ(::lstat(m.mnt("d/hardlink").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 2u);
  EXPECT_EQ(listed["f5"].first, listed["hardlink"].first);
  ASSERT_EQ(::lstat(m.mnt("d/f50").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 50);
  EXPECT_EQ(read_file(m.mnt("d/new")), "made in the session");
  // And the real workspace is as it was.
  EXPECT_EQ(read_file(m.lower("d/f1")), std::string(1, 'x'));
  EXPECT_EQ(::access(m.lower("d/f4").c_str(), F_OK), 0);
}

TEST(CowFsLayers, KillDuringCopyUpNeverLeavesTornFiles) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  constexpr int kFiles = 40;
  std::string big(2 << 20, '\0');
  for (size_t i = 0; i < big.size(); i++) {
    big[i] = static_cast<char>('a' + (i * 7919) % 26);
  }
  for (int i = 0; i < kFiles; i++) {
    write_file(m.lower("f" + std::to_string(i)), big + std::to_string(i));
  }
  std::string lower_before = tree_manifest(m.lower());
  ASSERT_EQ(m.start(), "");
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < kFiles && !stop; i++) {
      int fd = ::open(m.mnt("f" + std::to_string(i)).c_str(), O_WRONLY | O_APPEND);
      if (fd < 0) {
        break;  // the daemon is gone: ENOTCONN
      }
      (void)!::write(fd, "+appended", 9);
      ::close(fd);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  m.crash();
  stop = true;
  writer.join();
  int complete = 0;
  for (int i = 0; i < kFiles; i++) {
    std::string name = "f" + std::to_string(i);
    if (::access(m.upper(name).c_str(), F_OK) != 0) {
      continue;
    }
    std::string data = read_file(m.upper(name));
    std::string want = big + std::to_string(i);
    ASSERT_TRUE(data == want || data == want + "+appended")
        << name << " is torn: " << data.size() << " bytes";
    complete++;
  }
  EXPECT_EQ(tree_manifest(m.lower()), lower_before);
  // Restart: leftovers removed, the view shows complete files only.
  ASSERT_EQ(m.start(), "");
  for (const auto& n : names_in(m.upper())) {
    EXPECT_FALSE(n.starts_with(".wh..wh.tmp.")) << n;
  }
  for (int i = 0; i < kFiles; i++) {
    std::string data = read_file(m.mnt("f" + std::to_string(i)));
    std::string want = big + std::to_string(i);
    EXPECT_TRUE(data == want || data == want + "+appended") << i;
  }
  std::printf("copy-ups completed before the kill: %d of %d\n", complete, kFiles);
}

}  // namespace
}  // namespace cordon::fusefs::testing
