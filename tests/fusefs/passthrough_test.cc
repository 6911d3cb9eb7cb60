// FUSE passthrough in cordon-fs: engaged where it should be (no FUSE_READ/FUSE_WRITE for it),
// identical results to a native directory, never an error from the kernel's per-inode io modes,
// and the byte quota still exact (writers stay on the daemon path when there is one).
#include "fusefs/kernel/passthrough.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kNoQuota =
    R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": 0, "inodes": 0}}})";

nlohmann::json status(MountedFs& m) {
  return nlohmann::json::parse(m.control(R"({"op":"status"})"));
}

// Reads all of path with read(2) in 1 MiB calls.
std::string read_all(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  std::string out, buf(1 << 20, '\0');
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
    out.append(buf.data(), static_cast<size_t>(n));
  }
  EXPECT_EQ(n, 0) << std::strerror(errno);
  ::close(fd);
  return out;
}

TEST(Passthrough, ReadsAndWritesOfBigFilesSkipTheDaemon) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  std::string lower_data = pattern(8 << 20, 1);
  write_file(m.lower("lower.bin"), lower_data);
  ASSERT_EQ(m.start(), "");
  nlohmann::json s0 = status(m);
  ASSERT_TRUE(s0["passthrough"].get<bool>()) << "the kernel did not accept FUSE_PASSTHROUGH";

  // A new file written through the view (create, then 8 writes of 1 MiB).
  std::string data = pattern(8 << 20, 2);
  int fd = ::open(m.mnt("new.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  for (size_t off = 0; off < data.size(); off += 1 << 20) {
    ASSERT_EQ(::write(fd, data.data() + off, 1 << 20), 1 << 20);
  }
  ASSERT_EQ(::close(fd), 0);
  nlohmann::json s1 = status(m);
  EXPECT_EQ(s1["writes"], s0["writes"]) << "writes went through FUSE_WRITE";
  EXPECT_EQ(read_file(m.upper("new.bin")), data);

  drop_caches();
  EXPECT_EQ(read_all(m.mnt("new.bin")), data);
  EXPECT_EQ(read_all(m.mnt("lower.bin")), lower_data);
  nlohmann::json s2 = status(m);
  EXPECT_EQ(s2["reads"], s1["reads"]) << "reads went through FUSE_READ";
  EXPECT_GE(s2["passthrough_opens"].get<uint64_t>(), s0["passthrough_opens"].get<uint64_t>() + 3);
  // Usage catches up with the passthrough writes at RELEASE, which the kernel sends after close
  // returned: wait for it (bounded).
  uint64_t bytes = 0;
  for (int i = 0; i < 200 && (bytes = status(m)["bytes"].get<uint64_t>()) != data.size(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(bytes, data.size()) << "usage settles at release";
}

// One sequence of data-path calls; returns a transcript of every result.
std::string data_ops(const std::string& dir) {
  std::string t;
  auto note = [&](const std::string& what, long long v) {
    t += what + "=" + std::to_string(v) + (v < 0 ? std::string(" ") + std::strerror(errno) : "") +
         "\n";
  };
  std::string a = dir + "/a.bin", b = dir + "/b.bin";
  int fd = ::open(a.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  note("open", fd >= 0);
  std::string d = pattern(3 << 20, 7);
  note("pwrite", ::pwrite(fd, d.data(), d.size(), 0));
  note("pwrite_hole", ::pwrite(fd, "tail", 4, (5 << 20) + 3));
  std::string buf(1 << 20, '\0');
  note("pread", ::pread(fd, buf.data(), buf.size(), 1 << 20));
  t += std::to_string(std::hash<std::string>()(buf)) + "\n";
  // mmap shared: write through the mapping, read back through read(2) of another fd.
  void* p = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 1 << 20);
  note("mmap_shared", p != MAP_FAILED);
  if (p != MAP_FAILED) {
    std::memcpy(static_cast<char*>(p) + 100, "MAPPED", 6);
    note("msync", ::msync(p, 1 << 20, MS_SYNC));
    ::munmap(p, 1 << 20);
  }
  int r = ::open(a.c_str(), O_RDONLY | O_CLOEXEC);
  char six[7] = {};
  note("pread_mapped", ::pread(r, six, 6, (1 << 20) + 100));
  t += std::string(six) + "\n";
  // mmap private: writes stay private.
  void* q = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, r, 0);
  note("mmap_private", q != MAP_FAILED);
  if (q != MAP_FAILED) {
    static_cast<char*>(q)[0] = 'P';
    ::munmap(q, 4096);
  }
  // sendfile and copy_file_range into a second file.
  int w = ::open(b.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  off_t off = 4096;
  note("sendfile", ::sendfile(w, r, &off, 2 << 20));
  loff_t in = 0, out = 4 << 20;
  note("copy_file_range", ::copy_file_range(r, &in, w, &out, 1 << 20, 0));
  // truncate while open, by path and by fd, then append.
  note("truncate", ::truncate(a.c_str(), (2 << 20) + 5));
  note("ftruncate", ::ftruncate(fd, (2 << 20) + 1));
  int ap = ::open(a.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  note("append", ::write(ap, "APPEND", 6));
  struct stat st;
  note("fstat_size", ::fstat(r, &st) == 0 ? st.st_size : -1);
  // O_DIRECT read, aligned.
  int dfd = ::open(a.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  void* al = nullptr;
  if (posix_memalign(&al, 4096, 1 << 16) == 0) {
    note("odirect_read", dfd >= 0 ? ::pread(dfd, al, 1 << 16, 0) : -1);
    t += std::to_string(std::hash<std::string>()(std::string(static_cast<char*>(al), 1 << 16))) +
         "\n";
    std::free(al);
  }
  for (int x : {fd, r, w, ap, dfd}) {
    if (x >= 0) {
      ::close(x);
    }
  }
  t += "a " + std::to_string(std::hash<std::string>()(read_file(a))) + "\n";
  t += "b " + std::to_string(std::hash<std::string>()(read_file(b))) + "\n";
  return t;
}

TEST(Passthrough, DataOpsMatchNative) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  ASSERT_EQ(m.start(), "");
  cordon::testing::TempDir native;
  std::string want = data_ops(native.path());
  nlohmann::json s0 = status(m);
  EXPECT_EQ(data_ops(m.mnt()), want);
  nlohmann::json s1 = status(m);
  EXPECT_GT(s1["passthrough_opens"].get<uint64_t>(), s0["passthrough_opens"].get<uint64_t>());
  EXPECT_EQ(tree_manifest(m.mnt()), tree_manifest(native.path()));
}

TEST(Passthrough, DataOpsMatchNativeWithAByteQuota) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": "64M"}}})");
  ASSERT_EQ(m.start(), "");
  cordon::testing::TempDir native;
  EXPECT_EQ(data_ops(m.mnt()), data_ops(native.path()));
}

// Opens in every order the kernel's io modes care about: none may fail.
TEST(Passthrough, ModeConflictsNeverFailAnOpen) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  std::string lower_data = pattern(1 << 20, 3);
  write_file(m.lower("f.bin"), lower_data);
  write_file(m.lower("small.txt"), "small\n");
  ASSERT_EQ(m.start(), "");
  std::string f = m.mnt("f.bin");

  // Read-only (passthrough on the lower file), then a writer: copy-up under a new inode; the old
  // reader keeps seeing the lower bytes, like overlayfs; new opens see the new ones.
  int r1 = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(r1, 0);
  int w1 = ::open(f.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(w1, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(w1, "NEW", 3, 0), 3);
  char got[4] = {};
  ASSERT_EQ(::pread(r1, got, 3, 0), 3);
  EXPECT_EQ(std::string(got, 3), lower_data.substr(0, 3));
  EXPECT_EQ(read_file(f).substr(0, 3), "NEW");
  EXPECT_EQ(read_file(m.lower("f.bin")), lower_data) << "the real workspace was written";
  // mmap of every kind on every handle.
  for (int fd : {r1, w1}) {
    void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
    if (p != MAP_FAILED) {
      ::munmap(p, 4096);
    }
  }
  void* pw = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, w1, 0);
  ASSERT_NE(pw, MAP_FAILED) << std::strerror(errno);
  std::memcpy(pw, "MAP", 3);
  ASSERT_EQ(::msync(pw, 4096, MS_SYNC), 0);
  ::munmap(pw, 4096);
  EXPECT_EQ(read_file(f).substr(0, 3), "MAP");
  EXPECT_EQ(read_file(m.lower("f.bin")), lower_data) << "the real workspace was written";
  int od = ::open(f.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  EXPECT_GE(od, 0) << std::strerror(errno);
  EXPECT_EQ(::truncate(f.c_str(), 4096), 0) << std::strerror(errno);
  for (int fd : {r1, w1, od}) {
    ::close(fd);
  }

  // Concurrent readers and writers of one file (small and big), opening and closing in a loop.
  write_file(m.upper("c.bin"), pattern(256 << 10, 4));
  std::atomic<int> failures{0};
  std::string first_error;
  std::mutex mu;
  std::vector<std::thread> ts;
  for (int t = 0; t < 6; t++) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 150; i++) {
        for (const char* name : {"c.bin", "small.txt"}) {
          std::string p = m.mnt(name);
          int flags = (t % 3 == 0) ? O_RDWR : (t % 3 == 1 ? O_RDONLY : O_WRONLY | O_APPEND);
          int fd = ::open(p.c_str(), flags | O_CLOEXEC);
          bool ok = fd >= 0;
          if (ok && flags == O_RDWR) {
            ok = ::pwrite(fd, "x", 1, i) == 1;
            void* mp = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            ok = ok && mp != MAP_FAILED;
            if (mp != MAP_FAILED) {
              ::munmap(mp, 4096);
            }
          } else if (ok && flags == O_RDONLY) {
            char b[4096];
            ok = ::read(fd, b, sizeof(b)) > 0;
          } else if (ok) {
            ok = ::write(fd, "y", 1) == 1;
          }
          if (!ok) {
            std::lock_guard lk(mu);
            if (failures++ == 0) {
              first_error = std::string(name) + " flags " + std::to_string(flags) + ": " +
                            std::strerror(errno);
            }
          }
          if (fd >= 0) {
            ::close(fd);
          }
        }
      }
    });
  }
  for (auto& t : ts) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 0) << first_error;
  m.stop();
  EXPECT_EQ(read_file(m.lower("f.bin")), lower_data);
}

TEST(Passthrough, ByteQuotaKeepsWritersOnTheDaemonAndExact) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(R"({"filesystem": {"deny": [], "protect": [], "quota": {"bytes": "4M"}}})");
  ASSERT_EQ(m.start(), "");
  nlohmann::json s0 = status(m);
  int fd = ::open(m.mnt("q.bin").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  std::string chunk = pattern(1 << 20, 5);
  size_t total = 0;
  int err = 0;
  for (int i = 0; i < 6; i++) {
    ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n < 0) {
      err = errno;
      break;
    }
    total += static_cast<size_t>(n);
  }
  ::close(fd);
  EXPECT_EQ(total, 4u << 20);
  EXPECT_EQ(err, EDQUOT);
  nlohmann::json s1 = status(m);
  EXPECT_GT(s1["writes"].get<uint64_t>(), s0["writes"].get<uint64_t>());
  EXPECT_EQ(s1["bytes"].get<uint64_t>(), 4u << 20);
  // Read-only opens may still pass through; a writer meanwhile stays exact (direct_io mode).
  int r = ::open(m.mnt("q.bin").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(r, 0);
  int w = ::open(m.mnt("q.bin").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(w, 0) << std::strerror(errno);
  errno = 0;
  EXPECT_EQ(::write(w, "z", 1), -1);
  EXPECT_EQ(errno, EDQUOT);
  ::close(w);
  EXPECT_EQ(read_all(m.mnt("q.bin")).size(), 4u << 20);
  ::close(r);
  nlohmann::json s2 = status(m);
  EXPECT_GT(s2["passthrough_opens"].get<uint64_t>(), s1["passthrough_opens"].get<uint64_t>());
  EXPECT_EQ(s2["bytes"].get<uint64_t>(), 4u << 20);
}

TEST(Passthrough, RollbackWhileOpenShowsTheRestoredFile) {
  CORDON_REQUIRE_ROOT();
  MountedFs m(kNoQuota);
  ASSERT_EQ(m.start(), "");
  std::string v1 = pattern(1 << 20, 8), v2 = pattern(1 << 20, 9);
  write_file(m.mnt("r.bin"), v1);
  ASSERT_NE(m.control(R"({"op":"snapshot","name":"s1"})").find("\"ok\":true"), std::string::npos);
  write_file(m.mnt("r.bin"), v2);
  int r = ::open(m.mnt("r.bin").c_str(), O_RDONLY | O_CLOEXEC);  // passthrough on v2's file
  ASSERT_GE(r, 0);
  ASSERT_NE(m.control(R"({"op":"rollback","name":"s1"})").find("\"ok\":true"), std::string::npos);
  EXPECT_EQ(read_file(m.mnt("r.bin")), v1);  // a new open while the old backing is still held
  int w = ::open(m.mnt("r.bin").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(w, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(w, "W", 1, 0), 1);
  ::close(w);
  EXPECT_EQ(read_file(m.mnt("r.bin")), "W" + v1.substr(1));
  std::string old(16, '\0');
  ASSERT_EQ(::pread(r, old.data(), old.size(), 0), 16);
  EXPECT_EQ(old, v2.substr(0, 16)) << "an open fd keeps the file it opened";
  ::close(r);
  EXPECT_EQ(read_file(m.mnt("r.bin")), "W" + v1.substr(1));
}

// Who may use passthrough: root in the initial user namespace; without CAP_SYS_ADMIN, or inside
// a user namespace, the daemon must not offer it (FUSE_DEV_IOC_BACKING_OPEN would fail).
TEST(Passthrough, OnlyOfferedWithSysAdminInTheInitialUserNamespace) {
  CORDON_REQUIRE_ROOT();
  EXPECT_EQ(passthrough::unusable_reason(), "");
  auto in_child = [](auto&& setup) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      std::string why = setup() ? passthrough::unusable_reason() : "setup failed";
      (void)!::write(p[1], why.data(), why.size());
      ::_exit(0);
    }
    ::close(p[1]);
    std::string out;
    char buf[512];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof(buf))) > 0) {
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(p[0]);
    ::waitpid(pid, nullptr, 0);
    return out;
  };
  std::string no_cap = in_child([] {
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[2];
    if (::syscall(SYS_capget, &h, d) != 0) {
      return false;
    }
    d[0].effective &= ~(1u << CAP_SYS_ADMIN);
    return ::syscall(SYS_capset, &h, d) == 0;
  });
  EXPECT_NE(no_cap.find("CAP_SYS_ADMIN"), std::string::npos) << no_cap;
  std::string userns = in_child([] { return ::unshare(CLONE_NEWUSER) == 0; });
  EXPECT_NE(userns.find("user namespace"), std::string::npos) << userns;
}

// A daemon that cannot register backing files (here: root of a user namespace of its own, as
// in a rootless session) does not offer passthrough, says why once, and serves data as before.
TEST(Passthrough, DaemonInAUserNamespaceDoesNotOfferItAndStillWorks) {
  CORDON_REQUIRE_ROOT();
  cordon::testing::TempDir d;
  for (const char* sub : {"lower", "upper", "mnt"}) {
    ::mkdir((d / sub).c_str(), 0755);
  }
  std::string data = pattern(1 << 20, 11);
  write_file(d / "lower/big", data);
  write_file(d / "policy.json", kNoQuota);
  std::string script =
      "'" + cordon::testing::build_path("fusefs/cordon-fs") +
      "' --lower lower --upper upper "
      "--mountpoint mnt --policy policy.json --control \"$PWD/ctl.sock\" -f 2> daemon.log &\n"
      "D=$!\n"
      "for i in $(seq 1 200); do [ -S ctl.sock ] && break; sleep 0.05; done\n"
      "cat mnt/big > out.bin\n"
      "printf x >> mnt/big\n"
      "python3 -c 'import socket\ns=socket.socket(socket.AF_UNIX)\ns.connect(\"ctl.sock\")\n"
      "s.sendall(b\"{\\\"op\\\":\\\"status\\\"}\\n\")\nprint(s.recv(65536).decode(),end=\"\")'\n"
      "umount mnt\n"
      "wait $D\n";
  auto r = cordon::testing::run_program({"unshare", "-Urm", "sh", "-c", script},
                                        {.deadline = std::chrono::seconds(60), .cwd = d.path()});
  ASSERT_EQ(r.exit_code(), 0) << r.err << read_file(d / "daemon.log");
  nlohmann::json st = nlohmann::json::parse(r.out);
  EXPECT_FALSE(st["passthrough"].get<bool>());
  EXPECT_GT(st["reads"].get<uint64_t>(), 0u);
  EXPECT_EQ(st["passthrough_opens"].get<uint64_t>(), 0u);
  EXPECT_NE(read_file(d / "daemon.log").find("FUSE passthrough off"), std::string::npos);
  EXPECT_EQ(read_file(d / "out.bin"), data);
  EXPECT_EQ(read_file(d / "upper/big"), data + "x");
  EXPECT_EQ(read_file(d / "lower/big"), data);
}

}  // namespace
}  // namespace cordon::fusefs::testing
