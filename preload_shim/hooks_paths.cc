// Interposers for calls that name paths without opening them: rename, link, unlink, rmdir, mkdir,
// symlink, truncate. They exist for the file rules of --no-namespaces (a denied file renamed or
// hard-linked to an innocent name would otherwise be read under that name); without rules each is
// one indirect call to libc.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload_shim/shim.h"

using namespace cordon::preload_shim;

namespace {

// One path operand: the errno to fail with, or 0. Final symlinks are not followed (these calls act
// on the link itself), except where a flag says otherwise.
inline int check(int dirfd, const char* path, bool follow, FsAccess access, const char* op,
                 const char* via) {
  return fs_check(dirfd, path, follow, access, -1, op, via);
}

// rename and link: the source is looked up and moved or given a second name (read and write
// rules, like cordon-fs's rename/link), the destination is created or replaced (write rules).
inline int check_two(int olddirfd, const char* oldpath, bool follow_old, int newdirfd,
                     const char* newpath, const char* op, const char* via) {
  if (int e = check(olddirfd, oldpath, follow_old, FsAccess::kWrite, op, via); e != 0) {
    return e;
  }
  return check(newdirfd, newpath, false, FsAccess::kWrite, op, via);
}

template <typename Fn, typename Check, typename... Args>
inline int forward_path(Fn* real, Check&& decide, Args... args) {
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (__builtin_expect(g_config.fs_rules, 0)) {
    if (int e = decide(); e != 0) {
      errno = e;
      return -1;
    }
  }
  return real(args...);
}

}  // namespace

CORDON_EXPORT int rename(const char* oldpath, const char* newpath) {
  return forward_path(
      CORDON_REAL(rename),
      [&] { return check_two(AT_FDCWD, oldpath, false, AT_FDCWD, newpath, "rename", "rename"); },
      oldpath, newpath);
}

CORDON_EXPORT int renameat(int olddirfd, const char* oldpath, int newdirfd, const char* newpath) {
  return forward_path(
      CORDON_REAL(renameat),
      [&] { return check_two(olddirfd, oldpath, false, newdirfd, newpath, "rename", "renameat"); },
      olddirfd, oldpath, newdirfd, newpath);
}

CORDON_EXPORT int renameat2(int olddirfd, const char* oldpath, int newdirfd, const char* newpath,
                            unsigned int flags) {
  return forward_path(
      CORDON_REAL(renameat2),
      [&] { return check_two(olddirfd, oldpath, false, newdirfd, newpath, "rename", "renameat2"); },
      olddirfd, oldpath, newdirfd, newpath, flags);
}

CORDON_EXPORT int link(const char* oldpath, const char* newpath) {
  return forward_path(
      CORDON_REAL(link),
      [&] { return check_two(AT_FDCWD, oldpath, false, AT_FDCWD, newpath, "link", "link"); },
      oldpath, newpath);
}

CORDON_EXPORT int linkat(int olddirfd, const char* oldpath, int newdirfd, const char* newpath,
                         int flags) {
  bool follow = (flags & AT_SYMLINK_FOLLOW) != 0;
  return forward_path(
      CORDON_REAL(linkat),
      [&] { return check_two(olddirfd, oldpath, follow, newdirfd, newpath, "link", "linkat"); },
      olddirfd, oldpath, newdirfd, newpath, flags);
}

CORDON_EXPORT int unlink(const char* path) {
  return forward_path(
      CORDON_REAL(unlink),
      [&] { return check(AT_FDCWD, path, false, FsAccess::kWrite, "unlink", "unlink"); }, path);
}

CORDON_EXPORT int unlinkat(int dirfd, const char* path, int flags) {
  return forward_path(
      CORDON_REAL(unlinkat),
      [&] { return check(dirfd, path, false, FsAccess::kWrite, "unlink", "unlinkat"); }, dirfd,
      path, flags);
}

CORDON_EXPORT int rmdir(const char* path) {
  return forward_path(
      CORDON_REAL(rmdir),
      [&] { return check(AT_FDCWD, path, false, FsAccess::kWrite, "rmdir", "rmdir"); }, path);
}

CORDON_EXPORT int mkdir(const char* path, mode_t mode) {
  return forward_path(
      CORDON_REAL(mkdir),
      [&] { return check(AT_FDCWD, path, false, FsAccess::kWrite, "mkdir", "mkdir"); }, path, mode);
}

CORDON_EXPORT int mkdirat(int dirfd, const char* path, mode_t mode) {
  return forward_path(
      CORDON_REAL(mkdirat),
      [&] { return check(dirfd, path, false, FsAccess::kWrite, "mkdir", "mkdirat"); }, dirfd, path,
      mode);
}

// The link's text is not checked: opening through it is (the open hooks resolve it).
CORDON_EXPORT int symlink(const char* target, const char* linkpath) {
  return forward_path(
      CORDON_REAL(symlink),
      [&] { return check(AT_FDCWD, linkpath, false, FsAccess::kWrite, "symlink", "symlink"); },
      target, linkpath);
}

CORDON_EXPORT int symlinkat(const char* target, int dirfd, const char* linkpath) {
  return forward_path(
      CORDON_REAL(symlinkat),
      [&] { return check(dirfd, linkpath, false, FsAccess::kWrite, "symlink", "symlinkat"); },
      target, dirfd, linkpath);
}

CORDON_EXPORT int truncate(const char* path, off_t length) {
  return forward_path(
      CORDON_REAL(truncate),
      [&] { return check(AT_FDCWD, path, true, FsAccess::kWrite, "truncate", "truncate"); }, path,
      length);
}

CORDON_EXPORT int truncate64(const char* path, off64_t length) {
  return forward_path(
      CORDON_REAL(truncate64),
      [&] { return check(AT_FDCWD, path, true, FsAccess::kWrite, "truncate", "truncate64"); }, path,
      length);
}
