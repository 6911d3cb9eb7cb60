// Advisory file rules for the no-namespace mode: filesystem.deny / deny_write / protect and the
// read-only workspace, decided on hooked path calls with the same matcher cordon-fs uses
// (policy/path_match.h). The path is resolved by the kernel, not by string games: an O_PATH open
// of exactly what the program named (relative to its cwd or dirfd, through "..", "//" and
// symlinks), then readlink("/proc/self/fd/N") for the final name. ADVISORY: static binaries, raw
// syscalls and io_uring never reach these hooks, and a rename between check and use can race it.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy/path_match.h"
#include "preload_shim/fs_rules.h"
#include "preload_shim/shim.h"

namespace cordon::preload_shim {
namespace {

enum RuleClass : uint8_t { kClassDeny, kClassDenyWrite, kClassProtect };
constexpr const char* kClassNames[] = {"filesystem.deny", "filesystem.deny_write",
                                       "filesystem.protect"};

struct Rule {
  const char* pattern;  // PathPattern::expanded, NUL-terminated inside FsRules::text
  uint16_t index;       // position in its policy list (for the event's rule path)
  uint8_t cls;
  bool absolute;
};

// Written once by the constructor, read-only afterwards. No member initializers on purpose: a
// trivially constructible global is zero-filled in .bss, whereas one with a dynamic initializer
// could be reset by its own TU's initializer after shim_init (another TU) already filled it.
struct FsRules {
  const char* workspace;
  size_t workspace_len;
  bool workspace_ro;
  bool hide;
  int count;
  Rule rules[fs_rules::kMaxRules];
  char text[fs_rules::kMaxBytes + 1];
};
static_assert(__is_trivial(FsRules));
FsRules g_rules;

// Raw syscalls: our own open hooks must not see the shim's lookups, and they are
// async-signal-safe (a signal handler or vfork child may call a hooked function).
int sys_open_path(int dirfd, const char* path, int extra) {
  return static_cast<int>(syscall(SYS_openat, dirfd, path, O_PATH | O_CLOEXEC | extra, 0));
}
void sys_close(int fd) { syscall(SYS_close, fd); }

// The name the kernel holds for an open fd; false when it is not a path (no /proc, a socket...).
bool fd_path(int fd, char* out, size_t cap) {
  char link[32];
  size_t at = put(link, sizeof link, 0, "/proc/self/fd/");
  put_uint(link, sizeof link, at, static_cast<unsigned>(fd));
  long n = syscall(SYS_readlinkat, AT_FDCWD, link, out, cap - 1);
  if (n <= 0 || static_cast<size_t>(n) >= cap - 1 || out[0] != '/') {
    return false;
  }
  out[n] = '\0';
  return true;
}

enum class Found { kUnknown, kExisting, kNew };

// The absolute path the kernel would act on for (dirfd, path): for an existing file its final name
// (symlinks followed when `follow`), for a missing one the final name of its parent plus the last
// component, and for a dangling symlink (which O_CREAT follows to create its target) the place it
// points to. kUnknown when the kernel cannot resolve it either (ENOTDIR, ELOOP, EACCES, EMFILE...):
// then the real call fails the same way and there is nothing to decide.
// `out` and `work` are caller-provided PATH_MAX buffers (the hooks keep them on their stack).
Found resolve(int dirfd, const char* path, bool follow, char* out, char* work) {
  int dfd = dirfd;
  int owned = -1;  // a parent directory fd this function opened while following a dangling link
  const char* p = path;
  Found found = Found::kUnknown;
  for (int hop = 0; hop < 16; ++hop) {  // bounded like the kernel's own symlink limit
    int fd = sys_open_path(dfd, p, follow ? 0 : O_NOFOLLOW);
    if (fd >= 0) {
      found = fd_path(fd, out, PATH_MAX) ? Found::kExisting : Found::kUnknown;
      sys_close(fd);
      break;
    }
    if (errno != ENOENT) {
      break;
    }
    // Missing: split into parent and last component. `p` may already live in `work`.
    size_t n = strnlen(p, PATH_MAX);
    if (n == 0 || n >= PATH_MAX) {
      break;
    }
    memmove(work, p, n + 1);
    while (n > 1 && work[n - 1] == '/') {
      work[--n] = '\0';  // "newdir/" (mkdir) names "newdir"
    }
    char* slash = strrchr(work, '/');
    const char* base = work;
    const char* parent = ".";
    if (slash == work) {
      parent = "/";
      base = work + 1;
    } else if (slash != nullptr) {
      *slash = '\0';
      parent = work;
      base = slash + 1;
    }
    if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
      break;
    }
    int pfd = sys_open_path(dfd, parent, O_DIRECTORY);
    if (pfd < 0) {
      break;
    }
    if (follow) {
      // A dangling symlink as the last component: opening it with O_CREAT creates its target.
      long t = syscall(SYS_readlinkat, pfd, base, out, PATH_MAX - 1);
      if (t > 0 && t < PATH_MAX - 1) {
        out[t] = '\0';
        memcpy(work, out, static_cast<size_t>(t) + 1);
        if (owned >= 0) {
          sys_close(owned);
        }
        owned = dfd = pfd;
        p = work;
        continue;
      }
    }
    if (fd_path(pfd, out, PATH_MAX)) {
      size_t ol = strlen(out);
      size_t bl = strlen(base);
      if (ol + 1 + bl < PATH_MAX) {
        if (ol > 1) {
          out[ol++] = '/';
        }
        memcpy(out + ol, base, bl + 1);
        found = Found::kNew;
      }
    }
    sys_close(pfd);
    break;
  }
  if (owned >= 0) {
    sys_close(owned);
  }
  return found;
}

// The workspace-relative form of an absolute path ("" for the root), or nullptr outside it.
const char* workspace_relative(const char* abs) {
  size_t n = g_rules.workspace_len;
  if (strncmp(abs, g_rules.workspace, n) != 0) {
    return nullptr;
  }
  if (n == 1) {
    return abs + 1;  // workspace "/": every path
  }
  if (abs[n] == '\0') {
    return abs + n;
  }
  return abs[n] == '/' ? abs + n + 1 : nullptr;
}

// PathPattern::matches for a path with no ".." (the kernel's name has none): absolute patterns
// against the absolute path, relative ones against the workspace-relative path.
bool rule_matches(const Rule& r, const char* abs, const char* rel) {
  if (r.absolute) {
    return policy::segments_match(r.pattern, abs);
  }
  return rel != nullptr && policy::segments_match(r.pattern, rel);
}

struct Verdict {
  int err = 0;
  const Rule* rule = nullptr;  // null with err != 0: the read-only workspace
};

// AccessControl::check_read / check_write (fusefs/access_control.cc) on the resolved path: an
// existing file is looked up (read rules) before it is opened for writing; deny wins, then
// deny_write and protect; a read-only workspace refuses writes with EROFS.
Verdict decide(const char* abs, const char* rel, bool exists, bool write) {
  Verdict v;
  bool ws_root = rel != nullptr && *rel == '\0';
  if ((exists || !write) && !ws_root) {
    for (int i = 0; i < g_rules.count; ++i) {
      const Rule& r = g_rules.rules[i];
      if (r.cls == kClassDeny && rule_matches(r, abs, rel)) {
        v.err = g_rules.hide ? ENOENT : EACCES;
        v.rule = &r;
        return v;
      }
    }
  }
  if (!write) {
    return v;
  }
  if (rel != nullptr && g_rules.workspace_ro) {
    v.err = EROFS;
    return v;
  }
  for (uint8_t cls : {kClassDeny, kClassDenyWrite, kClassProtect}) {
    for (int i = 0; i < g_rules.count; ++i) {
      const Rule& r = g_rules.rules[i];
      if (r.cls == cls && rule_matches(r, abs, rel)) {
        v.err = EACCES;
        v.rule = &r;
        return v;
      }
    }
  }
  return v;
}

// The fs.refused event, sent for every refusal. Its own frame (the 2 KiB message), so the peak
// stack of a check is the resolver's two PATH_MAX buffers plus the larger of this and say_refused.
__attribute__((noinline)) void send_refused(const Verdict& v, const char* rule, const char* op,
                                            const char* via, const char* requested, const char* abs,
                                            const char* rel, int flags) {
  Event ev(wire::kFsRefused, wire::kDeny);
  ev.add_str(wire::kPath, rel != nullptr ? rel : abs, wire::kMaxPathBytes);
  ev.add_str(wire::kHostPath, abs, wire::kMaxPathBytes);
  ev.add_str(wire::kRequested, requested, wire::kMaxPathBytes);
  ev.add_str(wire::kOp, op, 16);
  ev.add_str(wire::kVia, via, 32);
  ev.add_str(wire::kRule, rule, 48);
  ev.add_u32(wire::kErrno, static_cast<uint32_t>(v.err));
  if (flags >= 0) {
    ev.add_u32(wire::kFlags, static_cast<uint32_t>(flags));
  }
  ev.send();
}

// "cordon: read of /ws/.env refused (filesystem.deny[0]: **/.env)", once per path, kind of access
// and process (the lock-free first-sight table), so a retry loop cannot flood the terminal.
__attribute__((noinline)) void say_refused(const Verdict& v, const char* rule, const char* op,
                                           const char* abs, bool write) {
  uint64_t h = hash_bytes(abs, strlen(abs), 0x66737265 /* fs refusals: own key space */);
  h = hash_bytes(&write, sizeof write, h);
  if (!first_sight_hash(h)) {
    return;
  }
  char line[1024];
  size_t at = put(line, sizeof line, 0, "cordon: ");
  at = put(line, sizeof line, at, op);
  at = put(line, sizeof line, at, " of ");
  at = put(line, sizeof line, at, abs);
  at = put(line, sizeof line, at, " refused (");
  at = put(line, sizeof line, at, rule);
  if (v.rule != nullptr) {
    at = put(line, sizeof line, at, ": ");
    at = put(line, sizeof line, at, v.rule->pattern);
  } else {
    at = put(line, sizeof line, at, ": the workspace is read-only");
  }
  at = put(line, sizeof line, at, ")\n");
  line[at - 1] = '\n';  // a cut line still ends the line
  // One write(2): async-signal-safe, and concurrent refusals do not interleave within a line.
  ssize_t ignored = ::write(STDERR_FILENO, line, at);
  (void)ignored;
}

void report(const Verdict& v, const char* op, const char* via, const char* requested,
            const char* abs, const char* rel, int flags, bool write) {
  char rule[48];
  if (v.rule != nullptr) {
    size_t at = put(rule, sizeof rule, 0, kClassNames[v.rule->cls]);
    at = put(rule, sizeof rule, at, "[");
    at = put_uint(rule, sizeof rule, at, v.rule->index);
    put(rule, sizeof rule, at, "]");
  } else {
    put(rule, sizeof rule, 0, "filesystem.mode");
  }
  if (g_config.have_socket) {
    send_refused(v, rule, op, via, requested, abs, rel, flags);
  }
  say_refused(v, rule, op, abs, write);
}

bool parse_rule_line(char* line, size_t class_len, uint8_t cls, uint16_t* counters) {
  // "<class> a|r PATTERN"
  char* kind = line + class_len;
  if (*kind != ' ' || (kind[1] != 'a' && kind[1] != 'r') || kind[2] != ' ') {
    return false;
  }
  if (g_rules.count == static_cast<int>(fs_rules::kMaxRules)) {
    return false;
  }
  Rule& r = g_rules.rules[g_rules.count++];
  r.pattern = kind + 3;
  r.absolute = kind[1] == 'a';
  r.cls = cls;
  r.index = counters[cls]++;
  return true;
}

bool parse(char* text) {
  uint16_t counters[3] = {0, 0, 0};
  bool header = false;
  for (char* line = text; line != nullptr && *line != '\0';) {
    char* nl = strchr(line, '\n');
    if (nl != nullptr) {
      *nl = '\0';
    }
    if (!header) {
      if (strcmp(line, fs_rules::kHeader) != 0) {
        return false;
      }
      header = true;
    } else if (strncmp(line, "workspace /", 11) == 0) {
      g_rules.workspace = line + 10;
      g_rules.workspace_len = strlen(g_rules.workspace);
    } else if (strcmp(line, "mode ro") == 0 || strcmp(line, "mode rw") == 0) {
      g_rules.workspace_ro = line[6] == 'o';
    } else if (strcmp(line, "style eacces") == 0 || strcmp(line, "style hide") == 0) {
      g_rules.hide = line[6] == 'h';
    } else if (strncmp(line, "deny_write", 10) == 0) {
      if (!parse_rule_line(line, 10, kClassDenyWrite, counters)) return false;
    } else if (strncmp(line, "deny", 4) == 0) {
      if (!parse_rule_line(line, 4, kClassDeny, counters)) return false;
    } else if (strncmp(line, "protect", 7) == 0) {
      if (!parse_rule_line(line, 7, kClassProtect, counters)) return false;
    } else if (*line != '\0') {
      return false;
    }
    line = nl != nullptr ? nl + 1 : nullptr;
  }
  return header && g_rules.workspace != nullptr;
}

}  // namespace

bool fs_rules_init(const char* value) {
  size_t n = strnlen(value, fs_rules::kMaxBytes + 1);
  if (n > fs_rules::kMaxBytes) {
    return false;
  }
  memcpy(g_rules.text, value, n);
  g_rules.text[n] = '\0';
  if (!parse(g_rules.text)) {
    g_rules.count = 0;
    g_rules.workspace = nullptr;
    return false;
  }
  return true;
}

int fs_check(int dirfd, const char* path, bool follow, FsAccess access, int flags, const char* op,
             const char* via) {
  if (path == nullptr || g_rules.workspace == nullptr) {
    return 0;
  }
  ErrnoGuard guard;
  char abs[PATH_MAX];
  char work[PATH_MAX];
  Found found = resolve(dirfd, path, follow, abs, work);
  if (found == Found::kUnknown) {
    return 0;  // the kernel cannot resolve it either: the real call fails on its own
  }
  // O_CREAT alone writes only when the file is missing; an existing one is just opened.
  bool write = access == FsAccess::kWrite || (access == FsAccess::kCreate && found == Found::kNew);
  if (op == nullptr) {
    op = write ? (found == Found::kNew ? "create" : "write") : "read";
  }
  const char* rel = workspace_relative(abs);
  Verdict v = decide(abs, rel, found == Found::kExisting, write);
  if (v.err != 0) {
    report(v, op, via, path, abs, rel, flags, write);
  }
  return v.err;
}

int fs_check_open(int dirfd, const char* path, int flags, const char* via) {
  FsAccess access = FsAccess::kRead;
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) != 0 ||
      (flags & O_TMPFILE) == O_TMPFILE) {
    access = FsAccess::kWrite;
  } else if ((flags & O_CREAT) != 0) {
    access = FsAccess::kCreate;
  }
  return fs_check(dirfd, path, (flags & O_NOFOLLOW) == 0, access, flags, nullptr, via);
}

}  // namespace cordon::preload_shim
