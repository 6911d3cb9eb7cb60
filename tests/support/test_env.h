// Test helpers shared by every component: privilege gates, temp dirs, running binaries.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace cordon::testing {

// CI sets CORDON_TEST_STRICT=1 for the root run: there, a privileged test that would skip fails
// instead, so a missing kernel feature or package cannot pass as green.
inline bool strict() {
  const char* s = std::getenv("CORDON_TEST_STRICT");
  return s != nullptr && std::string(s) == "1";
}

}  // namespace cordon::testing

// Skips (or, in strict mode as root, fails) when `cond` is false.
#define CORDON_REQUIRE(cond, why)                                  \
  do {                                                             \
    if (!(cond)) {                                                 \
      if (::cordon::testing::strict() && ::geteuid() == 0) {       \
        FAIL() << "required for this test but missing: " << (why); \
      }                                                            \
      GTEST_SKIP() << "needs " << (why);                           \
    }                                                              \
  } while (0)

// Tests that need real root (netfilter on the host, cgroup v1, mounting as root).
#define CORDON_REQUIRE_ROOT() CORDON_REQUIRE(::geteuid() == 0, "root")

namespace cordon::testing {

// A fresh directory under $CORDON_TEST_TMP (CI: a tmpfs) or /tmp, removed at scope exit.
class TempDir {
 public:
  TempDir() : TempDir(std::getenv("CORDON_TEST_TMP") ? std::getenv("CORDON_TEST_TMP") : "/tmp") {}
  // A directory beneath `base` rather than the tests' temporary directory.
  explicit TempDir(const std::string& base) {
    std::string tmpl = base + "/cordon-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* p = ::mkdtemp(buf.data());
    if (p == nullptr) {
      std::abort();
    }
    path_ = p;
    ::chmod(p, 0755);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline std::string build_path(const std::string& rel) {
  return std::string(CORDON_BUILD_DIR) + "/" + rel;
}
inline std::string source_path(const std::string& rel) {
  return std::string(CORDON_SOURCE_DIR) + "/" + rel;
}

}  // namespace cordon::testing
