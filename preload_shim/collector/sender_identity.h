// The kernel's view of a process that sent the collector a message: its pids, exe and argv read
// from /proc/<host pid> by cordon on the host, never taken from the message. The text parsers are
// separate (and fuzzed): /proc/PID/cmdline is bytes of the process's own memory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::preload_shim {

// /proc/PID/status: the pid in every namespace from the reader's down (NSpid), and the parent's
// pid in the reader's namespace (PPid).
struct StatusIds {
  std::vector<int64_t> nspid;
  int64_t ppid = -1;
};
std::optional<StatusIds> parse_status(std::string_view text);

// /proc/PID/cmdline: NUL-separated arguments, at most `max_args` of them and `max_bytes` in all;
// `argc` counts them all.
struct Argv {
  std::vector<std::string> args;
  uint32_t argc = 0;
  bool truncated() const { return argc > args.size(); }
};
Argv parse_cmdline(std::string_view bytes, size_t max_args, size_t max_bytes);

// /proc/PID/fdinfo/N's "flags:" (octal), or nullopt.
std::optional<uint32_t> parse_fdinfo_flags(std::string_view text);

// Reading /proc/<pid> (pid in the collector's own pid namespace). Each returns nothing when the
// process is gone or hides it.
std::optional<StatusIds> read_status(pid_t pid);
std::string read_exe(pid_t pid);
std::optional<Argv> read_cmdline(pid_t pid, size_t max_args, size_t max_bytes);
// Whether `pid` holds, as its fd `fd`, the very file this process holds as `ours` (kcmp), marked
// close-on-exec. A process that has exec'd since it got that file does not: exec closed it, or
// (had it been made inheritable) it is not marked so.
bool holds_same_file(pid_t pid, int fd, int ours);

// How many pid namespaces deep the collector runs (1 in the initial one): a sender's NSpid entry
// at this index is its pid in the sandbox (the namespace cordon created below its own).
size_t own_pidns_depth();

}  // namespace cordon::preload_shim
