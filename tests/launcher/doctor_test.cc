// `cordon doctor`: the real binary on this host, as root and as an ordinary user, with state
// directories on tmpfs and on overlayfs; its rows checked against what the test measures itself.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/support/fuse_user.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::build_path;
using cordon::testing::may_use_fuse;
using cordon::testing::run_program;
using cordon::testing::RunResult;
using cordon::testing::RunSpec;
using cordon::testing::TempDir;
using cordon::testing::UserIds;

const std::set<std::string> kRows = {"namespaces", "/proc",     "seccomp",  "/dev/fuse",
                                     "cgroups",    "state dir", "Landlock", "nftables"};

// The unprivileged user of the suite's rootless run.
std::optional<UserIds> test_user() {
  const passwd* pw = ::getpwnam("cordon-test");
  if (pw == nullptr) {
    return std::nullopt;
  }
  return UserIds{pw->pw_uid, pw->pw_gid};
}

// Runs `cordon doctor ARGS` with its records kept under `state` (and HOME there), as `user`
// when given (root only), under no_new_privs when asked (setpriv(1), as a container's
// allowPrivilegeEscalation: false does).
RunResult doctor(const std::vector<std::string>& args, const std::string& state,
                 std::optional<UserIds> user = std::nullopt, bool no_new_privs = false) {
  std::vector<std::string> argv = {build_path("launcher/cordon"), "doctor"};
  if (no_new_privs) {
    argv.insert(argv.begin(), {"setpriv", "--no-new-privs"});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  RunSpec spec;
  spec.env =
      std::vector<std::string>{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               "HOME=" + state, "CORDON_STATE_DIR=" + state};
  if (user) {
    spec.uid = user->uid;
    spec.gid = user->gid;
  }
  return run_program(argv, spec);
}

struct Row {
  std::string state, measured, consequence, fix;
};

std::map<std::string, Row> rows_of(const RunResult& r, nlohmann::json* whole = nullptr) {
  std::map<std::string, Row> rows;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  if (j.is_discarded()) {
    return rows;
  }
  for (const auto& c : j["checks"]) {
    rows[c["name"]] = Row{c["state"], c["measured"], c["consequence"], c["fix"]};
  }
  if (whole != nullptr) {
    *whole = j;
  }
  return rows;
}

// A state directory the test's user may write, mode 0777 so a dropped uid can use it too.
std::string open_dir(const TempDir& t) {
  ::chmod(t.path().c_str(), 0777);
  return t.path();
}

// A mount made by the test and undone at scope exit.
struct MountGuard {
  std::string where;
  ~MountGuard() {
    if (!where.empty()) {
      ::umount2(where.c_str(), MNT_DETACH);
    }
  }
};

TEST(Doctor, TableHasEveryRowAStateAndTheVerdictMatchesTheExitStatus) {
  TempDir state;
  RunResult r = doctor({}, open_dir(state));
  ASSERT_TRUE(r.exit_code() == 0 || r.exit_code() == 1 || r.exit_code() == 2) << r.err;
  EXPECT_EQ(r.out.rfind("CHECK", 0), 0u) << r.out;
  for (const auto& name : kRows) {
    EXPECT_NE(r.out.find("\n" + name + " "), std::string::npos) << name << "\n" << r.out;
  }
  size_t fixes = 0;
  for (size_t at = 0; (at = r.out.find(" FIX: ", at)) != std::string::npos; ++at) {
    ++fixes;
  }
  size_t not_ok = 0;
  for (const char* s : {"  degraded  ", "  missing   "}) {
    for (size_t at = 0; (at = r.out.find(s, at)) != std::string::npos; ++at) {
      ++not_ok;
    }
  }
  EXPECT_EQ(fixes, not_ok) << "one FIX line under each row that is not ok\n" << r.out;
  const char* verdicts[] = {"cordon can run here with full protection\n",
                            "cordon can run here; degraded: ", "cordon cannot run here: "};
  std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(last.rfind(verdicts[r.exit_code()], 0), 0u) << last;
}

TEST(Doctor, AsRootTheKernelFeaturesOfThisHostAreOk) {
  CORDON_REQUIRE_ROOT();
  TempDir state;
  nlohmann::json j;
  RunResult r = doctor({"--json"}, open_dir(state));
  auto rows = rows_of(r, &j);
  for (const char* name : {"namespaces", "/proc", "seccomp", "nftables", "state dir"}) {
    EXPECT_EQ(rows[name].state, "ok")
        << name << ": " << rows[name].measured << " / " << rows[name].fix;
  }
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, 1 /* ..._VERSION */);
  ASSERT_GE(abi, 1) << "this host has Landlock";
  EXPECT_EQ(rows["Landlock"].state, "ok");
  EXPECT_NE(rows["Landlock"].measured.find("ABI " + std::to_string(abi)), std::string::npos)
      << rows["Landlock"].measured;
  ASSERT_EQ(::access("/dev/fuse", R_OK | W_OK), 0) << "root can open /dev/fuse here";
  EXPECT_EQ(rows["/dev/fuse"].state, "ok") << rows["/dev/fuse"].measured;
  // Whatever is not ok names its consequence and fix, and decides the exit status.
  int worst = 0;
  for (const auto& [name, row] : rows) {
    if (row.state != "ok") {
      EXPECT_FALSE(row.consequence.empty()) << name;
      EXPECT_FALSE(row.fix.empty()) << name;
      worst = std::max(worst, row.state == "missing" ? 2 : 1);
    }
  }
  EXPECT_EQ(r.exit_code(), worst) << r.out;
  EXPECT_EQ(j["exit_status"], r.exit_code());
}

TEST(Doctor, WithoutAccessToDevFuseTheFuseRowNamesTheOverlayFallbackAndTheFix) {
  std::optional<UserIds> user;
  UserIds me{::geteuid(), ::getegid()};
  if (::geteuid() == 0) {
    user = test_user();
    CORDON_REQUIRE(user.has_value(), "the user cordon-test (tests/run.sh makes it)");
    me = *user;
  }
  bool fuse_open = ::geteuid() == 0 ? may_use_fuse(me) : ::access("/dev/fuse", R_OK | W_OK) == 0;
  TempDir state;
  RunResult r = doctor({"--json"}, open_dir(state), user);
  auto rows = rows_of(r);
  const Row& fuse = rows["/dev/fuse"];
  if (fuse_open) {
    // This user may open the device (an ACL, mode 0666): the row must agree.
    EXPECT_EQ(fuse.state, "ok") << fuse.measured;
    return;
  }
  EXPECT_EQ(fuse.state, "degraded") << fuse.measured;
  EXPECT_NE(fuse.measured.find("open(\"/dev/fuse\", O_RDWR) as uid " + std::to_string(me.uid)),
            std::string::npos)
      << fuse.measured;
  EXPECT_NE(fuse.consequence.find("overlayfs"), std::string::npos) << fuse.consequence;
  EXPECT_NE(fuse.fix.find("--device /dev/fuse"), std::string::npos) << fuse.fix;
  EXPECT_NE(fuse.fix.find("chmod 0666 /dev/fuse"), std::string::npos) << fuse.fix;
  // Nothing else of this host is missing for that user, so the status is the degraded one.
  for (const auto& [name, row] : rows) {
    EXPECT_NE(row.state, "missing") << name << ": " << row.measured;
  }
  EXPECT_EQ(r.exit_code(), 1) << r.out << r.err;
  RunResult table = doctor({}, state.path(), user);
  EXPECT_NE(table.out.find("cordon can run here; degraded: /dev/fuse (cow mode falls back to "
                           "kernel overlayfs"),
            std::string::npos)
      << table.out;
}

TEST(Doctor, StateDirOnOverlayfsIsReportedWithTheTmpfsOrEmptyDirFix) {
  CORDON_REQUIRE_ROOT();
  TempDir t;
  for (const char* d : {"l", "u", "w", "m"}) {
    std::filesystem::create_directory(t / d);
  }
  std::string opts = "lowerdir=" + (t / "l") + ",upperdir=" + (t / "u") + ",workdir=" + (t / "w");
  ASSERT_EQ(::mount("overlay", (t / "m").c_str(), "overlay", 0, opts.c_str()), 0)
      << std::strerror(errno);
  MountGuard guard{t / "m"};
  ::chmod((t / "m").c_str(), 0777);
  TempDir home;
  for (std::optional<UserIds> user : {std::optional<UserIds>(), test_user()}) {
    RunResult r = doctor({"--json", "--state-dir", t / "m"}, open_dir(home), user);
    auto rows = rows_of(r);
    const Row& sd = rows["state dir"];
    EXPECT_NE(sd.state, "ok") << sd.measured;
    EXPECT_NE(sd.measured.find(t / "m" + " (--state-dir) on overlay"), std::string::npos)
        << sd.measured;
    EXPECT_NE(sd.measured.find("upperdir"), std::string::npos) << sd.measured;
    EXPECT_NE(sd.fix.find("tmpfs"), std::string::npos) << sd.fix;
    EXPECT_NE(sd.fix.find("emptyDir"), std::string::npos) << sd.fix;
    EXPECT_NE(sd.fix.find("CORDON_STATE_DIR"), std::string::npos) << sd.fix;
    EXPECT_GE(r.exit_code(), 1);
  }
  // The trial's scratch layers are gone again.
  EXPECT_TRUE(std::filesystem::is_empty(t / "m"));
}

TEST(Doctor, StateDirOnTmpfsIsOk) {
  // As root a tmpfs of the test's own (and the check again as cordon-test); otherwise /dev/shm.
  bool root = ::geteuid() == 0;
  struct statfs shm {};
  CORDON_REQUIRE(root || (::statfs("/dev/shm", &shm) == 0 && shm.f_type == TMPFS_MAGIC),
                 "root, or a tmpfs on /dev/shm");
  TempDir t(root ? "/tmp" : "/dev/shm");
  MountGuard guard;
  if (root) {
    ASSERT_EQ(::mount("tmpfs", t.path().c_str(), "tmpfs", 0, "mode=0777,size=16m"), 0)
        << std::strerror(errno);
    guard.where = t.path();
  }
  TempDir home;
  std::vector<std::optional<UserIds>> users = {std::nullopt};
  if (root) {
    users.push_back(test_user());
  }
  for (const std::optional<UserIds>& user : users) {
    RunResult r = doctor({"--json", "--state-dir", t.path()}, open_dir(home), user);
    auto rows = rows_of(r);
    EXPECT_EQ(rows["state dir"].state, "ok") << rows["state dir"].measured;
    EXPECT_NE(rows["state dir"].measured.find("on tmpfs; an overlay upper layer works there"),
              std::string::npos)
        << rows["state dir"].measured;
  }
  EXPECT_TRUE(std::filesystem::is_empty(t.path()));
}

TEST(Doctor, JsonParsesAndHoldsEveryCheck) {
  TempDir state;
  nlohmann::json j;
  RunResult r = doctor({"--json"}, open_dir(state));
  auto rows = rows_of(r, &j);
  std::set<std::string> names;
  for (const auto& [name, row] : rows) {
    names.insert(name);
    EXPECT_TRUE(row.state == "ok" || row.state == "degraded" || row.state == "missing") << name;
    EXPECT_FALSE(row.measured.empty()) << name;
  }
  EXPECT_EQ(names, kRows);
  EXPECT_EQ(j["checks"].size(), kRows.size());
  EXPECT_EQ(j["exit_status"], r.exit_code());
  EXPECT_EQ(j["state_dir"], state.path());
  const char* results[] = {"ok", "degraded", "cannot-run"};
  ASSERT_LE(r.exit_code(), 2);
  EXPECT_EQ(j["result"], results[r.exit_code()]);
}

TEST(Doctor, UnderNoNewPrivsAnOrdinaryUserIsToldFusermountCannotMountAndCowFallsBack) {
  // An ordinary user mounts FUSE through the setuid fusermount3, which no_new_privs disarms:
  // the device opening is not enough, and the row must not say ok.
  std::optional<UserIds> user;
  if (::geteuid() == 0) {
    user = cordon::testing::fuse_user();
    CORDON_REQUIRE(user.has_value(), "a user that may open /dev/fuse (tests/run.sh makes one)");
  } else {
    CORDON_REQUIRE(::access("/dev/fuse", R_OK | W_OK) == 0, "/dev/fuse usable by this user");
  }
  TempDir state;
  RunResult r = doctor({"--json"}, open_dir(state), user, true);
  auto rows = rows_of(r);
  const Row& fuse = rows["/dev/fuse"];
  EXPECT_EQ(fuse.state, "degraded") << fuse.measured;
  EXPECT_NE(fuse.measured.find("no_new_privs is set"), std::string::npos) << fuse.measured;
  EXPECT_NE(fuse.consequence.find("overlayfs"), std::string::npos) << fuse.consequence;
  // Without no_new_privs the same user gets the device.
  EXPECT_EQ(rows_of(doctor({"--json"}, state.path(), user))["/dev/fuse"].state, "ok");
}

// PROGRAM as USER with CAP_SYS_ADMIN out of the bounding set, as a container's --cap-drop=ALL
// leaves an ordinary user (setpriv drops it as root, then becomes the user).
RunResult without_sys_admin(const std::vector<std::string>& program, const std::string& state,
                            const UserIds& user, const std::string& cwd = "") {
  std::vector<std::string> argv = {"setpriv",
                                   "--bounding-set=-sys_admin",
                                   "--reuid=" + std::to_string(user.uid),
                                   "--regid=" + std::to_string(user.gid),
                                   "--clear-groups",
                                   "--"};
  argv.insert(argv.end(), program.begin(), program.end());
  RunSpec spec;
  spec.env =
      std::vector<std::string>{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               "HOME=" + state, "CORDON_STATE_DIR=" + state};
  spec.cwd = cwd;
  return run_program(argv, spec);
}

TEST(Doctor, WithoutSysAdminInTheBoundingSetFusermountCannotMountAndCowFallsBack) {
  // The setuid fusermount3 gains uid 0 but no capability the bounding set lacks: its mount fails
  // with EPERM, so the row must not say ok, and a cow run must go through overlayfs, not stop.
  CORDON_REQUIRE(::geteuid() == 0, "root, to drop CAP_SYS_ADMIN from the bounding set");
  std::optional<UserIds> user = cordon::testing::fuse_user();
  CORDON_REQUIRE(user.has_value(), "a user that may open /dev/fuse (tests/run.sh makes one)");
  TempDir state, ws;
  ASSERT_EQ(::chown(state.path().c_str(), user->uid, user->gid), 0);
  ASSERT_EQ(::chown(ws.path().c_str(), user->uid, user->gid), 0);
  auto rows = rows_of(
      without_sys_admin({build_path("launcher/cordon"), "doctor", "--json"}, state.path(), *user));
  const Row& fuse = rows["/dev/fuse"];
  EXPECT_EQ(fuse.state, "degraded") << fuse.measured;
  EXPECT_NE(fuse.measured.find("CAP_SYS_ADMIN is not in the capability bounding set"),
            std::string::npos)
      << fuse.measured;
  EXPECT_NE(fuse.fix.find("podman --cap-add SYS_ADMIN"), std::string::npos) << fuse.fix;

  RunResult run = without_sys_admin({build_path("launcher/cordon"), "run", "-w", ws.path(), "--",
                                     "sh", "-c", "echo written > new.txt"},
                                    state.path(), *user, ws.path());
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_NE(run.err.find("copy-on-write through kernel overlayfs, not cordon-fs (CAP_SYS_ADMIN"),
            std::string::npos)
      << run.err;
  EXPECT_FALSE(std::filesystem::exists(ws / "new.txt"));
  RunResult diff =
      without_sys_admin({build_path("launcher/cordon"), "diff", "last"}, state.path(), *user);
  EXPECT_NE(diff.out.find("+written"), std::string::npos) << diff.out << diff.err;
}

TEST(Doctor, ANonexistentStateDirIsAClearUsageError) {
  TempDir state;
  std::string missing = state / "no-such-dir";
  RunResult r = doctor({"--state-dir", missing}, open_dir(state));
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "cordon doctor: --state-dir " + missing +
                       ": No such file or directory (name an existing directory)\n");
}

}  // namespace
