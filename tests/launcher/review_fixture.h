// Shared by the review tests (workflow_cli_test.cc, review_attack_test.cc): the review commands
// run as the user would, and which cow backends this host can run.
#pragma once

#include <unistd.h>

#include <string>
#include <vector>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/tree_state.h"

namespace cordon::testing {

inline bool fuse_usable() { return ::access("/dev/fuse", R_OK | W_OK) == 0; }
#define REQUIRE_FUSE() CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)")

// `cordon ARGS...` in the fixture's workspace, with its environment.
inline RunResult cordon(SandboxFixture& f, std::vector<std::string> args) {
  args.insert(args.begin(), cordon_bin());
  return run_program(args, RunSpec{.env = f.env(), .cwd = f.ws()});
}

// The cow backends this uid can run: cordon-fs where /dev/fuse is usable, kernel overlayfs
// always (forced with CORDON_COW_BACKEND where cordon-fs would be chosen).
inline std::vector<std::string> cow_backends() {
  std::vector<std::string> out = {"overlay"};
  if (fuse_usable()) {
    out.insert(out.begin(), "cordon-fs");
  }
  return out;
}

inline void use_backend(SandboxFixture& f, const std::string& backend) {
  if (backend == "overlay" && fuse_usable()) {
    f.env().push_back("CORDON_COW_BACKEND=overlay");
  }
}

}  // namespace cordon::testing
