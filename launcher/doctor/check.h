// What `cordon doctor` says of one requirement: its state, what was measured, what it means for
// cordon and how to fix it.
#pragma once

#include <string>
#include <vector>

namespace cordon::launcher::doctor {

enum class State {
  Ok,        // cordon uses it as designed
  Degraded,  // cordon runs with a named, weaker fallback
  Missing,   // cordon cannot run a sandbox here (or not in its default mode)
};

// "ok", "degraded", "missing": the words the table and --json use.
const char* state_name(State s);

struct Check {
  std::string name;  // "namespaces", "/proc", "seccomp", ...
  State state = State::Ok;
  std::string measured;     // what was tried and what the kernel answered
  std::string consequence;  // what it means for cordon; empty when ok
  std::string fix;          // the setting to change, by name; empty when ok
};

}  // namespace cordon::launcher::doctor
