// The parent side while the sandbox runs: report channel, signal forwarding, terminal relay,
// wall-clock timeout, and the sandbox's end.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/limits/limits.h"
#include "launcher/sandbox/userns_listener.h"
#include "policy/policy.h"

namespace cordon::launcher {

struct SuperviseSpec {
  pid_t init_pid = -1;
  int pidfd = -1;
  int channel = -1;           // parent end of the report channel
  sigset_t signals;           // blocked by the caller before clone; read here through a signalfd
  policy::Millis timeout{0};  // 0 = none
  policy::Millis kill_grace{0};
  const Limits* limits = nullptr;
  // Called for each clone/unshare with CLONE_NEWUSER the seccomp listener reports, after it was
  // refused (EPERM): the record of it. May be empty.
  std::function<void(const RefusedNamespace&)> on_userns_refused;
  // More fds to read while the sandbox runs (the canaries' watch, the proxy's exfiltration
  // alarm, a detached session's control socket): `ready` is called when one is readable and returns
  // true when the session must end now (init is SIGKILLed, Outcome::alarm set). At most
  // kMaxWatches.
  struct Watch {
    int fd = -1;
    std::function<bool()> ready;
  };
  std::vector<Watch> watches;
  // `run --ask`'s asker (sidecars/asker.h), one end of a socketpair: it writes 'h' before it shows
  // a question and waits for the 'k' written back once the terminal relay has stopped reading the
  // terminal and writing the program's output to it (PtyRelay::hold); 'r' ends the hold. When
  // init exits, 'q' is written to it: it withdraws its question and writes 'r'. -1 = none.
  int input_hold = -1;
  // Called once init has exited, before the terminal's mode is restored. May be empty.
  std::function<void()> before_terminal_restore;
  static constexpr size_t kMaxWatches = 6;
};

// What happened, as observed; run.cc turns it into an exit code and messages.
struct Outcome {
  std::optional<std::string> setup_error;  // cordon's own failure inside the sandbox
  std::optional<int> exec_errno;           // execve of the program failed
  std::optional<int> program_status;       // raw wait status of the program (from init)
  int init_status = 0;                     // raw wait status of init
  bool timed_out = false;
  // SIGTERM reached cordon and the program had not ended at the end of kill_grace (or at a
  // second SIGTERM): the sandbox was SIGKILLed.
  bool term_killed = false;
  uint64_t userns_refused = 0;  // user namespaces refused through the listener
  bool alarm = false;           // a watch ended the session (network.on_exfil: kill)
};

// The signals cordon blocks before clone and handles synchronously.
sigset_t supervised_signals();

// Runs until init has exited. A SIGTERM to cordon is passed to the program and starts kill_grace;
// a program still running at its end, or at a second SIGTERM, is SIGKILLed with its sandbox.
// The other signals are passed to the program and change nothing else. Runs until init has
// exited and everything it said was read (and, with a terminal, the pty
// drained). Puts the terminal in raw mode once the pty arrives and restores it before returning.
Outcome supervise(const SuperviseSpec& spec);

}  // namespace cordon::launcher
