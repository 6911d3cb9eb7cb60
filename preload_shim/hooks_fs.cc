// File-open interposers. The hot path is one indirect call: an event is built only when the open
// was refused (EACCES/EPERM: what attribution of filesystem refusals needs) or when
// CORDON_SHIM_FS_EVENTS=all asks for every open. With file rules (--no-namespaces) each open is
// first decided by fs_check_open (fspolicy.cc), which sends its own fs.refused event.
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "preload_shim/shim.h"

using namespace cordon::preload_shim;

namespace {

inline bool wants_event(bool failed, int err) {
  bool wanted = g_config.fs_events == FsEvents::kAll || (g_config.fs_events == FsEvents::kRefused &&
                                                         failed && (err == EACCES || err == EPERM));
  // Without a collector Event::send would drop it: don't build it.
  return wanted && g_config.loaded && g_config.have_socket;
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

// A successful open of a file named like a canary's decoy (wire::kDecoyNames): its device and
// inode go to the collector, which knows which are decoys. The file name is compared first, so
// any other open costs no syscall.
__attribute__((noinline)) void check_decoy(int fd, const char* path, const char* via) {
  const char* slash = strrchr(path, '/');
  const char* base = slash != nullptr ? slash + 1 : path;
  for (const char* name : wire::kDecoyNames) {
    if (strcmp(base, name) != 0) {
      continue;
    }
    ErrnoGuard guard;
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      return;
    }
    Event ev(wire::kFsCanary);
    ev.add_str(wire::kPath, path, wire::kMaxPathBytes);
    ev.add_str(wire::kVia, via, 32);
    ev.add_u64(wire::kDev, static_cast<uint64_t>(st.st_dev));
    ev.add_u64(wire::kIno, static_cast<uint64_t>(st.st_ino));
    ev.send();
    return;
  }
}

inline int finish_open(int rc, const char* path, int flags, const char* via) {
  if (rc >= 0 && path != nullptr && g_config.loaded && g_config.have_socket) {
    check_decoy(rc, path, via);
  }
  if (__builtin_expect(g_config.fs_events != FsEvents::kOff, 1)) {
    int err = rc < 0 ? errno : 0;
    if (wants_event(rc < 0, err)) {
      send_open_event(path, flags, err, via);
    }
  }
  return rc;
}

inline FILE* finish_fopen(FILE* f, const char* path, const char* via) {
  if (f != nullptr && path != nullptr && g_config.loaded && g_config.have_socket) {
    check_decoy(fileno(f), path, via);
  }
  if (__builtin_expect(g_config.fs_events != FsEvents::kOff, 1)) {
    int err = f == nullptr ? errno : 0;
    if (wants_event(f == nullptr, err)) {
      send_open_event(path, 0, err, via);
    }
  }
  return f;
}

// open's third argument exists only when the flags create a file: read it only then.
inline mode_t open_mode(int flags, va_list* ap) {
  if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) {
    return va_arg(*ap, mode_t);
  }
  return 0;
}

// fopen's mode string as open(2) flags (what the file rules and the event need).
int fopen_flags(const char* mode) {
  int flags = O_RDONLY;
  if (mode == nullptr) {
    return flags;
  }
  if (mode[0] == 'w') {
    flags = O_WRONLY | O_CREAT | O_TRUNC;
  } else if (mode[0] == 'a') {
    flags = O_WRONLY | O_CREAT | O_APPEND;
  }
  for (const char* m = mode; *m != '\0' && *m != ','; ++m) {
    if (*m == '+') {
      flags = (flags & ~O_ACCMODE) | O_RDWR;
    } else if (*m == 'x') {
      flags |= O_EXCL;
    }
  }
  return flags;
}

// Every open-family entry point: decide by the file rules (when on), call the real function,
// then maybe report. `flags` is what the event shows (creat has none of its own).
template <typename Fn, typename... Args>
inline int forward_open(Fn* real, const char* via, int dirfd, const char* path, int flags,
                        Args... args) {
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (__builtin_expect(g_config.fs_rules, 0)) {
    if (int e = fs_check_open(dirfd, path, flags, via); e != 0) {
      errno = e;
      return -1;
    }
  }
  return finish_open(real(args...), path, flags, via);
}

template <typename Fn>
inline FILE* forward_fopen(Fn* real, const char* via, const char* path, const char* mode) {
  if (real == nullptr) {
    errno = ENOSYS;
    return nullptr;
  }
  if (__builtin_expect(g_config.fs_rules, 0)) {
    if (int e = fs_check_open(AT_FDCWD, path, fopen_flags(mode), via); e != 0) {
      errno = e;
      return nullptr;
    }
  }
  return finish_fopen(real(path, mode), path, via);
}

}  // namespace

CORDON_EXPORT int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = open_mode(flags, &ap);
  va_end(ap);
  return forward_open(CORDON_REAL(open), "open", AT_FDCWD, path, flags, path, flags, mode);
}

CORDON_EXPORT int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = open_mode(flags, &ap);
  va_end(ap);
  return forward_open(CORDON_REAL(open64), "open64", AT_FDCWD, path, flags, path, flags, mode);
}

CORDON_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = open_mode(flags, &ap);
  va_end(ap);
  return forward_open(CORDON_REAL(openat), "openat", dirfd, path, flags, dirfd, path, flags, mode);
}

CORDON_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = open_mode(flags, &ap);
  va_end(ap);
  return forward_open(CORDON_REAL(openat64), "openat64", dirfd, path, flags, dirfd, path, flags,
                      mode);
}

CORDON_EXPORT int __open_2(const char* path, int flags) {
  return forward_open(CORDON_REAL(__open_2), "__open_2", AT_FDCWD, path, flags, path, flags);
}

CORDON_EXPORT int __open64_2(const char* path, int flags) {
  return forward_open(CORDON_REAL(__open64_2), "__open64_2", AT_FDCWD, path, flags, path, flags);
}

CORDON_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  return forward_open(CORDON_REAL(__openat_2), "__openat_2", dirfd, path, flags, dirfd, path,
                      flags);
}

CORDON_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  return forward_open(CORDON_REAL(__openat64_2), "__openat64_2", dirfd, path, flags, dirfd, path,
                      flags);
}

CORDON_EXPORT int creat(const char* path, mode_t mode) {
  return forward_open(CORDON_REAL(creat), "creat", AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC,
                      path, mode);
}

CORDON_EXPORT int creat64(const char* path, mode_t mode) {
  return forward_open(CORDON_REAL(creat64), "creat64", AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC,
                      path, mode);
}

CORDON_EXPORT FILE* fopen(const char* path, const char* mode) {
  return forward_fopen(CORDON_REAL(fopen), "fopen", path, mode);
}

CORDON_EXPORT FILE* fopen64(const char* path, const char* mode) {
  return forward_fopen(CORDON_REAL(fopen64), "fopen64", path, mode);
}
