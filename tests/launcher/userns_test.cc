// cordon inside a user namespace it did not make (a rootless container): uid 0 there is no host
// root, so cordon maps itself; and when it may not create a user namespace at all, the error names
// the setting that fixes it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace {

using cordon::testing::build_path;
using cordon::testing::run_program;
using cordon::testing::RunResult;
using cordon::testing::RunSpec;
using cordon::testing::TempDir;

// Runs `script` under `unshare -Ur` (uid 0 of a fresh user namespace). As host root the outer
// uid is first dropped to nobody, so the namespace's uid 0 is an unprivileged host id, as in a
// rootless container.
RunResult in_user_namespace(const std::string& script, const TempDir& dir) {
  RunSpec spec;
  if (::geteuid() == 0) {
    spec.uid = 65534;
    spec.gid = 65534;
  }
  spec.env = std::vector<std::string>{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir.path(),
                                      "CORDON_STATE_DIR=" + dir.path() + "/state"};
  spec.deadline = std::chrono::seconds(60);
  return run_program({"unshare", "-Ur", "/bin/sh", "-c", script}, spec);
}

std::string describe(const RunResult& r) {
  return "exit=" + std::to_string(r.exit_code()) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

TEST(NestedUserNamespace, RootOfARootlessContainerMapsItselfAndRuns) {
  TempDir dir;
  ::mkdir((dir / "ws").c_str(), 0777);
  ::chmod((dir / "ws").c_str(), 0777);
  ::chmod(dir.path().c_str(), 0777);
  auto r = in_user_namespace(build_path("launcher/cordon") + " run -q -w " + dir / "ws" +
                                 " -- sh -c 'id -u; echo made > new.txt; cat new.txt'",
                             dir);
  ASSERT_EQ(r.exit_code(), 0) << describe(r);
  EXPECT_EQ(r.out, "0\nmade\n") << describe(r);
  // Copy-on-write: the file is in the session's layer, not in the workspace.
  EXPECT_FALSE(std::ifstream(dir / "ws/new.txt").good());
}

TEST(NestedUserNamespace, NoUserNamespacesLeftNamesTheSettingToRaise) {
  TempDir dir;
  ::mkdir((dir / "ws").c_str(), 0777);
  ::chmod((dir / "ws").c_str(), 0777);
  ::chmod(dir.path().c_str(), 0777);
  // user.max_user_namespaces is per user namespace: 0 here forbids cordon's own, nothing else.
  auto r =
      in_user_namespace("echo 0 > /proc/sys/user/max_user_namespaces && " +
                            build_path("launcher/cordon") + " run -q -w " + dir / "ws" + " -- true",
                        dir);
  EXPECT_EQ(r.exit_code(), 125) << describe(r);
  EXPECT_NE(r.err.find("user.max_user_namespaces"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("CLONE_NEWUSER"), std::string::npos) << describe(r);
}

// Root of a user namespace made without its own mount namespace may not mount FUSE: cordon says
// so and takes the overlayfs copy-on-write, instead of starting cordon-fs only to see the mount
// fail. Which reason is named depends on whether /dev/fuse is open to the unprivileged id.
TEST(NestedUserNamespace, RootWithoutItsOwnMountNamespaceTakesOverlayfsAndSaysWhy) {
  TempDir dir;
  ::mkdir((dir / "ws").c_str(), 0777);
  ::chmod((dir / "ws").c_str(), 0777);
  ::chmod(dir.path().c_str(), 0777);
  auto r =
      in_user_namespace("test -r /dev/fuse -a -w /dev/fuse && echo fuse-open >&2; " +
                            build_path("launcher/cordon") + " run -w " + dir / "ws" + " -- true",
                        dir);
  ASSERT_EQ(r.exit_code(), 0) << describe(r);
  EXPECT_NE(r.err.find("copy-on-write through kernel overlayfs"), std::string::npos) << describe(r);
  if (r.err.find("fuse-open") != std::string::npos) {
    EXPECT_NE(r.err.find("may not mount FUSE"), std::string::npos) << describe(r);
  }
}

}  // namespace
