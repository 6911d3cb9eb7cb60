// File-open interposers. The hot path is one indirect call: an event is built only when the open
// was refused (EACCES/EPERM: what attribution of filesystem refusals needs) or when
// CORDON_SHIM_FS_EVENTS=all asks for every open.
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>

#include "preload_shim/shim.h"

using namespace cordon::preload_shim;

namespace {

inline bool wants_event(bool failed, int err) {
  if (g_config.fs_events == FsEvents::kAll) {
    return g_config.loaded;
  }
  return g_config.fs_events == FsEvents::kRefused && failed && (err == EACCES || err == EPERM) &&
         g_config.loaded;
}

__attribute__((noinline)) void send_open_event(const char* path, int flags, int err,
                                               const char* via) {
  ErrnoGuard guard;
  Event ev(wire::kFsOpen);
  ev.add_str(wire::kPath, path, wire::kMaxPathBytes);
  ev.add_u32(wire::kFlags, static_cast<uint32_t>(flags));
  ev.add_u32(wire::kErrno, static_cast<uint32_t>(err));
  ev.add_str(wire::kVia, via, 32);
  ev.send();
}

inline int finish_open(int rc, const char* path, int flags, const char* via) {
  if (__builtin_expect(g_config.fs_events != FsEvents::kOff, 1)) {
    int err = rc < 0 ? errno : 0;
    if (wants_event(rc < 0, err)) {
      send_open_event(path, flags, err, via);
    }
  }
  return rc;
}

inline FILE* finish_fopen(FILE* f, const char* path, const char* via) {
  if (__builtin_expect(g_config.fs_events != FsEvents::kOff, 1)) {
    int err = f == nullptr ? errno : 0;
    if (wants_event(f == nullptr, err)) {
      send_open_event(path, 0, err, via);
    }
  }
  return f;
}

// open's third argument exists only when the flags create a file.
inline bool needs_mode(int flags) {
  return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
}

}  // namespace

#define CORDON_NO_REAL_INT() \
  do {                       \
    errno = ENOSYS;          \
    return -1;               \
  } while (0)

CORDON_EXPORT int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (needs_mode(flags)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  auto real = CORDON_REAL(open);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(path, flags, mode), path, flags, "open");
}

CORDON_EXPORT int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (needs_mode(flags)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  auto real = CORDON_REAL(open64);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(path, flags, mode), path, flags, "open64");
}

CORDON_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  mode_t mode = 0;
  if (needs_mode(flags)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  auto real = CORDON_REAL(openat);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(dirfd, path, flags, mode), path, flags, "openat");
}

CORDON_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  mode_t mode = 0;
  if (needs_mode(flags)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  auto real = CORDON_REAL(openat64);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(dirfd, path, flags, mode), path, flags, "openat64");
}

CORDON_EXPORT int __open_2(const char* path, int flags) {
  auto real = CORDON_REAL(__open_2);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(path, flags), path, flags, "__open_2");
}

CORDON_EXPORT int __open64_2(const char* path, int flags) {
  auto real = CORDON_REAL(__open64_2);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(path, flags), path, flags, "__open64_2");
}

CORDON_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  auto real = CORDON_REAL(__openat_2);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(dirfd, path, flags), path, flags, "__openat_2");
}

CORDON_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  auto real = CORDON_REAL(__openat64_2);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(dirfd, path, flags), path, flags, "__openat64_2");
}

CORDON_EXPORT int creat(const char* path, mode_t mode) {
  auto real = CORDON_REAL(creat);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(path, mode), path, O_CREAT | O_WRONLY | O_TRUNC, "creat");
}

CORDON_EXPORT int creat64(const char* path, mode_t mode) {
  auto real = CORDON_REAL(creat64);
  if (real == nullptr) CORDON_NO_REAL_INT();
  return finish_open(real(path, mode), path, O_CREAT | O_WRONLY | O_TRUNC, "creat64");
}

CORDON_EXPORT FILE* fopen(const char* path, const char* mode) {
  auto real = CORDON_REAL(fopen);
  if (real == nullptr) {
    errno = ENOSYS;
    return nullptr;
  }
  return finish_fopen(real(path, mode), path, "fopen");
}

CORDON_EXPORT FILE* fopen64(const char* path, const char* mode) {
  auto real = CORDON_REAL(fopen64);
  if (real == nullptr) {
    errno = ENOSYS;
    return nullptr;
  }
  return finish_fopen(real(path, mode), path, "fopen64");
}
