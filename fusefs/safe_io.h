// Host-side file access that never follows a path the sandbox controls: every call is relative to a
// directory fd and resolves a single component without following symlinks or magic links.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::fusefs {

// openat2(dirfd, name, flags, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS).
// `name` may be a relative path of several components (snapshot/commit walks); returns -1/errno.
int open_beneath(int dirfd, std::string_view name, int flags, mode_t mode = 0);
Result<UniqueFd> open_beneath_r(int dirfd, std::string_view name, int flags, mode_t mode = 0);

// Opens the object an O_PATH fd refers to with new flags, via /proc/self/fd (the inode itself, no
// name is resolved again). Only for regular files and directories; returns -1/errno.
int reopen_fd(int opath_fd, int flags);

// fstat of an O_PATH fd (AT_EMPTY_PATH).
int stat_fd(int fd, struct stat* st);

// chmod / utimensat of the object an fd (O_PATH or open) refers to, relative to the fd itself
// (fchmodat2 and utimensat with AT_EMPTY_PATH; no path walk through /proc). Where the kernel lacks
// fchmodat2 (before 6.6) the object is reached through /proc/self/fd instead. Symlinks: chmod
// fails with EOPNOTSUPP, times are set on the link. 0 or -1/errno.
int chmod_fd(int fd, mode_t mode);
int utimens_fd(int fd, const struct timespec times[2]);

// Copies `len` bytes (or to EOF when len is UINT64_MAX) from in to out at the current offsets:
// copy_file_range, falling back to read/write across filesystems. 0 or -errno.
int copy_data(int in_fd, int out_fd, uint64_t len = UINT64_MAX);
// Tries FICLONE first (a reflink, instant on btrfs/xfs), then copy_data.
int clone_or_copy(int in_fd, int out_fd);

// Copies user/trusted/security xattrs from an open fd to another; unsupported -> ignored. 0/-errno.
// With `keep`, only the names it accepts.
int copy_xattrs(int in_fd, int out_fd, bool (*keep)(std::string_view name) = nullptr);

// Recreates the symlink `src_name` in src_dirfd (described by `st`; "" when src_dirfd is an O_PATH
// fd of the link itself) as `dst_name` in dst_dirfd, with its owner (where the caller may give
// it) and times. The target is copied as text, never followed. 0 or -errno.
int copy_symlink(int src_dirfd, const std::string& src_name, const struct stat& st, int dst_dirfd,
                 const std::string& dst_name);
// Recreates the fifo or socket node `st` describes as `dst_name` in dst_dirfd: type, mode, owner
// (where the caller may give it) and times. A socket node is a name only: nothing listens on the
// copy (connect(2) is refused, as at a socket whose server is gone). 0 or -errno.
int copy_node(const struct stat& st, int dst_dirfd, const std::string& dst_name);

// A fresh temp name (".wh..wh.tmp.<pid>.<n>") unique within the process.
std::string temp_name();

// How remove_tree_at and clear_dir treat what they meet, beyond never following a symlink.
enum RemoveFlags : unsigned {
  // A mount inside the tree is neither entered nor removed: the removal fails with EXDEV (or
  // EBUSY for a file mount). For trees that must end where they are (a session record).
  kRemoveOneFilesystem = 1u << 0,
  // A directory its owner closed (0555, as a Go module cache leaves them; 0000) is opened up to
  // its owner first, so an owner who is not root can remove it as it could with chmod -R u+rwx.
  kRemoveOpenUp = 1u << 1,
};
// Recursively removes the entry `name` in dirfd without following symlinks. 0 or -errno.
int remove_tree_at(int dirfd, const std::string& name, unsigned flags = 0);
// Removes everything inside the directory dirfd (the directory itself stays). 0 or -errno.
int clear_dir(int dirfd, unsigned flags = 0);
// Recursively copies the contents of directory src into empty directory dst (files via reflink
// or copy, with modes, times, xattrs; symlinks, fifos and hard links as such). 0 or -errno.
int copy_tree(int src_dirfd, int dst_dirfd);

// Lists the names in a directory fd (no "." or ".."). Errors -> errno in *err.
std::vector<std::string> list_dir(int dirfd, int* err);

}  // namespace cordon::fusefs
