// The default seccomp filter, installed for real in forked children: each denied syscall fails
// with EPERM where the same call without the filter does not, argument filters catch raw sockets,
// TIOCSTI and CLONE_NEWUSER, ordinary calls still work, other ABIs are killed, and the cache
// returns the same bytes.
#include "launcher/sandbox/seccomp.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "tests/support/fork_child.h"
#include "tests/support/ia32.h"
#include "tests/support/test_env.h"

namespace cordon::launcher {
namespace {

using cordon::testing::ChildResult;
using cordon::testing::run_in_child;
using cordon::testing::TempDir;

const SeccompProgram& default_program() {
  static SeccompProgram prog = [] {
    auto r = compile_seccomp({});
    if (!r.ok()) {
      ADD_FAILURE() << r.error().to_string();
      return SeccompProgram{};
    }
    return std::move(r).value();
  }();
  return prog;
}

// In the child: no_new_privs, then the filter (what drop_privileges + install_seccomp do).
bool enter_filter(const SeccompProgram& prog) {
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && install_seccomp(prog).ok();
}

std::string errno_of(long r) { return r == -1 ? std::to_string(errno) : "ok"; }

// Harmless arguments for each default-denied syscall: invalid flags, bad fds, missing paths or
// NULL pointers, chosen so that the call does nothing even when no filter stops it (the test
// also runs every probe WITHOUT the filter, as root, to show the filter is what refuses it).
// A name added to the default list without a probe here fails DefaultDeniedSyscallsFailWithEperm.
const std::map<std::string, std::function<long()>>& probes() {
  static const std::map<std::string, std::function<long()>> m{
      {"kexec_load", [] { return syscall(SYS_kexec_load, 0, 0, nullptr, 0xdead0000ul); }},
      {"kexec_file_load",
       [] { return syscall(SYS_kexec_file_load, -1, -1, 0, nullptr, 0xdead0000ul); }},
      {"init_module", [] { return syscall(SYS_init_module, nullptr, 0, ""); }},
      {"finit_module", [] { return syscall(SYS_finit_module, -1, "", 0); }},
      {"delete_module",
       [] { return syscall(SYS_delete_module, "cordon_no_such_module", O_NONBLOCK); }},
      {"create_module", [] { return syscall(SYS_create_module, nullptr, 0); }},
      {"get_kernel_syms", [] { return syscall(SYS_get_kernel_syms, nullptr); }},
      {"query_module", [] { return syscall(SYS_query_module, nullptr, 0, nullptr, 0, nullptr); }},
      {"bpf", [] { return syscall(SYS_bpf, -1, nullptr, 0); }},
      {"perf_event_open", [] { return syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0); }},
      {"userfaultfd", [] { return syscall(SYS_userfaultfd, 0xdead0000ul); }},
      {"io_uring_setup", [] { return syscall(SYS_io_uring_setup, 0, nullptr); }},
      {"io_uring_enter", [] { return syscall(SYS_io_uring_enter, -1, 0, 0, 0, nullptr, 0); }},
      {"io_uring_register", [] { return syscall(SYS_io_uring_register, -1, 0, nullptr, 0); }},
      {"add_key", [] { return syscall(SYS_add_key, nullptr, nullptr, nullptr, 0, 0); }},
      {"request_key", [] { return syscall(SYS_request_key, nullptr, nullptr, nullptr, 0); }},
      {"keyctl", [] { return syscall(SYS_keyctl, -1, 0, 0, 0, 0); }},
      {"mount", [] { return syscall(SYS_mount, nullptr, nullptr, nullptr, 0, nullptr); }},
      {"umount2", [] { return syscall(SYS_umount2, "/nonexistent-cordon", 0xdead0000ul); }},
      {"pivot_root", [] { return syscall(SYS_pivot_root, nullptr, nullptr); }},
      {"move_mount",
       [] { return syscall(SYS_move_mount, -1, nullptr, -1, nullptr, 0xdead0000ul); }},
      {"open_tree", [] { return syscall(SYS_open_tree, -1, nullptr, 0xdead0000ul); }},
      {"fsopen", [] { return syscall(SYS_fsopen, nullptr, 0xdead0000ul); }},
      {"fsconfig", [] { return syscall(SYS_fsconfig, -1, 0xdead, nullptr, nullptr, 0); }},
      {"fsmount", [] { return syscall(SYS_fsmount, -1, 0xdead0000ul, 0); }},
      {"fspick", [] { return syscall(SYS_fspick, -1, nullptr, 0xdead0000ul); }},
      {"mount_setattr",
       [] { return syscall(SYS_mount_setattr, -1, nullptr, 0xdead0000ul, nullptr, 0); }},
      {"setns", [] { return syscall(SYS_setns, -1, 0); }},
      {"open_by_handle_at", [] { return syscall(SYS_open_by_handle_at, -1, nullptr, 0); }},
      {"name_to_handle_at",
       [] { return syscall(SYS_name_to_handle_at, -1, nullptr, nullptr, nullptr, 0xdead0000ul); }},
      {"acct", [] { return syscall(SYS_acct, "/nonexistent-cordon/acct"); }},
      {"swapon", [] { return syscall(SYS_swapon, "/nonexistent-cordon/swap", 0); }},
      {"swapoff", [] { return syscall(SYS_swapoff, "/nonexistent-cordon/swap"); }},
      {"reboot", [] { return syscall(SYS_reboot, 0, 0, 0, nullptr); }},  // bad magic: EINVAL
      {"settimeofday", [] { return syscall(SYS_settimeofday, nullptr, nullptr); }},  // no change
      {"clock_settime", [] { return syscall(SYS_clock_settime, -1, nullptr); }},
      {"clock_adjtime", [] { return syscall(SYS_clock_adjtime, -1, nullptr); }},
      {"adjtimex", [] { return syscall(SYS_adjtimex, nullptr); }},
      {"syslog", [] { return syscall(SYS_syslog, -1, nullptr, 0); }},
      {"quotactl", [] { return syscall(SYS_quotactl, -1, "/nonexistent-cordon", 0, nullptr); }},
      {"quotactl_fd", [] { return syscall(SYS_quotactl_fd, -1, 0, 0, nullptr); }},
      {"lookup_dcookie", [] { return syscall(SYS_lookup_dcookie, 0, nullptr, 0); }},
      {"uselib", [] { return syscall(SYS_uselib, nullptr); }},
      {"nfsservctl", [] { return syscall(SYS_nfsservctl, 0, nullptr, nullptr); }},
      {"iopl", [] { return syscall(SYS_iopl, 4); }},  // level > 3: EINVAL
      {"ioperm", [] { return syscall(SYS_ioperm, 0xfffffff0ul, 0x100, 0); }},
      {"sysfs", [] { return syscall(SYS_sysfs, -1, 0, 0); }},
      {"ustat", [] { return syscall(SYS_ustat, 0, nullptr); }},
      {"_sysctl", [] { return syscall(SYS__sysctl, nullptr); }},
      {"fanotify_init", [] { return syscall(SYS_fanotify_init, 0xdead0000ul, 0); }},
  };
  return m;
}

TEST(Seccomp, DefaultListIsNonEmptyAndKnownToLibseccomp) {
  const auto& names = default_denied_syscalls();
  ASSERT_GE(names.size(), 40u);
  for (const auto& n : names) {
    EXPECT_NE(seccomp_syscall_resolve_name(n.c_str()), __NR_SCMP_ERROR) << n;
  }
}

TEST(Seccomp, DefaultDeniedSyscallsFailWithEperm) {
  const auto& prog = default_program();
  ASSERT_FALSE(prog.bpf.empty());
  int checked = 0;
  for (const auto& name : default_denied_syscalls()) {
    SCOPED_TRACE(name);
    if (seccomp_syscall_resolve_name_arch(SCMP_ARCH_NATIVE, name.c_str()) < 0) {
      // i386-only calls (vm86, vm86old): that whole ABI is killed, see ThirtyTwoBitAbiIsKilled.
      continue;
    }
    auto it = probes().find(name);
    ASSERT_NE(it, probes().end()) << "no harmless probe for default-denied syscall " << name;
    auto filtered = run_in_child([&] {
      if (!enter_filter(prog)) {
        return std::string("setup failed");
      }
      return errno_of(it->second());
    });
    ASSERT_TRUE(filtered.exited_ok()) << "status " << filtered.status;
    EXPECT_EQ(filtered.out, std::to_string(EPERM));
    if (geteuid() == 0) {
      // Without the filter, as root, the same call must NOT fail with EPERM; otherwise the probe
      // above proves nothing.
      auto open = run_in_child([&] { return errno_of(it->second()); });
      ASSERT_TRUE(open.exited_ok());
      EXPECT_NE(open.out, std::to_string(EPERM)) << "unfiltered probe also gives EPERM";
    }
    ++checked;
  }
  EXPECT_GE(checked, 45);
}

TEST(Seccomp, ThirtyTwoBitAbiIsKilled) {
  const auto& prog = default_program();
  // i386 getpid through int $0x80 from a 64-bit process: a different AUDIT_ARCH, so the bad-arch
  // action applies (KILL_PROCESS).
  const auto ia32 = cordon::testing::probe_ia32();
  auto filtered = run_in_child([&] {
    if (!enter_filter(prog)) {
      return std::string("setup failed");
    }
    return cordon::testing::int80_getpid();
  });
  EXPECT_TRUE(filtered.out.empty()) << "int $0x80 returned " << filtered.out;
  if (ia32.served) {
    EXPECT_EQ(filtered.signal(), SIGSYS) << "status " << filtered.status << " out " << filtered.out;
  } else {
    // Without IA32 emulation the kernel refuses the entry before the filter sees it.
    ASSERT_NE(ia32.refused_by, 0) << "int $0x80 neither served nor refused by this kernel";
    EXPECT_EQ(filtered.signal(), ia32.refused_by) << "status " << filtered.status;
  }

  // x32 numbers (bit 30) arrive with the x86_64 AUDIT_ARCH; libseccomp's x86_64 filter routes
  // them to the bad-arch action as well.
  auto x32 = run_in_child([&] {
    if (!enter_filter(prog)) {
      return std::string("setup failed");
    }
    return errno_of(syscall(0x40000000 | SYS_getpid));
  });
  EXPECT_EQ(x32.signal(), SIGSYS) << "status " << x32.status << " out " << x32.out;
}

TEST(Seccomp, PacketAndRawSocketsAreRefused) {
  const auto& prog = default_program();
  auto r = run_in_child([&] {
    if (!enter_filter(prog)) {
      return std::string("setup failed");
    }
    std::ostringstream o;
    o << errno_of(socket(AF_PACKET, SOCK_RAW, 0)) << ","
      << errno_of(socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) << ","
      << errno_of(socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)) << ","
      << errno_of(socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_RAW)) << ","
      << errno_of(socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6)) << ","
      << errno_of(socket(AF_INET, SOCK_PACKET, 0))
      << ","
      // The kernel reads the family as an int: high bits must not dodge the filter.
      << errno_of(syscall(SYS_socket, (1ul << 32) | AF_PACKET, SOCK_RAW, 0));
    return o.str();
  });
  ASSERT_TRUE(r.exited_ok());
  std::string e = std::to_string(EPERM);
  EXPECT_EQ(r.out, e + "," + e + "," + e + "," + e + "," + e + "," + e + "," + e);
  if (geteuid() == 0) {
    auto open = run_in_child([] { return errno_of(socket(AF_PACKET, SOCK_RAW, 0)); });
    EXPECT_EQ(open.out, "ok") << "as root without the filter a packet socket opens";
  }
}

TEST(Seccomp, NewUserNamespaceIsRefusedThroughUnshareCloneAndClone3) {
  const auto& prog = default_program();
  auto r = run_in_child([&] {
    if (!enter_filter(prog)) {
      return std::string("setup failed");
    }
    std::ostringstream o;
    o << errno_of(unshare(CLONE_NEWUSER)) << ",";
    o << errno_of(unshare(CLONE_NEWUSER | CLONE_NEWNS)) << ",";
    o << errno_of(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)) << ",";
    o << errno_of(syscall(SYS_clone3, nullptr, 0));
    return o.str();
  });
  ASSERT_TRUE(r.exited_ok());
  EXPECT_EQ(r.out, std::to_string(EPERM) + "," + std::to_string(EPERM) + "," +
                       std::to_string(EPERM) + "," + std::to_string(ENOSYS));
  // Without the filter a user namespace can be created (root, or unprivileged userns enabled).
  auto open = run_in_child([] { return errno_of(unshare(CLONE_NEWUSER)); });
  if (geteuid() == 0) {
    EXPECT_EQ(open.out, "ok");
  }
}

TEST(Seccomp, TiocstiOnAPtyIsRefused) {
  const auto& prog = default_program();
  auto probe = [](bool high_bits) {
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) {
      return std::string("no pty");
    }
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    if (s < 0) {
      return std::string("no pts");
    }
    char c = 'x';
    unsigned long req = TIOCSTI;
    if (high_bits) {
      req |= 1ul << 32;  // the kernel takes the request as unsigned int
    }
    return errno_of(syscall(SYS_ioctl, s, req, &c));
  };
  auto r = run_in_child([&] {
    if (!enter_filter(prog)) {
      return std::string("setup failed");
    }
    return probe(false) + "," + probe(true) + "," +
           errno_of(syscall(SYS_ioctl, 0, TIOCLINUX, nullptr));
  });
  ASSERT_TRUE(r.exited_ok());
  EXPECT_EQ(r.out,
            std::to_string(EPERM) + "," + std::to_string(EPERM) + "," + std::to_string(EPERM));
  // Unfiltered, TIOCSTI reaches the tty layer (ok, or EIO where dev.tty.legacy_tiocsti=0).
  auto open = run_in_child([&] { return probe(false); });
  if (geteuid() == 0) {
    EXPECT_NE(open.out, std::to_string(EPERM));
  }
}

TEST(Seccomp, PersonalityAllowsOnlyLinuxAndQuery) {
  const auto& prog = default_program();
  auto r = run_in_child([&] {
    if (!enter_filter(prog)) {
      return std::string("setup failed");
    }
    std::ostringstream o;
    o << errno_of(personality(0xffffffff)) << "," << errno_of(personality(PER_LINUX)) << ","
      << errno_of(personality(PER_LINUX32)) << "," << errno_of(personality(READ_IMPLIES_EXEC))
      << "," << errno_of(personality(ADDR_NO_RANDOMIZE)) << "," << errno_of(personality(0x7fffffff))
      << "," << errno_of(personality(0x80000000));
    return o.str();
  });
  ASSERT_TRUE(r.exited_ok());
  std::string e = std::to_string(EPERM);
  EXPECT_EQ(r.out, "ok,ok," + e + "," + e + "," + e + "," + e + "," + e);
}

TEST(Seccomp, OrdinaryCallsStillWork) {
  const auto& prog = default_program();
  auto r = run_in_child([&] {
    if (!enter_filter(prog)) {
      return std::string("setup failed");
    }
    std::ostringstream o;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    char buf[64];
    o << (fd >= 0 && read(fd, buf, sizeof buf) > 0 ? "read" : "noread") << ",";
    pid_t pid = fork();
    if (pid == 0) {
      _exit(7);
    }
    int st = 0;
    o << (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7
              ? "fork"
              : "nofork")
      << ",";
    o << errno_of(socket(AF_INET, SOCK_STREAM, 0)) << ","
      << errno_of(socket(AF_INET6, SOCK_DGRAM, 0)) << ","
      << errno_of(socket(AF_UNIX, SOCK_STREAM, 0)) << ","
      << errno_of(socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */)) << ",";
    int n = 0;
    o << errno_of(ioctl(fd, FIONREAD, &n)) << ",";
    long c = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);  // raw clone without namespace flags
    if (c == 0) {
      _exit(0);
    }
    o << errno_of(c);
    if (c > 0) {
      waitpid(static_cast<pid_t>(c), nullptr, 0);
    }
    struct timespec ts;
    o << "," << errno_of(clock_gettime(CLOCK_REALTIME, &ts));
    return o.str();
  });
  ASSERT_TRUE(r.exited_ok()) << r.status;
  EXPECT_EQ(r.out, "read,fork,ok,ok,ok,ok,ok,ok,ok");
}

TEST(Seccomp, PolicyDenyAddsAndAllowRemoves) {
  policy::SeccompPolicy p;
  p.deny = {"uname", "chroot"};
  p.allow = {"sysfs", "personality"};
  auto r = compile_seccomp(p);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  auto out = run_in_child([&] {
    if (!enter_filter(*r)) {
      return std::string("setup failed");
    }
    std::ostringstream o;
    o << errno_of(syscall(SYS_uname, nullptr)) << ","
      << errno_of(syscall(SYS_chroot, "/nonexistent")) << ","
      << errno_of(syscall(SYS_sysfs, -1, 0, 0)) << "," << errno_of(personality(READ_IMPLIES_EXEC))
      << "," << errno_of(syscall(SYS_bpf, -1, nullptr, 0));
    return o.str();
  });
  ASSERT_TRUE(out.exited_ok());
  std::string e = std::to_string(EPERM);
  // sysfs(-1) without the filter: EINVAL; personality allowed; bpf still denied.
  EXPECT_EQ(out.out, e + "," + e + "," + std::to_string(EINVAL) + ",ok," + e);
}

TEST(Seccomp, UnknownSyscallNameIsAnErrorNamingIt) {
  policy::SeccompPolicy p;
  p.deny = {"uname", "foo"};
  auto r = compile_seccomp(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("process.seccomp.deny[1]: \"foo\" is not a syscall known to "
                                   "libseccomp"),
            std::string::npos)
      << r.error().message;
  policy::SeccompPolicy q;
  q.allow = {"bogus_call"};
  auto r2 = compile_seccomp(q);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("process.seccomp.allow[0]: \"bogus_call\""), std::string::npos);
}

TEST(Seccomp, UserNamespaceFiltersCannotBeLifted) {
  for (const char* name : {"unshare", "clone", "clone3"}) {
    policy::SeccompPolicy p;
    p.allow = {"bpf", name};
    auto r = compile_seccomp(p);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_NE(r.error().message.find(std::string("process.seccomp.allow[1]: \"") + name +
                                     "\" cannot be allowed"),
              std::string::npos)
        << r.error().message;
  }
}

TEST(Seccomp, SyscallsEveryProgramNeedsCannotBeDenied) {
  for (const char* name : {"execve", "exit_group"}) {
    policy::SeccompPolicy p;
    p.deny = {name};
    auto r = compile_seccomp(p);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_NE(r.error().message.find(std::string("process.seccomp.deny[0]: \"") + name +
                                     "\" cannot be denied"),
              std::string::npos)
        << r.error().message;
  }
}

TEST(Seccomp, InstallWithoutNoNewPrivsFailsClearlyWhenUnprivileged) {
  const auto& prog = default_program();
  auto r = run_in_child([&] {
    if (geteuid() == 0) {
      // Root has CAP_SYS_ADMIN, which lets it install without no_new_privs; drop it to test.
      if (setresuid(65534, 65534, 65534) != 0) {
        return std::string("setuid failed");
      }
    }
    auto st = install_seccomp(prog);
    return st.ok() ? std::string("installed") : st.error().to_string();
  });
  ASSERT_TRUE(r.exited_ok());
  EXPECT_NE(r.out.find("seccomp(SECCOMP_SET_MODE_FILTER)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("drop_privileges"), std::string::npos) << r.out;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Environment variable override for the duration of a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) {
      old_ = old;
    }
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

std::string only_cache_file(const std::string& dir) {
  std::string found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("seccomp-", 0) == 0) {
      found = e.path().string();
    }
  }
  return found;
}

TEST(Seccomp, CacheIsWrittenPrivatelyAndReadBackIdentically) {
  TempDir a, b, c;
  policy::SeccompPolicy p;
  p.deny = {"uname"};  // a list of its own, so other tests' memoized programs do not interfere
  std::vector<unsigned char> first;
  {
    ScopedEnv x("XDG_CACHE_HOME", a.path());
    auto r = compile_seccomp(p);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    first = r->bpf;
  }
  std::string file = only_cache_file(a / "cordon");
  ASSERT_FALSE(file.empty());
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((a / "cordon").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::string bytes = slurp(file);
  ASSERT_GT(bytes.size(), first.size());
  EXPECT_EQ(bytes.substr(bytes.size() - first.size()), std::string(first.begin(), first.end()));

  // A second location holding a copy: the cached bytes come back identical.
  std::filesystem::create_directory(b / "cordon");
  chmod((b / "cordon").c_str(), 0700);
  std::string copy = b / ("cordon/" + std::filesystem::path(file).filename().string());
  std::filesystem::copy_file(file, copy);
  chmod(copy.c_str(), 0600);
  {
    ScopedEnv x("XDG_CACHE_HOME", b.path());
    auto r = compile_seccomp(p);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->bpf, first);
  }

  // Proof the file is what is read: a cache file whose BPF part was replaced by another valid
  // program (the default one) under the same header is returned as is...
  const auto& other = default_program().bpf;
  ASSERT_NE(other, first);
  std::filesystem::create_directory(c / "cordon");
  chmod((c / "cordon").c_str(), 0700);
  std::string forged = c / ("cordon/" + std::filesystem::path(file).filename().string());
  {
    std::ofstream f(forged, std::ios::binary);
    f << bytes.substr(0, bytes.size() - first.size()) << std::string(other.begin(), other.end());
  }
  chmod(forged.c_str(), 0600);
  {
    ScopedEnv x("XDG_CACHE_HOME", c.path());
    auto r = compile_seccomp(p);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->bpf, other);
  }
}

TEST(Seccomp, CacheFilesOthersCouldWriteOrTruncatedAreIgnored) {
  TempDir a, b;
  policy::SeccompPolicy p;
  p.deny = {"chroot"};
  std::vector<unsigned char> fresh;
  {
    ScopedEnv x("XDG_CACHE_HOME", a.path());
    auto r = compile_seccomp(p);
    ASSERT_TRUE(r.ok());
    fresh = r->bpf;
  }
  std::string file = only_cache_file(a / "cordon");
  std::string bytes = slurp(file);
  std::string name = std::filesystem::path(file).filename().string();

  // Group-writable file with a forged program: ignored, rebuilt.
  std::filesystem::create_directory(b / "cordon");
  chmod((b / "cordon").c_str(), 0700);
  std::string target = b / ("cordon/" + name);
  {
    std::ofstream f(target, std::ios::binary);
    f << bytes.substr(0, bytes.size() - fresh.size()) << std::string(8, '\0');
  }
  chmod(target.c_str(), 0620);
  {
    ScopedEnv x("XDG_CACHE_HOME", b.path());
    auto r = compile_seccomp(p);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->bpf, fresh);
  }
  // Truncated mid-instruction: ignored, rebuilt, and replaced by a good file.
  TempDir c;
  std::filesystem::create_directory(c / "cordon");
  chmod((c / "cordon").c_str(), 0700);
  target = c / ("cordon/" + name);
  {
    std::ofstream f(target, std::ios::binary);
    f << bytes.substr(0, bytes.size() - 3);
  }
  chmod(target.c_str(), 0600);
  {
    ScopedEnv x("XDG_CACHE_HOME", c.path());
    auto r = compile_seccomp(p);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->bpf, fresh);
  }
  EXPECT_EQ(slurp(target), bytes);
}

TEST(Seccomp, CompiledProgramIsASaneBpfProgram) {
  const auto& prog = default_program();
  ASSERT_EQ(prog.bpf.size() % sizeof(sock_filter), 0u);
  size_t n = prog.bpf.size() / sizeof(sock_filter);
  EXPECT_GT(n, 50u);
  EXPECT_LE(n, static_cast<size_t>(BPF_MAXINSNS));
}

}  // namespace
}  // namespace cordon::launcher
