// What the commit tests share: a session directory beside a MountedFs, the session's start
// stamp, and a tree state precise enough to prove "nothing changed" (owners, modes, times,
// contents, xattrs).
#pragma once

#include <sys/stat.h>
#include <sys/xattr.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "fusefs/commit.h"
#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {

// The session's start as commit sees it: the mtime of a file written now (the launcher uses its
// cow.json the same way), on the same coarse clock as every other timestamp. A tick later than
// what the caller wrote just before: commit counts a tie as "changed since".
inline timespec stamp_now(const std::string& path) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write_file(path, "started\n");
  struct stat st {};
  ::stat(path.c_str(), &st);
  return st.st_mtim;
}

// Options for committing MountedFs `m`: journal and staging named after a session "t-1".
inline CommitOptions commit_opts(const MountedFs& m,
                                 const policy::FilesystemPolicy* pol = nullptr) {
  std::string dir = m.base("session");
  ::mkdir(dir.c_str(), 0700);
  CommitOptions o;
  o.policy = pol;
  o.session_dir = dir;
  o.session_id = "t-1";
  return o;
}

// Every entry under root: type and mode, owner, size, mtime, content hash, link target, xattrs.
inline std::string full_state(const std::string& root) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> entries;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string p = it->path().string();
    struct stat st {};
    ::lstat(p.c_str(), &st);
    std::ostringstream e;
    e << std::oct << st.st_mode << std::dec << " " << st.st_uid << ":" << st.st_gid << " "
      << st.st_size << " " << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec;
    if (S_ISREG(st.st_mode)) {
      e << " " << std::hash<std::string>()(read_file(p));
    } else if (S_ISLNK(st.st_mode)) {
      e << " -> " << fs::read_symlink(p, ec).string();
    }
    char names[4096];
    ssize_t n = ::llistxattr(p.c_str(), names, sizeof names);
    for (ssize_t i = 0; i > -1 && i < n; i += static_cast<ssize_t>(std::strlen(names + i)) + 1) {
      e << " x:" << (names + i);
    }
    entries[p.substr(root.size())] = e.str();
  }
  std::string out;
  for (const auto& [k, v] : entries) {
    out += k + " = " + v + "\n";
  }
  return out;
}

}  // namespace cordon::fusefs::testing
