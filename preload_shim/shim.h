// Internal contract between the shim's files: process-wide configuration, real libc entry points,
// the event channel and the advisory network policy. Nothing here is exported from the .so.
#pragma once

#include <dlfcn.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>

#include "preload_shim/wire.h"

// glibc's _FORTIFY_SOURCE entry points (declared by its headers only when fortifying).
extern "C" int __open_2(const char* path, int flags);
extern "C" int __open64_2(const char* path, int flags);
extern "C" int __openat_2(int dirfd, const char* path, int flags);
extern "C" int __openat64_2(int dirfd, const char* path, int flags);

// Interposers must be visible to the dynamic linker; everything else stays hidden.
#define CORDON_EXPORT extern "C" __attribute__((visibility("default")))

namespace cordon::preload_shim {

// The shim lives inside someone else's process, so its state is necessarily process-global. It is
// written once by the constructor (before main, single-threaded) and only read afterwards, except
// the atomics in channel.cc and netpolicy.cc.
enum class FsEvents : uint8_t { kOff, kRefused, kAll };

struct AllowEntry {
  sa_family_t family;  // AF_INET or AF_INET6
  uint8_t addr[16];
  uint16_t port;  // host order; 0 = any port
};

struct Config {
  bool loaded = false;       // the constructor ran
  bool have_socket = false;  // a collector path is known
  sockaddr_un sock_addr{};
  socklen_t sock_len = 0;
  bool deny_net = false;  // CORDON_SHIM_DENY_NET=1: refuse non-loopback, non-allowed peers
  FsEvents fs_events = FsEvents::kRefused;
  bool connect_events_all = false;  // CORDON_SHIM_CONNECT_EVENTS=all: every loopback connect too
  AllowEntry allow[32]{};
  int allow_count = 0;
  bool fs_rules = false;  // CORDON_SHIM_FS_RULES parsed: path hooks enforce file rules
  int fd_floor = 0;       // the event socket is moved to >= this fd (out of the program's way)
  // exe and argv, pre-encoded as wire fields so each event just copies them.
  uint8_t identity[wire::kMaxPathBytes + wire::kMaxArgvBytes + 16 * wire::kFieldHeaderSize]{};
  size_t identity_len = 0;
  char session[128]{};
};
extern Config g_config;

// ---- real libc functions (real.cc) ----
// Every interposed entry point, resolved with dlsym(RTLD_NEXT) into g_real. The constructor
// resolves them all up front, so signal handlers and vfork children never reach dlsym (which takes
// the loader lock); a hook called before the constructor resolves lazily (idempotent, racy-safe).
// We interpose no allocator, so dlsym's own calloc cannot recurse into us.
// clang-format off
#define CORDON_REAL_FUNCTIONS(X)                                                  \
  X(connect) X(sendto) X(sendmsg) X(bind) X(listen) X(getaddrinfo)                \
  X(execve) X(execveat) X(fexecve) X(execv) X(execvp) X(execvpe)                  \
  X(posix_spawn) X(posix_spawnp)                                                  \
  X(open) X(open64) X(openat) X(openat64) X(creat) X(creat64) X(fopen) X(fopen64) \
  X(__open_2) X(__open64_2) X(__openat_2) X(__openat64_2)                        \
  X(rename) X(renameat) X(renameat2) X(link) X(linkat) X(unlink) X(unlinkat)      \
  X(rmdir) X(mkdir) X(mkdirat) X(symlink) X(symlinkat) X(truncate) X(truncate64)
// clang-format on

enum RealId : int {
#define CORDON_REAL_ID(name) kReal_##name,
  CORDON_REAL_FUNCTIONS(CORDON_REAL_ID)
#undef CORDON_REAL_ID
      kRealCount
};

void* resolve_real(RealId id);
void resolve_all_reals();

#define CORDON_REAL(fn)              \
  reinterpret_cast<decltype(&::fn)>( \
      ::cordon::preload_shim::resolve_real(::cordon::preload_shim::kReal_##fn))

// ---- events (event.cc, channel.cc) ----
// Builds one message on the stack: no allocation, no locks, async-signal-safe.
class Event {
 public:
  explicit Event(wire::Kind kind, wire::Decision decision = wire::kNoDecision);
  void add(wire::Tag tag, const void* data, size_t len);
  void add_str(wire::Tag tag, const char* s, size_t max_len);
  void add_u32(wire::Tag tag, uint32_t v);
  void add_u64(wire::Tag tag, uint64_t v);
  void add_sockaddr(wire::Tag tag, const sockaddr* sa, socklen_t len);
  void add_identity();
  void add_argv(char* const argv[], wire::Tag arg_tag, wire::Tag truncated_tag);
  // Hands the message to the channel (which stamps pid/ppid/drop count); never blocks.
  // `attach_fd`: a connected socket passed along (SCM_RIGHTS) so the collector reads its
  // addresses from the kernel rather than from the message.
  void send(int attach_fd = -1);
  // Stamps pid/ppid and sends on `fd` directly (the channel's hello).
  bool send_on(int fd);

 private:
  uint8_t buf_[wire::kMaxMessage];
  size_t len_ = 0;
};

// Writes the sender's pid and ppid into a message header (two syscalls: only when sending).
void stamp_sender(uint8_t* msg);
// Stamps and sends one finished message, with `attach_fd` passed along when >= 0 (and without it
// when the kernel refuses the fd); returns false when it had to be dropped (counted).
bool channel_send(uint8_t* msg, size_t len, int attach_fd = -1);
// The hello on a fresh connection `fd`, with `fd` itself passed along (SCM_RIGHTS).
bool channel_send_raw(int fd, const uint8_t* msg, size_t len);
// Takes (and zeroes) the number of events dropped since the last successful send.
uint32_t channel_take_drops();
void channel_count_drops(uint32_t n);
void channel_after_fork_in_child();
// Before the process that opened the channel exits or execs: waits (a few ms at most) until the
// collector has read its identity from /proc. Returns at once for anyone else, or once done.
void channel_await_identity();

// ---- advisory network policy (netpolicy.cc) ----
bool is_inet(const sockaddr* sa, socklen_t len);
// True for 127/8, ::1 and the unspecified addresses (this host).
bool is_loopback(const sockaddr* sa, socklen_t len);
// True when deny mode is on and `sa` is neither loopback nor in the allowlist.
bool net_refused(const sockaddr* sa, socklen_t len);
// Writes "cordon: <what> to <addr> refused (not in network.allow)" once per destination.
void report_refusal(const char* what, const sockaddr* sa, socklen_t len);
// Formats an inet sockaddr as "1.2.3.4:80" / "[::1]:80" into buf; returns the length.
size_t format_sockaddr(const sockaddr* sa, socklen_t len, char* buf, size_t cap);
// True the first time a destination is seen in this process (bounded table, lock-free).
bool first_sight(const sockaddr* sa, socklen_t len, uint32_t salt);
// The same table for any key: true the first time `hash` is seen in this process.
bool first_sight_hash(uint64_t hash);
uint64_t hash_bytes(const void* data, size_t len, uint64_t seed);

// ---- text (text.cc) ----
// Appends s (null: nothing) / the decimal v to buf at `at`, truncating to cap - 1 bytes, and keeps
// buf NUL-terminated (needs at < cap); returns the new end.
size_t put(char* buf, size_t cap, size_t at, const char* s);
size_t put_uint(char* buf, size_t cap, size_t at, unsigned v);

// ---- advisory file rules (fspolicy.cc; --no-namespaces, see fs_rules.h) ----
// kCreate: O_CREAT without a write mode, a write only when the file does not exist yet.
enum class FsAccess : uint8_t { kRead, kWrite, kCreate };
// Parses CORDON_SHIM_FS_RULES (constructor only); false when malformed (rules stay off).
bool fs_rules_init(const char* value);
// 0 when the call on (dirfd, path) may proceed; otherwise the errno it must fail with, after the
// fs.refused event and (once per path) a line on stderr. `follow`: the call follows a final
// symlink. `op` names the access in the message ("exec", "rename"; null: read/write/create from
// `access`). Only call when g_config.fs_rules. Uses ~10 KiB of stack (two PATH_MAX buffers and,
// on a refusal, the 2 KiB message).
int fs_check(int dirfd, const char* path, bool follow, FsAccess access, int flags, const char* op,
             const char* via);
// fs_check for an open-family call with these flags.
int fs_check_open(int dirfd, const char* path, int flags, const char* via);

// Restores errno on scope exit: every hook returns the real call's errno untouched.
class ErrnoGuard {
 public:
  ErrnoGuard();
  ~ErrnoGuard();
  void set(int e) { saved_ = e; }
  int saved() const { return saved_; }

 private:
  int saved_;
};

}  // namespace cordon::preload_shim
