/* The baseline: a bare LD_PRELOAD pass-through for the calls the benchmark makes, resolved once
 * with dlsym(RTLD_NEXT). Whatever cordon's shim costs beyond this is its own work. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/socket.h>

typedef int (*open_fn)(const char*, int, ...);
typedef int (*connect_fn)(int, const struct sockaddr*, socklen_t);

int open(const char* path, int flags, ...) {
  static open_fn real;
  mode_t mode = 0;
  if (flags & O_CREAT) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  if (!real) real = (open_fn)dlsym(RTLD_NEXT, "open");
  return real(path, flags, mode);
}

int connect(int fd, const struct sockaddr* sa, socklen_t len) {
  static connect_fn real;
  if (!real) real = (connect_fn)dlsym(RTLD_NEXT, "connect");
  return real(fd, sa, len);
}
