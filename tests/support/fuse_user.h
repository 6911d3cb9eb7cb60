// An unprivileged user that may use FUSE, for root-run tests that need a rootless cordon-fs or a
// rootless `cordon run` through it.
#pragma once

#include <grp.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "tests/support/test_env.h"

namespace cordon::testing {

struct UserIds {
  uid_t uid;
  gid_t gid;
};

// Whether `u`, with no supplementary groups (as RunSpec and the fixtures drop to it), may open
// /dev/fuse for reading and writing. Root only (it changes ids in a child).
inline bool may_use_fuse(const UserIds& u) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(u.gid, u.gid, u.gid) != 0 ||
        ::setresuid(u.uid, u.uid, u.uid) != 0) {
      ::_exit(2);
    }
    ::_exit(::access("/dev/fuse", R_OK | W_OK) == 0 ? 0 : 1);
  }
  int st = 0;
  return pid > 0 && ::waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// $CORDON_TEST_FUSE_USER, else "cordon-fuse" (a user given an ACL on a /dev/fuse that is closed
// to others), else nobody where /dev/fuse is open to all (Debian's default mode, 0666); only one
// that may_use_fuse(). Root only.
inline std::optional<UserIds> fuse_user() {
  const char* env = std::getenv("CORDON_TEST_FUSE_USER");
  for (const char* name : {env, "cordon-fuse", "nobody"}) {
    if (name == nullptr || *name == '\0') {
      continue;
    }
    const passwd* pw = ::getpwnam(name);
    if (pw != nullptr && pw->pw_uid != 0 && may_use_fuse({pw->pw_uid, pw->pw_gid})) {
      return UserIds{pw->pw_uid, pw->pw_gid};
    }
  }
  return std::nullopt;
}

inline constexpr const char* kFuseUserWhy =
    "an unprivileged user that may use /dev/fuse (cordon-fuse with an ACL on it, "
    "$CORDON_TEST_FUSE_USER, or /dev/fuse mode 0666)";

}  // namespace cordon::testing
