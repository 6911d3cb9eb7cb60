// tree_state(root): everything about a tree a write could change, one line per entry (type and
// mode, owner, size, mtime, content hash or link target, xattr names). Equal states: the tree
// holds what it held. With Untouched, also every ctime and the root's own mode and mtime: equal
// states then mean nothing was even moved away and back (a rolled-back commit changes ctimes, so
// the tests of undo compare the content form).
#pragma once

#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>

namespace cordon::testing {

enum class TreeCheck { Content, Untouched };

inline std::string tree_state(const std::string& root, TreeCheck check = TreeCheck::Content) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> entries;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string p = it->path().string();
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      entries[p.substr(root.size())] = "lstat failed";
      continue;
    }
    std::ostringstream e;
    e << std::oct << st.st_mode << std::dec << ' ' << st.st_uid << ':' << st.st_gid << ' '
      << st.st_size << ' ' << st.st_mtim.tv_sec << '.' << st.st_mtim.tv_nsec;
    if (check == TreeCheck::Untouched) {
      e << " c" << st.st_ctim.tv_sec << '.' << st.st_ctim.tv_nsec;
    }
    if (S_ISREG(st.st_mode)) {
      std::ifstream f(p, std::ios::binary);
      e << ' ' << std::hash<std::string>()(std::string(std::istreambuf_iterator<char>(f), {}));
    } else if (S_ISLNK(st.st_mode)) {
      e << " -> " << fs::read_symlink(p, ec).string();
    }
    char names[4096];
    ssize_t n = ::llistxattr(p.c_str(), names, sizeof names);
    for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(std::strlen(names + i)) + 1) {
      e << " x:" << (names + i);
    }
    entries[p.substr(root.size())] = e.str();
  }
  std::string out;
  if (check == TreeCheck::Untouched) {
    struct stat st {};
    ::lstat(root.c_str(), &st);
    std::ostringstream r;
    r << "root " << std::oct << st.st_mode << std::dec << ' ' << st.st_mtim.tv_sec << '.'
      << st.st_mtim.tv_nsec << '\n';
    out = r.str();
  }
  for (const auto& [k, v] : entries) {
    out += k + " = " + v + "\n";
  }
  return out;
}

}  // namespace cordon::testing
