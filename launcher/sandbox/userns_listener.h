// The seccomp listener for user namespaces (SeccompProgram::listener): while
// process.nested_sandbox is off, every clone/unshare with CLONE_NEWUSER the program tries is sent
// to cordon, which answers EPERM and records it (proc.refused), so an agent whose own sandbox
// (bubblewrap) cannot start sees why in `cordon log` instead of a bare "No permissions".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "base/result.h"

namespace cordon::launcher {

struct RefusedNamespace {
  pid_t pid = 0;        // as the listener's reader sees it (cordon: the host's pid)
  std::string syscall;  // "clone" | "unshare"
  uint64_t flags = 0;   // the namespace flags asked for
  std::string exe;      // the asking program, read while its call was held; empty if unknown
};

// Parent side: answers the next pending notification on `listener` with EPERM. nullopt when there
// is none (EAGAIN) or the asking thread died meanwhile (ENOENT).
std::optional<RefusedNamespace> answer_userns_notification(int listener);

// "CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID" for the namespace bits of `flags`.
std::string namespace_flags_text(uint64_t flags);

// Program side, before exec (verify step): a forked child's unshare(CLONE_NEWUSER) must arrive at
// `listener`, be answered EPERM and fail with it. Proves the wall holds through the listener
// before the listener is handed to cordon.
Status probe_userns_listener(int listener);

}  // namespace cordon::launcher
