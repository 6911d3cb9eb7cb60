// Exec interposers. glibc's exec* variants and posix_spawn reach the kernel through internal
// aliases (__execve), so each public entry point is hooked on its own. system() and popen() are
// not hookable that way; the child image's proc.start covers them.
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload_shim/shim.h"

using namespace cordon::preload_shim;

extern char** environ;

namespace {

// Sent before the exec: on success there is no "after" in this image.
void send_exec_event(const char* path, char* const argv[], const char* via, pid_t child) {
  if (!g_config.loaded || !g_config.have_socket) {  // nothing would be sent: skip the argv walk
    return;
  }
  Event ev(wire::kProcExec);
  ev.add_str(wire::kPath, path, wire::kMaxPathBytes);
  ev.add_argv(argv, wire::kTargetArg, wire::kTargetArgvTruncated);
  ev.add_str(wire::kVia, via, 32);
  if (child > 0) {
    ev.add_u32(wire::kChildPid, static_cast<uint32_t>(child));
  }
  ev.send();
}

// The launcher writes this file when process.exec_allow is in force (Landlock refuses the rest
// with EACCES). A file, not an environment variable, so children that scrub theirs still explain.
constexpr char kExecAllowFile[] = "/etc/cordon/exec_allow";

// One line on stderr saying why an exec failed with EACCES, when exec_allow is the likely cause.
// Raw syscalls: async-signal-safe (vfork children), and our own open() hook stays out of it.
void explain_exec_refusal(const char* shown) {
  if (syscall(SYS_faccessat, AT_FDCWD, kExecAllowFile, F_OK, 0) != 0) {
    return;
  }
  char line[wire::kMaxPathBytes + 96];
  size_t at = put(line, sizeof line, 0, "cordon: exec of ");
  at = put(line, sizeof line, at, shown != nullptr ? shown : "(fd)");
  at = put(line, sizeof line, at, " refused (not in process.exec_allow)\n");
  ssize_t ignored = write(STDERR_FILENO, line, at);
  (void)ignored;
}

// execl-style argument lists, collected on the stack (exec* may run in a vfork child: no malloc).
constexpr int kMaxListArgs = 4096;

int count_list(va_list* ap) {
  va_list aq;
  va_copy(aq, *ap);
  int n = 1;
  while (va_arg(aq, char*) != nullptr && n < kMaxListArgs) {
    ++n;
  }
  va_end(aq);
  return n;
}

// Copies arg0 and the n-1 further list arguments into argv[0..n-1] and terminates it.
void fill_list(const char* arg0, va_list* ap, char** argv, int n) {
  argv[0] = const_cast<char*>(arg0);
  for (int i = 1; i < n; ++i) {
    argv[i] = va_arg(*ap, char*);
  }
  argv[n] = nullptr;
}

// The file rules (--no-namespaces) on an exec target: the kernel opens it for reading, as
// cordon-fs's lookup/open would. A name without '/' that exec*p searches in $PATH is left to the
// kernel's own open of each candidate (not hooked: advisory). Returns the errno to fail with.
inline int exec_refused(int dirfd, const char* path, bool path_search, const char* via) {
  if (__builtin_expect(!g_config.fs_rules, 1) || path == nullptr ||
      (path_search && strchr(path, '/') == nullptr)) {
    return 0;
  }
  return fs_check(dirfd, path, true, FsAccess::kRead, -1, "exec", via);
}

// The exec* entry points differ only in the real function and its arguments: report, then exec.
template <typename Fn, typename... Args>
inline int forward_exec(Fn* real, const char* shown, char* const argv[], const char* via,
                        int refused, Args... args) {
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (refused != 0) {
    errno = refused;
    return -1;
  }
  {
    ErrnoGuard guard;
    send_exec_event(shown, argv, via, 0);
    channel_await_identity();  // this image's records are read as this image, not the next
  }
  int rc = real(args...);
  if (errno == EACCES) {
    ErrnoGuard guard;
    explain_exec_refusal(shown);
  }
  return rc;
}

// posix_spawn and posix_spawnp: spawn, then report with the child's pid (they return the error).
template <typename Fn>
inline int forward_spawn(Fn* real, const char* via, pid_t* pid, const char* path,
                         const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
                         char* const argv[], char* const envp[], bool path_search) {
  if (real == nullptr) {
    return ENOSYS;
  }
  if (int e = exec_refused(AT_FDCWD, path, path_search, via); e != 0) {
    return e;
  }
  pid_t child = 0;
  int rc = real(&child, path, fa, attr, argv, envp);
  if (pid != nullptr) {
    *pid = child;
  }
  if (rc == 0) {
    ErrnoGuard guard;
    send_exec_event(path, argv, via, child);
  }
  return rc;
}

}  // namespace

// execl's list as an argv array on the caller's stack: a macro, not a helper, because alloca's
// array must outlive the frame that makes it.
#define CORDON_ARGV_FROM_LIST(argv, arg0, ap)                                                     \
  int argv##_n = count_list(&(ap));                                                               \
  char** argv =                                                                                   \
      static_cast<char**>(__builtin_alloca((static_cast<size_t>(argv##_n) + 1) * sizeof(char*))); \
  fill_list(arg0, &(ap), argv, argv##_n)

CORDON_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  return forward_exec(CORDON_REAL(execve), path, argv, "execve",
                      exec_refused(AT_FDCWD, path, false, "execve"), path, argv, envp);
}

CORDON_EXPORT int execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
                           int flags) {
  return forward_exec(CORDON_REAL(execveat), path, argv, "execveat",
                      exec_refused(dirfd, path, false, "execveat"), dirfd, path, argv, envp, flags);
}

CORDON_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  // The fd was opened through the open hooks, which decided then.
  return forward_exec(CORDON_REAL(fexecve), nullptr, argv, "fexecve", 0, fd, argv, envp);
}

CORDON_EXPORT int execv(const char* path, char* const argv[]) {
  return forward_exec(CORDON_REAL(execv), path, argv, "execv",
                      exec_refused(AT_FDCWD, path, false, "execv"), path, argv);
}

CORDON_EXPORT int execvp(const char* file, char* const argv[]) {
  return forward_exec(CORDON_REAL(execvp), file, argv, "execvp",
                      exec_refused(AT_FDCWD, file, true, "execvp"), file, argv);
}

CORDON_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  return forward_exec(CORDON_REAL(execvpe), file, argv, "execvpe",
                      exec_refused(AT_FDCWD, file, true, "execvpe"), file, argv, envp);
}

CORDON_EXPORT int execl(const char* path, const char* arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  CORDON_ARGV_FROM_LIST(argv, arg0, ap);
  va_end(ap);
  return execve(path, argv, environ);
}

CORDON_EXPORT int execle(const char* path, const char* arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  CORDON_ARGV_FROM_LIST(argv, arg0, ap);
  (void)va_arg(ap, char*);  // the terminating NULL
  char** envp = va_arg(ap, char**);
  va_end(ap);
  return execve(path, argv, envp);
}

CORDON_EXPORT int execlp(const char* file, const char* arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  CORDON_ARGV_FROM_LIST(argv, arg0, ap);
  va_end(ap);
  return execvp(file, argv);
}

CORDON_EXPORT int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* fa,
                              const posix_spawnattr_t* attr, char* const argv[],
                              char* const envp[]) {
  return forward_spawn(CORDON_REAL(posix_spawn), "posix_spawn", pid, path, fa, attr, argv, envp,
                       false);
}

CORDON_EXPORT int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* fa,
                               const posix_spawnattr_t* attr, char* const argv[],
                               char* const envp[]) {
  return forward_spawn(CORDON_REAL(posix_spawnp), "posix_spawnp", pid, file, fa, attr, argv, envp,
                       true);
}
