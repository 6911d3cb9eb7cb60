// The shim as a shared object: no C++ runtime dependency, and nothing exported but interposers.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

TEST(ShimLibrary, NeedsOnlyLibc) {
  RunResult r = run_program({"readelf", "-d", shim_library()});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::set<std::string> needed;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    auto at = line.find("Shared library: [");
    if (at != std::string::npos) {
      needed.insert(line.substr(at + 17, line.find(']', at) - at - 17));
    }
  }
  EXPECT_EQ(needed, std::set<std::string>{"libc.so.6"});
}

TEST(ShimLibrary, ExportsExactlyTheInterposers) {
  RunResult r = run_program({"nm", "-D", "--defined-only", shim_library()});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::set<std::string> exported;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    exported.insert(line.substr(line.rfind(' ') + 1));
  }
  std::set<std::string> expected = {
      "__open_2", "__open64_2", "__openat_2", "__openat64_2", "bind", "connect", "creat", "creat64",
      "execl", "execle", "execlp", "execv", "execve", "execveat", "execvp", "execvpe", "fexecve",
      "fopen", "fopen64", "getaddrinfo", "listen", "open", "open64", "openat", "openat64",
      "posix_spawn", "posix_spawnp", "sendmsg", "sendto",
      // Path calls the file rules of --no-namespaces decide (hooks_paths.cc).
      "link", "linkat", "mkdir", "mkdirat", "rename", "renameat", "renameat2", "rmdir", "symlink",
      "symlinkat", "truncate", "truncate64", "unlink", "unlinkat"};
  EXPECT_EQ(exported, expected);
}

}  // namespace
}  // namespace cordon::testing
