// `cordon --version`: the build it names and the kernel features it reports, checked against
// what this host has (read here independently of the launcher's probes).
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "launcher/sandbox/userns.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::build_path;
using cordon::testing::run_program;
using cordon::testing::TempDir;

std::string version_output() {
  auto r = run_program({build_path("launcher/cordon"), "--version"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return r.out;
}

std::string line_of(const std::string& text, const std::string& prefix) {
  size_t at = text.find(prefix);
  if (at == std::string::npos) {
    return "";
  }
  return text.substr(at, text.find('\n', at) - at);
}

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

TEST(Version, NamesTheProjectVersionAndACommitOfThisRepository) {
  std::string out = version_output();
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex("^cordon ([0-9.]+) \\(git ([0-9a-f]{12}|unknown)\\)\n")))
      << out;
  EXPECT_EQ(m[1], CORDON_VERSION);
  if (m[2] != "unknown") {
    auto r = run_program({"git", "-c", "safe.directory=*", "-C", CORDON_SOURCE_DIR, "cat-file",
                          "-e", m[2].str() + "^{commit}"});
    EXPECT_EQ(r.exit_code(), 0) << m[2] << " is not a commit of " << CORDON_SOURCE_DIR;
  }
}

TEST(Version, LandlockAbiIsTheKernels) {
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, 1 /* ..._VERSION */);
  std::string want = abi > 0 ? "  Landlock: ABI " + std::to_string(abi) : "  Landlock: no";
  EXPECT_EQ(line_of(version_output(), "  Landlock:"), want);
}

TEST(Version, FuseOverIoUringFollowsTheModuleParameter) {
  bool on = read_first_line("/sys/module/fuse/parameters/enable_uring") == "Y";
  std::string line = line_of(version_output(), "  FUSE over io_uring:");
  EXPECT_EQ(line.rfind(on ? "  FUSE over io_uring: on" : "  FUSE over io_uring: off", 0), 0u)
      << line;
}

TEST(Version, CgroupVersionIsWhatIsMounted) {
  struct statfs top {};
  ASSERT_EQ(::statfs("/sys/fs/cgroup", &top), 0);
  struct statfs unified {};
  std::string want = "v1";
  if (top.f_type == CGROUP2_SUPER_MAGIC) {
    want = "v2;";
  } else if (::statfs("/sys/fs/cgroup/unified", &unified) == 0 &&
             unified.f_type == CGROUP2_SUPER_MAGIC) {
    want = "hybrid (v1 and v2);";
  }
  std::string line = line_of(version_output(), "  cgroup:");
  EXPECT_EQ(line.rfind("  cgroup: " + want, 0), 0u) << line;
}

TEST(Version, UserNamespacesForOrdinaryUsersFollowTheSysctls) {
  std::string clone = read_first_line("/proc/sys/kernel/unprivileged_userns_clone");
  std::string apparmor = read_first_line("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  bool refused = clone == "0" || (!apparmor.empty() && apparmor != "0") ||
                 read_first_line("/proc/sys/user/max_user_namespaces") == "0";
  std::string line = line_of(version_output(), "  user namespaces:");
  EXPECT_NE(line.find(refused ? "for ordinary users: refused" : "for ordinary users: allowed"),
            std::string::npos)
      << line;
}

TEST(Version, FusePassthroughNeedsLinux69AndTheInitialNamespacesCapSysAdmin) {
  struct utsname u {};
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  std::string line = line_of(version_output(), "  FUSE passthrough:");
  if (major < 6 || (major == 6 && minor < 9)) {
    EXPECT_EQ(line, "  FUSE passthrough: no (needs Linux 6.9+)");
  } else if (::geteuid() == 0 &&
             read_first_line("/proc/self/uid_map").find("4294967295") != std::string::npos) {
    EXPECT_EQ(line.rfind("  FUSE passthrough: yes", 0), 0u) << line;
  } else {
    EXPECT_EQ(line.rfind("  FUSE passthrough: not for this user", 0), 0u) << line;
  }
}

// The sysctls as files: which one is named as the restriction.
TEST(UsernsSettings, NamesTheSettingThatRefusesOrdinaryUsers) {
  TempDir sys;
  ::mkdir((sys / "kernel").c_str(), 0755);
  ::mkdir((sys / "user").c_str(), 0755);
  auto set = [&](const std::string& name, const std::string& value) {
    std::ofstream(sys / name) << value << "\n";
  };
  using cordon::launcher::read_userns_settings;
  using cordon::launcher::userns_restriction;
  set("user/max_user_namespaces", "15000");
  EXPECT_EQ(userns_restriction(read_userns_settings(sys.path())), "");
  set("kernel/apparmor_restrict_unprivileged_userns", "1");
  EXPECT_EQ(userns_restriction(read_userns_settings(sys.path())),
            "kernel.apparmor_restrict_unprivileged_userns=1");
  set("kernel/unprivileged_userns_clone", "0");
  EXPECT_EQ(userns_restriction(read_userns_settings(sys.path())),
            "kernel.unprivileged_userns_clone=0");
  set("kernel/unprivileged_userns_clone", "1");
  set("kernel/apparmor_restrict_unprivileged_userns", "0");
  set("user/max_user_namespaces", "0");
  EXPECT_EQ(userns_restriction(read_userns_settings(sys.path())), "user.max_user_namespaces=0");
}

// The refusal's message under each restriction: the setting, and for AppArmor's the profile and
// the command that loads it, or what to do when it is missing or does not cover this cordon.
TEST(UsernsSettings, AppArmorRestrictionNamesTheProfileAndTheCommandThatLoadsIt) {
  using cordon::launcher::userns_disabled_hint;
  cordon::launcher::UsernsSettings aa;
  aa.apparmor_restrict_unprivileged_userns = 1;
  std::string loaded = userns_disabled_hint(aa, "/usr/bin/cordon", true);
  EXPECT_EQ(loaded.rfind("kernel.apparmor_restrict_unprivileged_userns=1: ", 0), 0u) << loaded;
  EXPECT_NE(loaded.find("load cordon's profile /etc/apparmor.d/cordon: sudo apparmor_parser -r "
                        "/etc/apparmor.d/cordon"),
            std::string::npos)
      << loaded;
  EXPECT_NE(loaded.find("sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
            std::string::npos);
  std::string missing = userns_disabled_hint(aa, "/usr/bin/cordon", false);
  EXPECT_NE(missing.find("not installed: sudo install -m 644 /usr/share/cordon/apparmor/cordon "
                         "/etc/apparmor.d/cordon"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("then load it: sudo apparmor_parser -r /etc/apparmor.d/cordon"),
            std::string::npos)
      << missing;
  std::string elsewhere = userns_disabled_hint(aa, "/home/u/cordon/build/launcher/cordon", true);
  EXPECT_NE(elsewhere.find("lets only /usr/bin/cordon create them, and this cordon is "
                           "/home/u/cordon/build/launcher/cordon"),
            std::string::npos)
      << elsewhere;
  cordon::launcher::UsernsSettings debian;
  debian.unprivileged_userns_clone = 0;
  std::string off = userns_disabled_hint(debian, "/usr/bin/cordon", true);
  EXPECT_EQ(off.rfind("kernel.unprivileged_userns_clone=0: ", 0), 0u) << off;
  EXPECT_NE(off.find("sudo sysctl -w kernel.unprivileged_userns_clone=1"), std::string::npos);
  EXPECT_EQ(off.find("apparmor"), std::string::npos) << "the profile does not lift this one";
}

}  // namespace
