// The workspace a review command (diff, commit, discard's recovery) works on, opened once and
// proven to be the directory the session ran on. Its path is only a name: its owner, or the
// program through a write grant on a parent, may have swapped it for a symlink to a directory
// the committer (often root) can write and they cannot. Everything after this open goes through
// the returned fd, never through the name again.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::fusefs {

// What the session saw at its start: the workspace directory's device and inode.
struct WorkspaceIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;
};

// The identity of the directory `fd` refers to.
Result<WorkspaceIdentity> identity_of(int fd);

// Opens the absolute path `path` as a directory without following a symlink in any of its
// components (openat2 RESOLVE_NO_SYMLINKS below "/"): a symlink anywhere in it is an error.
Result<UniqueFd> open_dir_nofollow(const std::string& path);

// The workspace at `path`, opened as open_dir_nofollow does; when `expected` is set, refused
// ("the workspace was replaced since the session: ...") unless it is that same directory.
Result<UniqueFd> open_workspace(const std::string& path,
                                const std::optional<WorkspaceIdentity>& expected);

}  // namespace cordon::fusefs
