// FUSE over io_uring (fusefs/uring.h) on real mounts: the ring is engaged and carries the bulk of
// the requests, every kind of work gives the same results as a native directory, and unmounting
// or killing the daemon under load ends every caller instead of hanging.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kNoQuota =
    R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": 0, "inodes": 0}}})";
// A byte quota keeps writable opens off passthrough: WRITEs and READs then cross the ring.
constexpr const char* kByteQuota =
    R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": "1G", "inodes": 0}}})";
constexpr const char* kEnableUring = "/sys/module/fuse/parameters/enable_uring";

void set_enable_uring(bool on) {
  int fd = ::open(kEnableUring, O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << kEnableUring << ": " << std::strerror(errno)
                   << " (needs Linux 6.14+ built with CONFIG_FUSE_IO_URING)";
  ASSERT_EQ(::write(fd, on ? "Y" : "N", 1), 1) << std::strerror(errno);
  ::close(fd);
}

nlohmann::json status(MountedFs& m) {
  std::string line = m.control(R"({"op":"status"})");
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "status reply: " << line;
  return j;
}

uint64_t counter(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) ? j[key].get<uint64_t>() : 0;
}

// Mounts with the ring on (enable_uring=Y, left on: CI runs the whole suite that way too).
void start_with_ring(MountedFs& m, std::vector<std::string> extra = {}) {
  set_enable_uring(true);
  ASSERT_EQ(m.start(std::move(extra)), "");
}

std::string errno_of(int rc) {
  return rc == 0 ? "ok" : std::string("errno ") + std::strerror(errno);
}

// One scripted workload on `root` (a mount or a native directory): every step's outcome (success,
// errno, bytes read, a listing) as a line, so the two can be compared line by line.
std::vector<std::string> run_script(const std::string& root) {
  std::vector<std::string> out;
  auto p = [&](const std::string& rel) { return root + "/" + rel; };
  out.push_back("mkdir d: " + errno_of(::mkdir(p("d").c_str(), 0755)));
  out.push_back("mkdir d again: " + errno_of(::mkdir(p("d").c_str(), 0755)));
  for (int i = 0; i < 300; i++) {
    std::string name = "d/f" + std::to_string(i);
    int fd = ::open(p(name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      out.push_back("create " + name + ": " + errno_of(-1));
      continue;
    }
    std::string data = pattern(static_cast<size_t>(i) * 37 + 1, static_cast<unsigned>(i));
    ssize_t w = ::write(fd, data.data(), data.size());
    ::close(fd);
    if (w != static_cast<ssize_t>(data.size())) {
      out.push_back("write " + name + " short");
    }
  }
  int fd = ::open(p("d/f0").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  out.push_back("create existing: " + errno_of(fd < 0 ? -1 : 0));
  if (fd >= 0) {
    ::close(fd);
  }
  for (int i = 0; i < 300; i += 3) {
    std::string from = "d/f" + std::to_string(i), to = "d/r" + std::to_string(i);
    out.push_back("rename " + from + ": " + errno_of(::rename(p(from).c_str(), p(to).c_str())));
  }
  for (int i = 1; i < 300; i += 5) {
    std::string name = "d/f" + std::to_string(i);
    out.push_back("unlink " + name + ": " + errno_of(::unlink(p(name).c_str())));
  }
  out.push_back("unlink missing: " + errno_of(::unlink(p("d/nope").c_str())));
  out.push_back("open missing: " + errno_of(::open(p("d/nope").c_str(), O_RDONLY) < 0 ? -1 : 0));
  out.push_back("rmdir non-empty: " + errno_of(::rmdir(p("d").c_str())));
  out.push_back("unlink a dir: " + errno_of(::unlink(p("d").c_str())));
  out.push_back("mkdir e: " + errno_of(::mkdir(p("e").c_str(), 0700)));
  out.push_back("rename file over dir: " + errno_of(::rename(p("d/r0").c_str(), p("e").c_str())));
  out.push_back("rename dir into itself: " + errno_of(::rename(p("e").c_str(), p("e/x").c_str())));
  // Read everything back, in name order.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(p("d"))) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  out.push_back("readdir d: " + std::to_string(names.size()) + " entries");
  for (const auto& n : names) {
    std::string data = read_file(p("d/" + n));
    out.push_back(n + " " + std::to_string(data.size()) + " " +
                  std::to_string(std::hash<std::string>()(data)));
  }
  return out;
}

TEST(UringTransport, RingServesTheBulkOfRequests) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  start_with_ring(m);
  for (int i = 0; i < 200; i++) {
    write_file(m.mnt("f" + std::to_string(i)), "data " + std::to_string(i));
  }
  for (int i = 0; i < 200; i++) {
    ASSERT_EQ(read_file(m.mnt("f" + std::to_string(i))), "data " + std::to_string(i));
  }
  nlohmann::json s = status(m);
  EXPECT_EQ(s.value("transport", ""), "io_uring") << s.dump();
  uint64_t ring = counter(s, "ring_requests"), dev = counter(s, "dev_requests");
  // 200 creates, writes, opens, reads, releases: well over 800 requests.
  EXPECT_GT(ring, 800u) << s.dump();
  // /dev/fuse keeps INIT, FORGET and INTERRUPT only.
  EXPECT_LT(dev * 10, ring) << s.dump();
  EXPECT_NE(read_file(m.base("daemon.log")).find("transport: io_uring"), std::string::npos)
      << read_file(m.base("daemon.log"));
}

TEST(UringTransport, ResultsAndErrnosMatchANativeDirectory) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  start_with_ring(m);
  std::string native = m.base("native");
  ASSERT_EQ(::mkdir(native.c_str(), 0755), 0);
  uint64_t before = counter(status(m), "ring_requests");
  std::vector<std::string> got = run_script(m.mnt());
  std::vector<std::string> want = run_script(native);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    EXPECT_EQ(got[i], want[i]) << "step " << i;
  }
  EXPECT_EQ(tree_manifest(m.mnt()), tree_manifest(native));
  EXPECT_GT(counter(status(m), "ring_requests"), before + 1000);
}

TEST(UringTransport, LargeFileRoundTripsThroughTheRing) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kByteQuota);
  start_with_ring(m);
  uint64_t writes0 = counter(status(m), "writes");
  uint64_t reads0 = counter(status(m), "reads");
  const size_t kSize = 64u << 20;
  std::string data = pattern(kSize, 42);
  int fd = ::open(m.mnt("big.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  for (size_t off = 0; off < kSize; off += 1 << 20) {
    ASSERT_EQ(::write(fd, data.data() + off, 1 << 20), 1 << 20) << std::strerror(errno);
  }
  ASSERT_EQ(::fsync(fd), 0);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_TRUE(read_file(m.upper("big.bin")) == data) << "upper layer content differs";
  drop_caches();
  // O_RDWR with a byte quota: the daemon path (not passthrough), so READ replies cross the ring.
  fd = ::open(m.mnt("big.bin").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string back(kSize, '\0');
  size_t got = 0;
  while (got < kSize) {
    ssize_t n = ::read(fd, back.data() + got, kSize - got);
    ASSERT_GT(n, 0) << std::strerror(errno);
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  EXPECT_TRUE(back == data) << "content read back through the view differs";
  nlohmann::json s = status(m);
  EXPECT_EQ(s.value("transport", ""), "io_uring");
  EXPECT_GE(counter(s, "writes") - writes0, 64u) << s.dump();
  EXPECT_GT(counter(s, "reads") - reads0, 0u) << s.dump();
}

TEST(UringTransport, ParallelWritersFromFourThreads) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  start_with_ring(m);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; i++) {
        std::string path = m.mnt("t" + std::to_string(t) + "_" + std::to_string(i));
        std::string data =
            pattern(4096 + static_cast<size_t>(i) * 13, static_cast<unsigned>(t * 1000 + i));
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
          failures++;
        }
        if (fd >= 0) {
          ::close(fd);
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < 4; t++) {
    for (int i = 0; i < 100; i++) {
      std::string name = "t" + std::to_string(t) + "_" + std::to_string(i);
      std::string want =
          pattern(4096 + static_cast<size_t>(i) * 13, static_cast<unsigned>(t * 1000 + i));
      ASSERT_TRUE(read_file(m.mnt(name)) == want) << name;
      ASSERT_TRUE(read_file(m.upper(name)) == want) << name << " in the upper layer";
    }
  }
  EXPECT_EQ(status(m).value("transport", ""), "io_uring");
}

TEST(UringTransport, PassthroughReadsWorkWithTheRing) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  std::string data = pattern(4 << 20, 9);
  write_file(m.lower("lower.bin"), data);
  start_with_ring(m);
  nlohmann::json s0 = status(m);
  ASSERT_TRUE(s0.value("passthrough", false)) << "the kernel did not accept FUSE_PASSTHROUGH";
  EXPECT_TRUE(read_file(m.mnt("lower.bin")) == data);
  nlohmann::json s1 = status(m);
  EXPECT_EQ(s1.value("transport", ""), "io_uring");
  EXPECT_GT(counter(s1, "passthrough_opens"), counter(s0, "passthrough_opens")) << s1.dump();
  // The reads went to the backing file: no READ reached the daemon.
  EXPECT_EQ(counter(s1, "reads"), counter(s0, "reads")) << s1.dump();
}

TEST(UringTransport, NoIoUringOptionForcesDevFuse) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  start_with_ring(m, {"--no-io-uring"});
  for (int i = 0; i < 50; i++) {
    write_file(m.mnt("f" + std::to_string(i)), std::to_string(i));
    ASSERT_EQ(read_file(m.mnt("f" + std::to_string(i))), std::to_string(i));
  }
  nlohmann::json s = status(m);
  EXPECT_EQ(s.value("transport", ""), "dev_fuse") << s.dump();
  EXPECT_EQ(counter(s, "ring_requests"), 0u);
  EXPECT_GT(counter(s, "dev_requests"), 200u);
  EXPECT_NE(read_file(m.base("daemon.log")).find("transport: /dev/fuse (--no-io-uring)"),
            std::string::npos)
      << read_file(m.base("daemon.log"));
}

TEST(UringTransport, KernelSwitchOffSaysHowToTurnItOn) {
  CORDON_REQUIRE_ROOT();
  struct Restore {
    ~Restore() { set_enable_uring(true); }
  } restore;
  set_enable_uring(false);
  MountedFs m(kNoQuota);
  ASSERT_EQ(m.start(), "");
  write_file(m.mnt("x"), "x");
  EXPECT_EQ(read_file(m.mnt("x")), "x");
  nlohmann::json s = status(m);
  EXPECT_EQ(s.value("transport", ""), "dev_fuse");
  EXPECT_EQ(counter(s, "ring_requests"), 0u);
  std::string log = read_file(m.base("daemon.log"));
  EXPECT_NE(log.find("echo Y > /sys/module/fuse/parameters/enable_uring"), std::string::npos)
      << log;
}

// A child that creates, writes, reads back and unlinks files in `dir` until an operation fails
// (the connection went away) or `seconds` pass. It works relative to a directory fd, so it keeps
// using the FUSE mount after a lazy unmount. Exits 0 if it got work done first.
pid_t spawn_load(const std::string& dir, int seconds, int id) {
  int dfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  pid_t pid = ::fork();
  if (pid != 0) {
    ::close(dfd);
    return pid;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::string name = "load" + std::to_string(id);
  char buf[8192];
  std::memset(buf, 'a' + id, sizeof(buf));
  long done = 0;
  while (dfd >= 0 && std::chrono::steady_clock::now() < deadline) {
    int fd = ::openat(dfd, name.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      break;
    }
    bool ok = ::write(fd, buf, sizeof(buf)) == sizeof(buf) &&
              ::pread(fd, buf, sizeof(buf), 0) == sizeof(buf);
    ::close(fd);
    if (!ok || ::unlinkat(dfd, name.c_str(), 0) != 0) {
      break;
    }
    done++;
  }
  ::_exit(done > 0 ? 0 : 2);
}

// Waits (bounded) for every child; kills and reports the ones that hang.
void expect_children_end(std::vector<pid_t>& kids, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (pid_t pid : kids) {
    int status = 0;
    pid_t r = 0;
    while ((r = ::waitpid(pid, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (r == 0) {
      ADD_FAILURE() << "load process " << pid << " still blocked " << seconds << " s after";
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "load process " << pid << " did no work (status " << status << ")";
  }
  kids.clear();
}

// Mounts with the ring, starts 4 load processes for `seconds` and checks that the ring serves
// them (500 ms in).
std::vector<pid_t> load_on_the_ring(MountedFs& m, int seconds) {
  start_with_ring(m);
  std::vector<pid_t> kids;
  for (int i = 0; i < 4; i++) {
    kids.push_back(spawn_load(m.mnt(), seconds, i));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(counter(status(m), "ring_requests"), 100u);
  return kids;
}

TEST(UringTransport, LazyUnmountUnderLoadDrainsAndExits) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  std::vector<pid_t> kids = load_on_the_ring(m, 3);
  // Detached while the children keep using it through their directory fds: the daemon serves
  // them to the end, then exits by itself once the last user is gone.
  int st = m.stop();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "daemon status " << st;
  expect_children_end(kids, 30);
}

TEST(UringTransport, ForcedUnmountUnderLoadAbortsWithoutHang) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  std::vector<pid_t> kids = load_on_the_ring(m, 20);
  // MNT_FORCE aborts the FUSE connection with requests on the rings (the unmount itself may then
  // fail EBUSY while the children hold it): every caller must get an error, none may hang.
  (void)::umount2(m.mnt().c_str(), MNT_FORCE);
  expect_children_end(kids, 30);
  int st = m.stop();
  EXPECT_NE(st, -1);
}

TEST(UringTransport, KillDashNineUnderLoadDoesNotHang) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  std::vector<pid_t> kids = load_on_the_ring(m, 20);
  m.crash();
  expect_children_end(kids, 30);
  // The killed daemon's connection leaves nothing stuck: a new mount is served through the ring.
  MountedFs again(kNoQuota);
  start_with_ring(again);
  write_file(again.mnt("after"), "ok");
  EXPECT_EQ(read_file(again.mnt("after")), "ok");
  EXPECT_EQ(status(again).value("transport", ""), "io_uring");
}

}  // namespace
}  // namespace cordon::fusefs::testing
