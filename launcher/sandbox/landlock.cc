// Landlock rules for the program: execute rights only beneath process.exec_allow, write rights only
// beneath the mounts the plan made writable. The mount namespace is the first wall for writes;
// Landlock is the second (a mount that ended up writable by mistake still refuses), and for exec
// it is the only one that also holds against static binaries and raw syscalls.
#include "launcher/sandbox/landlock.h"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/unique_fd.h"
#include "launcher/plan.h"

// Newer than Debian 12's kernel headers.
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

namespace cordon::launcher {
namespace {

constexpr uint64_t kWriteAbi1 = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                                LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                                LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                                LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                                LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
// The rights a rule on a non-directory may carry (others make landlock_add_rule fail EINVAL).
constexpr uint64_t kFileRights = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                                 LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE;

// The write rights this ABI knows. REFER (ABI 2) must be handled and granted wherever writes are:
// once any ruleset is in force, Landlock denies reparenting (rename/link across directories) unless
// a rule grants REFER, even when the ruleset does not handle it.
uint64_t write_rights(int abi) {
  uint64_t r = kWriteAbi1;
  if (abi >= 2) {
    r |= LANDLOCK_ACCESS_FS_REFER;
  }
  if (abi >= 3) {
    r |= LANDLOCK_ACCESS_FS_TRUNCATE;
  }
  return r;
}

// The ELF interpreters a dynamically linked program needs: the kernel opens the interpreter for
// execution too, so without EXECUTE on it no allowed dynamic program could start. (Landlock does
// not control mmap, so `ld.so ./prog` can load a program that exec_allow does not name; see
// noexec_unlisted_writable_mounts for what closes that for files the program can write.)
const char* const kLoaders[] = {
    "/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-linux-armhf.so.3",
    "/lib/ld-linux.so.2",          "/lib/ld-musl-x86_64.so.1",   "/lib/ld-musl-aarch64.so.1",
};

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) {
    v.push_back(s);
  }
}

// Whether `a` is `b` or beneath it (both normalized absolute paths).
bool beneath(const std::string& a, const std::string& b) {
  return b == "/" || a == b ||
         (a.size() > b.size() && a.compare(0, b.size(), b) == 0 && a[b.size()] == '/');
}

// Landlock's EXECUTE right is checked by execve, not by mmap(PROT_EXEC): `ld.so ./prog` (or a
// program's own loader) maps a binary the program wrote or downloaded without ever exec'ing it.
// The kernel refuses PROT_EXEC mappings (and execve) of files on a noexec mount, so every mount
// the program can write gets MS_NOEXEC when exec_allow is in force. A writable mount that
// exec_allow reaches into (an entry beneath it, or the mount beneath an entry) stays exec: the
// policy's author asked for execution there, and noexec would break exactly that. Read-only mounts
// are untouched: what they hold was installed by the host, not written by the program.
void noexec_unlisted_writable_mounts(const std::vector<std::string>& exec_paths, LaunchPlan& plan) {
  for (auto& m : plan.mounts) {
    bool writable = m.kind == MountKind::BindRw || m.kind == MountKind::CowOverlay ||
                    m.kind == MountKind::CowFuse || m.kind == MountKind::FsView ||
                    (m.kind == MountKind::Tmpfs && !m.ro && (m.flags & MS_RDONLY) == 0);
    if (!writable) {
      continue;
    }
    bool listed = std::any_of(exec_paths.begin(), exec_paths.end(), [&](const std::string& p) {
      return beneath(p, m.target) || beneath(m.target, p);
    });
    if (!listed) {
      m.flags |= MS_NOEXEC;  // mounts.cc applies it to these kinds as MOUNT_ATTR_NOEXEC
    }
  }
}

std::string describe_abi_error(int err) {
  return "landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): " +
         std::string(std::strerror(err)) +
         (err == EOPNOTSUPP ? " (Landlock is built in but not enabled at boot)"
          : err == ENOSYS   ? " (the kernel has no Landlock)"
                            : "");
}

}  // namespace

int landlock_abi(int* err) {
  long v = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (v < 0) {
    if (err != nullptr) {
      *err = errno;
    }
    return 0;
  }
  return static_cast<int>(v);
}

Result<std::vector<std::string>> exec_allow_paths(const policy::ProcessPolicy& process,
                                                  const std::string& workspace) {
  std::vector<std::string> out;
  for (size_t i = 0; i < process.exec_allow.size(); ++i) {
    const auto& p = process.exec_allow[i];
    std::string path = p.expanded;
    if (p.has_glob) {
      // Landlock grants beneath a path: only a trailing "/**" (everything beneath) maps onto it.
      bool tail = path == "**" || (path.size() > 3 && path.compare(path.size() - 3, 3, "/**") == 0);
      std::string prefix = path == "**" ? "" : path.substr(0, path.size() - 3);
      if (!tail || prefix.find_first_of("*?[") != std::string::npos) {
        return make_error("process.exec_allow[" + std::to_string(i) + "] \"" + p.text +
                              "\": execute rights are granted beneath literal paths; a glob "
                              "other than a trailing \"/**\" cannot be enforced",
                          "name the program (\"/usr/bin/git\") or its directory (\"/usr/bin\")");
      }
      path = prefix;
    }
    if (!p.absolute) {
      path = path.empty() ? workspace : workspace + "/" + path;
    }
    add_unique(out, path.empty() ? "/" : path);
  }
  struct stat st {};
  for (const char* loader : kLoaders) {
    if (::stat(loader, &st) == 0) {
      add_unique(out, loader);
    }
  }
  return out;
}

Status plan_landlock(const policy::ProcessPolicy& process, LaunchPlan& plan) {
  LandlockPlan ll;
  int err = 0;
  ll.abi = landlock_abi(&err);
  ll.enabled = ll.abi > 0;
  ll.exec_restricted = !process.exec_allow.empty();
  if (ll.exec_restricted && !ll.enabled) {
    return make_error(
        "process.exec_allow is set, but this kernel cannot enforce it: " + describe_abi_error(err),
        "enable the kernel feature Landlock (Linux >= 5.13, CONFIG_SECURITY_LANDLOCK=y and "
        "\"landlock\" in the lsm= boot parameter), or remove process.exec_allow");
  }
  if (!ll.enabled) {
    plan.landlock = ll;  // the mount plan alone governs writes
    return {};
  }
  if (process.nested_sandbox) {
    // A Landlock domain forbids mount(2) and pivot_root(2) outright, in namespaces the program
    // owns too: its own sandbox could not build its root. The mount plan alone governs writes
    // then (the policy loader refuses exec_allow, which only Landlock enforces, beside it).
    ll.enabled = false;
    plan.landlock = ll;
    return {};
  }
  if (ll.exec_restricted) {
    ASSIGN_OR_RETURN(ll.exec_paths, exec_allow_paths(process, plan.workspace));
    std::string list;
    for (const auto& p : ll.exec_paths) {
      list += p + "\n";
    }
    plan.etc_files.push_back({kExecAllowEtcFile, list, 0644});
    noexec_unlisted_writable_mounts(ll.exec_paths, plan);
  }
  // Writes: exactly where the mount plan put something writable.
  for (const auto& m : plan.mounts) {
    switch (m.kind) {
      case MountKind::BindRw:
      case MountKind::CowOverlay:
      case MountKind::FsView:
      case MountKind::BindDev:
      case MountKind::Devpts:
      case MountKind::Proc:
        add_unique(ll.write_paths, m.target);
        break;
      case MountKind::Tmpfs:
        if (!m.ro && (m.flags & MS_RDONLY) == 0) {
          add_unique(ll.write_paths, m.target);
        }
        break;
      default:
        break;
    }
  }
  if (plan.mode != policy::WorkspaceMode::Ro) {
    add_unique(ll.write_paths, plan.workspace);  // whatever mount kind serves it
  }
  plan.landlock = ll;
  return {};
}

Status apply_landlock_in_program(const LandlockPlan& ll) {
  if (!ll.enabled) {
    return {};
  }
  const uint64_t writes = write_rights(ll.abi);
  landlock_ruleset_attr attr{};
  const uint64_t reads =
      ll.restrict_reads ? LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR : 0;
  attr.handled_access_fs = writes | reads | (ll.exec_restricted ? LANDLOCK_ACCESS_FS_EXECUTE : 0);
  UniqueFd ruleset(static_cast<int>(
      ::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr.handled_access_fs, 0)));
  if (!ruleset) {
    return sys_error(
        "landlock_create_ruleset(handled_access_fs=0x" +
            [&] {
              char b[32];
              std::snprintf(b, sizeof b, "%llx",
                            static_cast<unsigned long long>(attr.handled_access_fs));
              return std::string(b);
            }() +
            ")",
        "the kernel refused a Landlock ruleset it reported as supported (ABI " +
            std::to_string(ll.abi) + ")");
  }
  auto add = [&](const std::string& path, uint64_t rights) -> Status {
    UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT) {
        return {};  // not in this sandbox (an optional path): nothing to grant
      }
      return sys_error("open(\"" + path + "\", O_PATH) for a Landlock rule");
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      return sys_error("fstat(\"" + path + "\") for a Landlock rule");
    }
    if (rights == 0) {
      return {};
    }
    landlock_path_beneath_attr pb{};
    pb.allowed_access = S_ISDIR(st.st_mode) ? rights : rights & kFileRights;
    pb.parent_fd = fd.get();
    if (pb.allowed_access == 0) {
      return {};
    }
    if (::syscall(SYS_landlock_add_rule, ruleset.get(), LANDLOCK_RULE_PATH_BENEATH, &pb, 0) != 0) {
      return sys_error("landlock_add_rule(\"" + path + "\")");
    }
    return {};
  };
  for (const auto& p : ll.read_paths) {
    TRY(add(p, reads));
  }
  for (const auto& p : ll.write_paths) {
    TRY(add(p, writes | reads));
  }
  if (ll.exec_restricted) {
    for (const auto& p : ll.exec_paths) {
      TRY(add(p, LANDLOCK_ACCESS_FS_EXECUTE | reads));
    }
  }
  // no_new_privs is already set (drop_privileges), which landlock_restrict_self requires.
  if (::syscall(SYS_landlock_restrict_self, ruleset.get(), 0) != 0) {
    return sys_error("landlock_restrict_self()",
                     "no_new_privs must be set first; a seccomp filter may refuse the call");
  }
  return {};
}

}  // namespace cordon::launcher
