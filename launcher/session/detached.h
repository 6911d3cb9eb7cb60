// Finding a detached session (`cordon run --detach`) by id, id prefix, "last" or --name.
#pragma once

#include <optional>
#include <string>

#include "base/result.h"

namespace cordon::launcher {

struct DetachedSession {
  std::string id;
  std::string dir;     // its session directory
  std::string socket;  // its control socket (session_control.h), which may be gone
};

// The running session named `name` (its control socket is there), newest first; nullopt if none.
std::optional<std::string> find_running_by_name(const std::string& root, const std::string& name);

// `text` as an id (full, a unique prefix, "last"), else as a --name. An unknown id or name is an
// error that says how to list sessions; whether the session still runs is the caller's to find
// out by connecting.
Result<DetachedSession> find_detached(const std::string& root, const std::string& text);

}  // namespace cordon::launcher
