// libFuzzer target: the `cordon import` reader on arbitrary bytes (an archive is hostile input).
// Each input is imported into a scratch sessions root; whatever happens, the root must then hold
// either nothing or exactly one valid session directory (never a leftover temporary directory,
// never a name the reader should have refused), and nothing may be written outside it. Built only
// with -DCORDON_FUZZ=ON (clang); tests/run_fuzz.sh runs it.
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/session/session_archive.h"
#include "launcher/session/session_store.h"

namespace {

std::string scratch_root() {
  static std::string root = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr ? tmp : "/tmp") + "/fuzz-import-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      __builtin_trap();
    }
    return tmpl;
  }();
  return root;
}

std::vector<std::string> names(int dir_fd) {
  std::vector<std::string> out;
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (d == nullptr) {
    __builtin_trap();
  }
  while (dirent* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n != "." && n != "..") {
      out.push_back(n);
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string root = scratch_root();
  cordon::UniqueFd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) {
    __builtin_trap();
  }
  cordon::launcher::ImportLimits limits;
  limits.max_entries = 2000;
  limits.max_bytes = 4 << 20;
  auto r = cordon::launcher::import_archive_memory(root_fd.get(), data, size, "", limits);
  const auto left = names(root_fd.get());
  if (r.ok() ? (left.size() != 1 || left[0] != r->id ||
                !cordon::launcher::store::is_session_id(left[0]))
             : !left.empty()) {
    __builtin_trap();  // a leftover, or a session under a name that is not an id
  }
  std::error_code ec;
  for (const auto& n : left) {
    std::filesystem::remove_all(root + "/" + n, ec);
  }
  return 0;
}
