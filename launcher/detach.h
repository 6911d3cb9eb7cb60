// `cordon run --detach`: cordon becomes the session's supervisor in the background; the caller
// gets the session's id on stdout once the session is ready, and its prompt back.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/run_options.h"

namespace cordon::launcher {

// The options --detach refuses, and --name / --idle-timeout without it: the message, or "".
std::string detach_option_error(const RunOptions& opts);

class DetachedStart {
 public:
  // Forks, before cordon starts any thread. The parent never returns: it waits (up to two
  // minutes) for the announcement, prints the id and exits 0, or exits 125 if the setup failed
  // (the supervisor has said why on the shared stderr). The supervisor returns here, in a session
  // of its own (no terminal's hangup reaches it) with stdin and stdout on /dev/null.
  static Result<DetachedStart> fork_supervisor();
  // The session is ready: the caller learns its id, and stderr goes to /dev/null from here on (a
  // caller reading cordon's stderr through a pipe would otherwise wait for the session's end).
  void announce(const std::string& id);

 private:
  UniqueFd to_caller_;
};

}  // namespace cordon::launcher

namespace cordon::launcher {

// The argv the plan is built for. A detached session starts no program of its own, but the plan
// still names one (an agent preset finds its install tree from it): the shell, which every
// sandbox shows.
std::vector<std::string> detached_plan_argv(const RunOptions& opts);

}  // namespace cordon::launcher
