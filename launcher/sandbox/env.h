// The sandbox's environment: keep list, deny patterns, explicit passes and sets (process.env).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "policy/policy.h"
#include "record/events.h"

namespace cordon::launcher {

// What building the environment decided that the user must hear about (names only, never
// values): said at start and recorded as events.
struct EnvNote {
  std::string name;
  std::string rule;     // "process.env.deny[i]" that refused or was overridden; "" for none
  std::string pattern;  // that deny pattern, e.g. "*API_KEY*"
};
struct EnvNotes {
  std::vector<EnvNote> kept_but_denied;   // kept, on the host, refused by a deny pattern
  std::vector<EnvNote> passed;            // passed (process.env.pass) and on the host
  std::vector<std::string> pass_missing;  // passed names the host does not have
};

// The notes as lines for stderr (without the "cordon: " prefix).
std::vector<std::string> env_note_lines(const EnvNotes& notes);
// Says the notes on stderr (unless `quiet`) and records them, by name only: env.refused for a
// kept variable a deny pattern stopped, env.passed for one process.env.pass handed over.
void report_env_notes(const EnvNotes& notes, const record::EventLog& events, bool quiet);

// Builds the program's envp from the host's. Order: start empty; copy names in env.keep that are
// present and not denied; copy names in env.pass that are present (deny or not); apply env.set
// (always wins, even over deny); then `extra` (set by cordon itself, e.g. proxy variables).
// Returns "K=V" strings; `notes` (optional) gets what the user is told.
std::vector<std::string> build_environment(const policy::EnvPolicy& env, char** host_env,
                                           const std::map<std::string, std::string>& extra = {},
                                           EnvNotes* notes = nullptr);

}  // namespace cordon::launcher
