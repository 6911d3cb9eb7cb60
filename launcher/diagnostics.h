// The launcher's own voice on stderr: one line per message, each starting "cordon: ".
#pragma once

#include <string_view>

namespace cordon::launcher {

// Writes "cordon: MSG\n" to stderr in one write, so lines of concurrent writers do not interleave.
void say(std::string_view msg);

// say(msg), then the exit status of cordon's own failure (kExitCordonFailed).
int fail(std::string_view msg);

}  // namespace cordon::launcher
