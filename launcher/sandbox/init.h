// pid 1 of the sandbox: reaps every child, forwards signals to the program, exits with its status.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include "base/result.h"

namespace cordon::launcher {

// The signals cordon and init forward to the program.
inline constexpr int kForwardedSignals[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT,
                                            SIGUSR1, SIGUSR2, SIGWINCH};
// sigqueue() value with SIGTERM meaning "terminate the whole tree" (the timeout), not only the
// program: init then sends SIGTERM to every process of the namespace (kill(-1)).
inline constexpr int kTerminateTree = 0x636f7264;

// Before forking the program: installs handlers for the forwarded signals (a pid 1 without a
// handler never receives them: the kernel drops them at send time) and keeps them blocked, to be
// collected with sigwaitinfo().
Status prepare_init_signals();

// /proc/1/environ and /proc/1/cmdline read init's own memory: overwrites what cordon was started
// with (the host's unscrubbed environment, the command line) in place.
void scrub_inherited_memory();

// After the program was forked: scrubs what init inherited from cordon (environment strings and
// command line in memory, open fds other than `report_fd`), makes itself non-dumpable (its memory
// holds the host's environment; the program runs as the same uid), then loops: reap, forward.
// When the program ends, sends its wait status over `report_fd` and exits with the shell's
// convention (code, or 128+N). Everything else in the namespace dies with it.
[[noreturn]] void run_init(int report_fd, pid_t program);

}  // namespace cordon::launcher
