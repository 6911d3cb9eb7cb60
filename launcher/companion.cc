#include "launcher/companion.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cordon::launcher {
namespace {

// The running cordon's directory, "" if /proc/self/exe cannot be read.
std::string cordon_dir() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    return {};
  }
  std::string dir(exe, static_cast<size_t>(n));
  return dir.substr(0, dir.rfind('/'));
}

bool usable(const std::string& p, int mode) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), mode) == 0;
}

// A CMake build tree has CMakeCache.txt at its top, one level above launcher/. An installed
// cordon (/usr/bin/cordon) must never pick up /usr/fusefs/cordon-fs or the like: only a build
// tree is searched as one.
bool in_build_tree(const std::string& dir) {
  struct stat st {};
  return ::stat((dir + "/../CMakeCache.txt").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::optional<std::string> find_companion(const std::string& file, const std::string& build_subdir,
                                          const std::string& installed_path, int access_mode,
                                          std::vector<std::string>* tried) {
  std::vector<std::string> candidates;
  if (std::string dir = cordon_dir(); !dir.empty()) {
    candidates.push_back(dir + "/" + file);
    if (in_build_tree(dir)) {
      candidates.push_back(dir + "/../" + build_subdir + "/" + file);
    }
    candidates.push_back(dir + "/../libexec/cordon/" + file);
  }
  candidates.push_back(installed_path);
  for (const auto& p : candidates) {
    if (tried != nullptr) {
      tried->push_back(p);
    }
    if (usable(p, access_mode)) {
      return p;
    }
  }
  return std::nullopt;
}

std::string join_tried(const std::vector<std::string>& tried) {
  std::string list;
  for (const auto& t : tried) {
    list += (list.empty() ? "" : ", ") + t;
  }
  return list;
}

}  // namespace cordon::launcher
