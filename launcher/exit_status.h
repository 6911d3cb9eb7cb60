// How `cordon run` ends, with or without namespaces: the program's end as cordon's exit status,
// the line said on stderr and what the session record keeps of it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "launcher/session/session.h"
#include "launcher/supervise.h"
#include "policy/policy.h"

namespace cordon::launcher {

struct ExitFacts {
  std::string command;  // argv[0], as the messages name it
  policy::Millis timeout{0};
  uint64_t memory = 0;  // process.memory, named when that limit killed the program
  // Where cordon can tell why the command was not found: the hint that follows "in the
  // sandbox; ". May be empty.
  std::function<std::optional<std::string>()> not_found_hint;
};

// The exit status for `out` (run_options.h: the program's own, 128+N, 124, 125, 126, 127). Says
// cordon's part on stderr and fills `end`'s error, signal, timed_out and limit_hit; `end.usage`
// must already hold the limits' final usage.
int exit_status(const Outcome& out, const ExitFacts& facts, SessionEnd& end);

}  // namespace cordon::launcher
