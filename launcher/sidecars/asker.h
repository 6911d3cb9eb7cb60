// `cordon run --ask` (docs/ask.md): cordon itself is the decider. A child of cordon, outside the
// sandbox, reads the proxy's questions (decider_wire.h: the same protocol as --decider) and puts
// them one at a time to the person at cordon's controlling terminal, opened as /dev/tty.
//
// The program never holds that terminal: with a terminal on stdin it gets a pty of its own, which
// cordon relays; while a question is open the relay stops reading the terminal (the input hold,
// supervise.h), so every key typed then reaches the asker and none the program. Without a pty the
// program's stdio may still be the terminal, but it runs in a session of its own, where the
// terminal is not its controlling one: it cannot push input into it (TIOCSTI), only read it, and a
// key it takes away leaves the question unanswered, which denies.
#pragma once

#include <chrono>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/sidecars/decider_sidecar.h"

namespace cordon::launcher {

struct AskOptions {
  // --policy FILE: where "always" and "deny always" append; empty = there is no file, and
  // "always" holds for the session only (the prompt says so).
  std::string policy_file;
  std::string session_id;             // named in the comment written with each entry
  std::chrono::milliseconds timeout;  // how long a question stays open; then it is denied
  // The session's events: the preload shim's net.connect there names the process behind a
  // question's `client` (pid, exe, argv), shown with the question. Empty = not shown.
  std::string events_path;
};

// Fails, saying why, when cordon has no controlling terminal (`/dev/tty` cannot be opened: run
// from a pipe, a service, or under `setsid`). Checked before anything starts.
Result<UniqueFd> open_controlling_terminal();

struct Asker {
  // `channel.proxy_end` goes to the proxy as --decider-fd; `channel.child` is the asker.
  DeciderChannel channel;
  // Cordon's end of the input hold (SuperviseSpec::input_hold).
  UniqueFd hold;
};

// Starts the asker on `tty` (from open_controlling_terminal()).
Result<Asker> start_asker(UniqueFd tty, const AskOptions& opts);

}  // namespace cordon::launcher
