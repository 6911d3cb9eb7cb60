// drop_privileges and verify_sandbox_holds in forked children: as host root and as uid 0 of a
// fresh user namespace, every capability set ends empty, no_new_privs is on, securebits are
// locked, exec does not give uid 0 its capabilities back, and the final check catches a missing
// seccomp filter or leftover capabilities.
#include "launcher/sandbox/caps.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <sstream>
#include <string>

#include "launcher/sandbox/seccomp.h"
#include "tests/support/fork_child.h"
#include "tests/support/test_env.h"

namespace cordon::launcher {
namespace {

using cordon::testing::ChildResult;
using cordon::testing::run_in_child;

std::string read_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return "";
  }
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    s.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return s;
}

// "CapEff=0000000000000000 ..." for the fields of /proc/<self>/status that matter here.
std::string status_summary(const std::string& status) {
  std::ostringstream o;
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    for (const char* k :
         {"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:", "Seccomp:"}) {
      if (line.rfind(k, 0) == 0) {
        std::string v = line.substr(std::string(k).size());
        v.erase(0, v.find_first_not_of(" \t"));
        o << k << v << " ";
      }
    }
  }
  return o.str();
}

constexpr const char* kDropped =
    "CapInh:0000000000000000 CapPrm:0000000000000000 CapEff:0000000000000000 "
    "CapBnd:0000000000000000 CapAmb:0000000000000000 NoNewPrivs:1 ";

// Becomes uid/gid 0 of a new user namespace mapped onto `outside` (full capabilities inside).
bool enter_user_namespace(uid_t outside) {
  if (geteuid() == 0 &&
      (setresgid(outside, outside, outside) != 0 || setresuid(outside, outside, outside) != 0)) {
    return false;
  }
  // A uid change clears "dumpable", which makes /proc/self/*_map root-owned; restore it.
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER) != 0) {
    return false;
  }
  auto write_to = [](const char* path, const std::string& s) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
    if (fd >= 0) {
      close(fd);
    }
    return ok;
  };
  return write_to("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n") &&
         write_to("/proc/self/setgroups", "deny") &&
         write_to("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n");
}

bool userns_available() {
  auto r = run_in_child([] { return enter_user_namespace(65534) ? std::string("yes") : "no"; });
  return r.out == "yes";
}

TEST(Caps, DropAsHostRootEmptiesEverySet) {
  CORDON_REQUIRE_ROOT();
  auto r = run_in_child([] {
    auto st = drop_privileges();
    if (!st.ok()) {
      return st.error().to_string();
    }
    return status_summary(read_file("/proc/self/status"));
  });
  ASSERT_TRUE(r.exited_ok());
  EXPECT_EQ(r.out, std::string(kDropped) + "Seccomp:0 ");
}

TEST(Caps, DropAsRootOfAUserNamespaceEmptiesEverySet) {
  CORDON_REQUIRE(userns_available(), "unprivileged user namespaces");
  auto r = run_in_child([] {
    if (!enter_user_namespace(65534)) {
      return std::string("userns setup failed");
    }
    std::string before = status_summary(read_file("/proc/self/status"));
    auto st = drop_privileges();
    if (!st.ok()) {
      return st.error().to_string();
    }
    return before + "| " + status_summary(read_file("/proc/self/status"));
  });
  ASSERT_TRUE(r.exited_ok());
  // Before: uid 0 in the namespace holds capabilities there.
  std::string before = r.out.substr(0, r.out.find('|'));
  EXPECT_EQ(before.find("CapEff:0000000000000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string("| ") + kDropped + "Seccomp:0 "), std::string::npos) << r.out;
}

TEST(Caps, SecurebitsAreSetAndLocked) {
  CORDON_REQUIRE(geteuid() == 0 || userns_available(), "root or user namespaces");
  auto r = run_in_child([] {
    if (geteuid() != 0 && !enter_user_namespace(geteuid())) {
      return std::string("userns setup failed");
    }
    auto st = drop_privileges();
    if (!st.ok()) {
      return st.error().to_string();
    }
    int bits = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    int want = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
               SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
               SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    bool reset_refused = prctl(PR_SET_SECUREBITS, 0, 0, 0, 0) == -1 && errno == EPERM;
    return std::string(bits == want ? "bits" : "wrong bits " + std::to_string(bits)) +
           (reset_refused ? ",locked" : ",unlocked");
  });
  ASSERT_TRUE(r.exited_ok());
  EXPECT_EQ(r.out, "bits,locked");
}

TEST(Caps, ExecAfterDropDoesNotRestoreRootCapabilities) {
  CORDON_REQUIRE(geteuid() == 0 || userns_available(), "root or user namespaces");
  // uid 0 normally gets a full capability set on exec; NOROOT and the empty bounding set stop it.
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    dup2(p[1], 1);
    if (geteuid() != 0 && !enter_user_namespace(geteuid())) {
      _exit(3);
    }
    if (geteuid() != 0 || !drop_privileges().ok()) {
      _exit(4);
    }
    execl("/bin/cat", "cat", "/proc/self/status", static_cast<char*>(nullptr));
    _exit(5);
  }
  close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<size_t>(n));
  }
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ(status_summary(out), std::string(kDropped) + "Seccomp:0 ");
  EXPECT_NE(out.find("\nUid:\t0\t0\t0\t0"), std::string::npos) << "ran as uid 0";
}

TEST(Caps, VerifySucceedsAfterTheFullSequence) {
  CORDON_REQUIRE(geteuid() == 0 || userns_available(), "root or user namespaces");
  auto prog = compile_seccomp({});
  ASSERT_TRUE(prog.ok()) << prog.error().to_string();
  for (bool in_userns : {false, true}) {
    SCOPED_TRACE(in_userns ? "in a user namespace" : "as host root");
    if (!in_userns && geteuid() != 0) {
      continue;
    }
    if (in_userns && !userns_available()) {
      continue;
    }
    auto r = run_in_child([&] {
      if (in_userns && !enter_user_namespace(65534)) {
        return std::string("userns setup failed");
      }
      auto a = drop_privileges();
      if (!a.ok()) {
        return "drop: " + a.error().to_string();
      }
      auto b = install_seccomp(*prog);
      if (!b.ok()) {
        return "install: " + b.error().to_string();
      }
      auto c = verify_sandbox_holds();
      return c.ok() ? std::string("holds") : "verify: " + c.error().to_string();
    });
    ASSERT_TRUE(r.exited_ok());
    EXPECT_EQ(r.out, "holds");
  }
}

TEST(Caps, VerifyFailsWithoutSeccompNamingIt) {
  CORDON_REQUIRE(geteuid() == 0 || userns_available(), "root or user namespaces");
  auto r = run_in_child([] {
    if (geteuid() != 0 && !enter_user_namespace(geteuid())) {
      return std::string("userns setup failed");
    }
    auto a = drop_privileges();
    if (!a.ok()) {
      return "drop: " + a.error().to_string();
    }
    auto c = verify_sandbox_holds();
    return c.ok() ? std::string("holds") : c.error().to_string();
  });
  ASSERT_TRUE(r.exited_ok());
  EXPECT_NE(r.out.find("no seccomp filter is installed"), std::string::npos) << r.out;
}

TEST(Caps, VerifyFailsWhenCapabilitiesRemain) {
  CORDON_REQUIRE_ROOT();
  auto prog = compile_seccomp({});
  ASSERT_TRUE(prog.ok());
  auto r = run_in_child([&] {
    // Seccomp and no_new_privs, but no drop_privileges: root keeps its capabilities.
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || !install_seccomp(*prog).ok()) {
      return std::string("setup failed");
    }
    auto c = verify_sandbox_holds();
    return c.ok() ? std::string("holds") : c.error().to_string();
  });
  ASSERT_TRUE(r.exited_ok());
  EXPECT_NE(r.out.find("capabilities still held"), std::string::npos) << r.out;
}

TEST(Caps, VerifyFailsWithoutNoNewPrivs) {
  CORDON_REQUIRE_ROOT();
  auto r = run_in_child([] {
    auto c = verify_sandbox_holds();
    return c.ok() ? std::string("holds") : c.error().to_string();
  });
  ASSERT_TRUE(r.exited_ok());
  // Host root: the first thing found open is the capability set.
  EXPECT_NE(r.out.find("sandbox check:"), std::string::npos) << r.out;
  EXPECT_NE(r.out, "holds");
}

}  // namespace
}  // namespace cordon::launcher
