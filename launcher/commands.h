// Entry points of the `cordon` subcommands; main.cc only parses the command line and calls these.
#pragma once

#include <string>

#include "launcher/run_options.h"

namespace cordon::launcher {

int run_command(const RunOptions& opts);            // run.cc
int policy_default_command();                       // policy_cmd.cc
int policy_check_command(const std::string& file);  // policy_cmd.cc
int policy_explain_command(const std::string& file);

}  // namespace cordon::launcher
