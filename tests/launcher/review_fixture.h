// Shared by the review tests (workflow_cli_test.cc, review_attack_test.cc): the review commands
// run as the user would, which cow backends this host can run, and a tree state precise enough
// to prove a workspace was not touched.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {

inline bool fuse_usable() { return ::access("/dev/fuse", R_OK | W_OK) == 0; }
#define REQUIRE_FUSE() CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)")

// Type, mode, owner, size, mtime and content of every entry: equal = the tree was not touched.
inline std::string tree_state(const std::string& root) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> entries;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string p = it->path().string();
    struct stat st {};
    ::lstat(p.c_str(), &st);
    std::ostringstream e;
    e << std::oct << st.st_mode << std::dec << ' ' << st.st_uid << ':' << st.st_gid << ' '
      << st.st_size << ' ' << st.st_mtim.tv_sec << '.' << st.st_mtim.tv_nsec << ' '
      << (S_ISREG(st.st_mode) ? read_text(p) : "");
    entries[p.substr(root.size())] = e.str();
  }
  std::string out;
  for (const auto& [k, v] : entries) {
    out += k + " = " + v + "\n";
  }
  return out;
}

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
