// Upper-layer quotas: exact byte and inode limits with concurrent writers, statfs, EDQUOT, events.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

// Writes `chunk`-byte blocks until the write fails; returns bytes written, errno in *err.
uint64_t write_until_full(const std::string& path, size_t chunk, int* err) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    *err = errno;
    return 0;
  }
  std::string buf(chunk, 'q');
  uint64_t total = 0;
  for (int i = 0; i < 100000; i++) {
    ssize_t n = ::write(fd, buf.data(), buf.size());
    if (n < 0) {
      *err = errno;
      break;
    }
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return total;
}

TEST(CowFsQuota, BytesExactSingleWriter) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(
      R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": "1M", "inodes": 100}}})");
  write_file(m.lower("lower100k"), std::string(100 * 1024, 'L'));
  ASSERT_EQ(m.start(), "");
  // A copy-up charges the whole file.
  write_file(m.mnt("lower100k"), std::string(100 * 1024, 'M'));
  int err = 0;
  uint64_t n = write_until_full(m.mnt("big"), 7000, &err);
  EXPECT_EQ(err, EDQUOT);
  EXPECT_EQ(n, (1u << 20) - 100 * 1024);  // short write at the edge, then EDQUOT
  struct stat st;
  ASSERT_EQ(::stat(m.upper("big").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), n);
  struct statvfs sv;
  ASSERT_EQ(::statvfs(m.mnt().c_str(), &sv), 0);
  EXPECT_EQ(sv.f_bfree, 0u);
  EXPECT_EQ(sv.f_blocks * sv.f_frsize, 1u << 20);
  // Truncate and unlink give bytes back.
  ASSERT_EQ(::truncate(m.mnt("big").c_str(), 1000), 0);
  ASSERT_EQ(::unlink(m.mnt("lower100k").c_str()), 0);
  n = write_until_full(m.mnt("big2"), 4096, &err);
  EXPECT_EQ(n, (1u << 20) - 1000);
  // Growing by truncate or fallocate past the limit: EDQUOT, nothing changes.
  EXPECT_NE(::truncate(m.mnt("big").c_str(), 5 << 20), 0);
  EXPECT_EQ(errno, EDQUOT);
  int fd = ::open(m.mnt("big").c_str(), O_RDWR);
  EXPECT_NE(::fallocate(fd, 0, 0, 5 << 20), 0);
  EXPECT_EQ(errno, EDQUOT);
  ::close(fd);
  EXPECT_NE(m.events().find("\"kind\":\"fs.quota\""), std::string::npos) << m.events();
}

TEST(CowFsQuota, BytesExactWithConcurrentWriters) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(
      R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": "3M", "inodes": 100}}})");
  ASSERT_EQ(m.start(), "");
  std::atomic<uint64_t> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      int err = 0;
      total += write_until_full(m.mnt("w" + std::to_string(t)), 3000 + 1000 * t, &err);
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(total.load(), 3u << 20);
  uint64_t on_disk = 0;
  for (int t = 0; t < 4; t++) {
    struct stat st;
    ASSERT_EQ(::stat(m.upper("w" + std::to_string(t)).c_str(), &st), 0);
    on_disk += static_cast<uint64_t>(st.st_size);
  }
  EXPECT_EQ(on_disk, 3u << 20);
}

TEST(CowFsQuota, InodesExact) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(
      R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": "1M", "inodes": 20}}})");
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::mkdir(m.mnt("d").c_str(), 0755), 0);  // 1
  int made = 1;
  int err = 0;
  for (int i = 0; i < 100; i++) {
    int fd = ::open(m.mnt("d/f" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) {
      err = errno;
      break;
    }
    ::close(fd);
    made++;
  }
  EXPECT_EQ(made, 20);
  EXPECT_EQ(err, EDQUOT);
  EXPECT_NE(::mkdir(m.mnt("d2").c_str(), 0755), 0);
  EXPECT_EQ(errno, EDQUOT);
  EXPECT_NE(::symlink("x", m.mnt("s").c_str()), 0);
  // A hard link is a name, not an inode: allowed.
  EXPECT_EQ(::link(m.mnt("d/f0").c_str(), m.mnt("d/f0-link").c_str()), 0);
  struct statvfs sv;
  ASSERT_EQ(::statvfs(m.mnt().c_str(), &sv), 0);
  EXPECT_EQ(sv.f_files, 20u);
  EXPECT_EQ(sv.f_ffree, 0u);
  ASSERT_EQ(::unlink(m.mnt("d/f1").c_str()), 0);
  EXPECT_EQ(::mkdir(m.mnt("d2").c_str(), 0755), 0);
}

// A create of a name that exists is not a new inode: with the inode quota used up, O_CREAT opens
// the file and O_CREAT|O_EXCL says EEXIST, never EDQUOT. The kernel sends CREATE for an existing
// name only when it holds the name as missing, so the names are made in the upper layer behind
// the daemon's back after the kernel cached them as missing (the daemon's own EEXIST path, as in
// a race with another creator).
TEST(CowFsQuota, CreateOfAnExistingNameAtFullInodeQuotaIsNotRefused) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": [], "protect": [], "quota": {"inodes": 3}}})");
  ASSERT_EQ(m.start(), "");
  ASSERT_EQ(::mkdir(m.mnt("d").c_str(), 0755), 0);
  write_file(m.mnt("d/a"), "a");
  write_file(m.mnt("d/b"), "b");
  EXPECT_NE(::open(m.mnt("d/c").c_str(), O_CREAT | O_WRONLY, 0644), 0);
  EXPECT_EQ(errno, EDQUOT);  // full: 3 inodes
  struct stat st;
  for (const char* name : {"x", "y"}) {
    ASSERT_NE(::lstat(m.mnt(std::string("d/") + name).c_str(), &st), 0);  // cached as missing
    write_file(m.upper(std::string("d/") + name), std::string("made behind ") + name);
  }
  int fd = ::open(m.mnt("d/x").c_str(), O_CREAT | O_RDONLY, 0644);
  ASSERT_GE(fd, 0) << "open(O_CREAT) of an existing name: " << std::strerror(errno);
  char buf[64] = {};
  EXPECT_EQ(::read(fd, buf, sizeof(buf) - 1), 13);
  EXPECT_STREQ(buf, "made behind x");
  ::close(fd);
  EXPECT_LT(::open(m.mnt("d/y").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644), 0);
  EXPECT_EQ(errno, EEXIST);
}

// O_TMPFILE: an unnamed file is charged while open, given back when closed unlinked, and a
// linked one stays charged like any file.
TEST(CowFsQuota, TmpfileChargedWhileOpenAndWhenLinked) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(
      R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": "64K", "inodes": 3}}})");
  ASSERT_EQ(m.start(), "");
  auto used = [&] {
    struct statvfs sv;
    EXPECT_EQ(::statvfs(m.mnt().c_str(), &sv), 0);
    return std::make_pair(sv.f_files - sv.f_ffree, (sv.f_blocks - sv.f_bfree) * sv.f_frsize);
  };
  std::string block(40 * 1024, 't');
  for (int round = 0; round < 5; round++) {  // never linked: nothing stays charged
    int fd = ::open(m.mnt().c_str(), O_TMPFILE | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << strerror(errno);
    ASSERT_EQ(::write(fd, block.data(), block.size()), static_cast<ssize_t>(block.size()));
    EXPECT_EQ(used().first, 1u);
    // The byte quota counts the open unnamed file: a second 40K file does not fit.
    int other = ::open(m.mnt("other").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(other, 0);
    EXPECT_LT(::write(other, block.data(), block.size()), static_cast<ssize_t>(block.size()));
    ::close(other);
    ASSERT_EQ(::unlink(m.mnt("other").c_str()), 0);
    ::close(fd);
    // close(2) does not wait for FUSE_RELEASE (the kernel sends it in the background): give the
    // daemon up to 10 s to see the last close.
    auto zero = std::make_pair(uint64_t{0}, uint64_t{0});
    for (int i = 0; i < 1000 && used() != zero; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(used(), zero) << "round " << round;
  }
  int fd = ::open(m.mnt().c_str(), O_TMPFILE | O_RDWR, 0640);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "kept", 4), 4);
  // Through /proc (AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH; CI also runs unprivileged).
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  ASSERT_EQ(::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, m.mnt("kept").c_str(), AT_SYMLINK_FOLLOW), 0)
      << strerror(errno);
  ::close(fd);
  EXPECT_EQ(read_file(m.mnt("kept")), "kept");
  EXPECT_EQ(read_file(m.upper("kept")), "kept");
  EXPECT_EQ(used().first, 1u);
  ASSERT_EQ(::unlink(m.mnt("kept").c_str()), 0);
  EXPECT_EQ(used().first, 0u);
}

// A hard-linked object is charged once and freed only with its last name, whether the names go by
// unlink or by a rename over them (the unlink's accounting uses the link count its lookup saw).
TEST(CowFsQuota, HardLinkedNamesFreeTheObjectOnlyWithTheLastName) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(
      R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": "1M", "inodes": 10}}})");
  ASSERT_EQ(m.start(), "");
  auto usage = [&] {
    struct statvfs sv;
    EXPECT_EQ(::statvfs(m.mnt().c_str(), &sv), 0);
    return std::make_pair(sv.f_files - sv.f_ffree, (sv.f_blocks - sv.f_bfree) * sv.f_frsize);
  };
  write_file(m.mnt("a"), std::string(200 * 1024, 'a'));
  auto one = usage();
  EXPECT_EQ(one.first, 1u);
  EXPECT_EQ(one.second, 200u * 1024);
  ASSERT_EQ(::link(m.mnt("a").c_str(), m.mnt("b").c_str()), 0);
  ASSERT_EQ(::link(m.mnt("a").c_str(), m.mnt("c").c_str()), 0);
  EXPECT_EQ(usage(), one);
  ASSERT_EQ(::unlink(m.mnt("a").c_str()), 0);
  EXPECT_EQ(usage(), one) << "one of three names gone";
  write_file(m.mnt("d"), "d");
  ASSERT_EQ(::rename(m.mnt("d").c_str(), m.mnt("b").c_str()), 0);  // over a linked name
  auto two = usage();
  EXPECT_EQ(two.first, 2u);
  EXPECT_EQ(read_file(m.mnt("c")), std::string(200 * 1024, 'a'));
  ASSERT_EQ(::unlink(m.mnt("c").c_str()), 0);  // the last name of the 200 KiB file
  auto last = usage();
  EXPECT_EQ(last.first, 1u);
  EXPECT_LT(last.second, 200u * 1024);
  ASSERT_EQ(::unlink(m.mnt("b").c_str()), 0);
  EXPECT_EQ(usage(), std::make_pair(uint64_t{0}, uint64_t{0}));
}

}  // namespace
}  // namespace cordon::fusefs::testing
