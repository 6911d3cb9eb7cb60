// What the commit tests share: a session directory beside a MountedFs, the session's start
// stamp, and tree_state() to prove "nothing changed".
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <string>
#include <thread>

#include "fusefs/commit.h"
#include "tests/fusefs/mount_fixture.h"
#include "tests/support/tree_state.h"

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

using cordon::testing::tree_state;  // everything a write could change about a tree

}  // namespace cordon::fusefs::testing
