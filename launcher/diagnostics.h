// The launcher's own voice on stderr: one line per message, each starting "cordon: " (or
// "cordon COMMAND: " for a subcommand's own).
#pragma once

#include <iosfwd>
#include <string_view>

namespace cordon::launcher {

// Writes "cordon: MSG\n" to stderr in one write, so lines of concurrent writers do not interleave.
void say(std::string_view msg);

// say(msg), then the exit status of cordon's own failure (kExitCordonFailed).
int fail(std::string_view msg);

// The same for a subcommand's own messages: "cordon COMMAND: MSG" ("cordon prune: ...").
void say_in(std::string_view command, std::string_view msg);
int fail_in(std::string_view command, std::string_view msg);

// The same lines written to `err`, for commands whose tests hand them a stream.
void say(std::ostream& err, std::string_view msg);
void say_in(std::ostream& err, std::string_view command, std::string_view msg);

}  // namespace cordon::launcher
