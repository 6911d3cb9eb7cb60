// Shell completion scripts (bash, zsh, fish) generated from cordon's own CLI11 definition.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace cordon::launcher {

// The completion script for `shell` ("bash", "zsh" or "fish") of every visible subcommand,
// option and positional of `app`: option values and positionals named FILE/PATH complete files,
// DIR directories, ID session ids (from `cordon ls --ids`), and `run` completes the program after
// its options. "" for another shell.
std::string completion_script(const CLI::App& app, const std::string& shell);

// `cordon completion SHELL`: prints the script; 125 for an unknown shell.
int completion_command(const CLI::App& app, const std::string& shell);

}  // namespace cordon::launcher
