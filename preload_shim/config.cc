// Load-time setup: reads the environment once, captures exe/argv, announces the process.
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "preload_shim/fs_rules.h"
#include "preload_shim/shim.h"

namespace cordon::preload_shim {

Config g_config;

namespace {

// Children that scrub their environment keep the shim through /etc/ld.so.preload; this is where the
// launcher binds the collector inside the sandbox so they still report.
constexpr const char kDefaultSocket[] = "/run/cordon/shim.sock";

const char* find_env(char** envp, const char* name) {
  size_t n = strlen(name);
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') {
      return *e + n + 1;
    }
  }
  return nullptr;
}

void set_socket_path(const char* path) {
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(g_config.sock_addr.sun_path)) {
    return;  // empty means "no events"; too long cannot be bound anyway
  }
  g_config.sock_addr.sun_family = AF_UNIX;
  memcpy(g_config.sock_addr.sun_path, path, n + 1);
  g_config.sock_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n + 1);
  g_config.have_socket = true;
}

// Parses one allowlist literal: "1.2.3.4", "1.2.3.4:443", "[2001:db8::1]:443" or "::1".
bool parse_allow(const char* s, size_t len, AllowEntry* out) {
  char host[64];
  uint16_t port = 0;
  const char* colon = nullptr;
  if (len == 0 || len >= sizeof host) {
    return false;
  }
  if (s[0] == '[') {
    const char* close = static_cast<const char*>(memchr(s, ']', len));
    if (close == nullptr) {
      return false;
    }
    size_t hl = static_cast<size_t>(close - s - 1);
    memcpy(host, s + 1, hl);
    host[hl] = '\0';
    colon = (close + 1 < s + len && close[1] == ':') ? close + 1 : nullptr;
  } else {
    memcpy(host, s, len);
    host[len] = '\0';
    char* first = strchr(host, ':');
    if (first != nullptr && strchr(first + 1, ':') == nullptr) {  // exactly one colon: v4:port
      *first = '\0';
      colon = s + (first - host);
    }
  }
  if (colon != nullptr) {
    unsigned long p = 0;
    for (const char* c = colon + 1; c < s + len; ++c) {
      if (*c < '0' || *c > '9') {
        return false;
      }
      p = p * 10 + static_cast<unsigned long>(*c - '0');
      if (p > 65535) {
        return false;
      }
    }
    port = static_cast<uint16_t>(p);
  }
  if (inet_pton(AF_INET, host, out->addr) == 1) {
    out->family = AF_INET;
  } else if (inet_pton(AF_INET6, host, out->addr) == 1) {
    out->family = AF_INET6;
  } else {
    return false;  // names are not matched in the shim yet (see README)
  }
  out->port = port;
  return true;
}

void parse_allowlist(const char* list) {
  const char* p = list;
  while (*p != '\0' && g_config.allow_count <
                           static_cast<int>(sizeof g_config.allow / sizeof g_config.allow[0])) {
    const char* end = p;
    while (*end != '\0' && *end != ',' && *end != ' ') {
      ++end;
    }
    AllowEntry e{};
    if (parse_allow(p, static_cast<size_t>(end - p), &e)) {
      g_config.allow[g_config.allow_count++] = e;
    }
    p = (*end == '\0') ? end : end + 1;
  }
}

void put_field(wire::Tag tag, const void* data, size_t len) {
  uint8_t* out = g_config.identity + g_config.identity_len;
  if (g_config.identity_len + wire::kFieldHeaderSize + len > sizeof g_config.identity) {
    return;
  }
  uint16_t l = static_cast<uint16_t>(len);
  out[0] = tag;
  out[1] = 0;
  memcpy(out + 2, &l, 2);
  memcpy(out + 4, data, len);
  g_config.identity_len += wire::kFieldHeaderSize + len;
}

void capture_identity(int argc, char** argv) {
  char exe[wire::kMaxPathBytes];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe);
  if (n > 0 && static_cast<size_t>(n) < sizeof exe) {
    put_field(wire::kExe, exe, static_cast<size_t>(n));
  } else if (argc > 0 && argv != nullptr && argv[0] != nullptr) {
    put_field(wire::kExe, argv[0], strnlen(argv[0], wire::kMaxPathBytes));
  }
  size_t budget = wire::kMaxArgvBytes;
  int kept = 0;
  for (int i = 0; i < argc && argv != nullptr && argv[i] != nullptr; ++i) {
    size_t len = strlen(argv[i]);
    if (kept == static_cast<int>(wire::kMaxArgs) || budget == 0) {
      break;
    }
    if (len > budget) {
      len = budget;
    }
    put_field(wire::kArg, argv[i], len);
    budget -= len;
    ++kept;
  }
  if (kept < argc) {
    uint32_t real_argc = static_cast<uint32_t>(argc);
    put_field(wire::kArgvTruncated, &real_argc, sizeof real_argc);
  }
}

void after_fork_in_child() { channel_after_fork_in_child(); }

// glibc passes (argc, argv, envp) to ELF constructors; the shim relies on it to see argv without
// reading /proc (which a sandbox may not mount).
__attribute__((constructor)) void shim_init(int argc, char** argv, char** envp) {
  int saved_errno = errno;
  resolve_all_reals();

  const char* sock = find_env(envp, "CORDON_SHIM_SOCK");
  set_socket_path(sock != nullptr ? sock : kDefaultSocket);
  if (const char* s = find_env(envp, "CORDON_SESSION")) {
    strncpy(g_config.session, s, sizeof g_config.session - 1);
  }
  if (const char* d = find_env(envp, "CORDON_SHIM_DENY_NET")) {
    g_config.deny_net = strcmp(d, "1") == 0;
  }
  if (const char* a = find_env(envp, "CORDON_SHIM_NET_ALLOW")) {
    parse_allowlist(a);
  }
  if (const char* f = find_env(envp, "CORDON_SHIM_FS_EVENTS")) {
    g_config.fs_events = strcmp(f, "all") == 0   ? FsEvents::kAll
                         : strcmp(f, "off") == 0 ? FsEvents::kOff
                                                 : FsEvents::kRefused;
  }
  if (const char* c = find_env(envp, "CORDON_SHIM_CONNECT_EVENTS")) {
    g_config.connect_events_all = strcmp(c, "all") == 0;
  }
  if (const char* r = find_env(envp, fs_rules::kEnvName)) {
    g_config.fs_rules = fs_rules_init(r);
    if (!g_config.fs_rules) {
      // The launcher validates what it hands over; this is a program that rewrote its children's
      // environment. Say so rather than pretend.
      static const char kMsg[] =
          "cordon: CORDON_SHIM_FS_RULES is malformed: file rules are not enforced in this "
          "process\n";
      ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
      (void)ignored;
    }
  }
  // Keep the event socket far above the fds a program allocates, so "lowest free fd" semantics and
  // programs that dup2 onto small numbers are unaffected.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > 64) {
    rlim_t cur = rl.rlim_cur > 1024 ? 1024 : rl.rlim_cur;
    g_config.fd_floor = static_cast<int>(cur * 3 / 4);
  }
  capture_identity(argc, argv);
  // The drop counter is per process image: a forked child must not re-report its parent's drops.
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
  g_config.loaded = true;

  Event ev(wire::kProcStart);
  if (g_config.session[0] != '\0') {
    ev.add_str(wire::kSession, g_config.session, sizeof g_config.session);
  }
  ev.send();
  errno = saved_errno;
}

// At exit(): a program that ends right after it started must still be readable by the collector
// when it reads who sent the records (channel_await_identity).
__attribute__((destructor)) void shim_fini() { channel_await_identity(); }

}  // namespace

ErrnoGuard::ErrnoGuard() : saved_(errno) {}
ErrnoGuard::~ErrnoGuard() { errno = saved_; }

}  // namespace cordon::preload_shim
