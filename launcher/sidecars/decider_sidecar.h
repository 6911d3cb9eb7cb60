// The decider (docs/decider.md), host side: `cordon run --decider CMD` starts CMD outside the
// sandbox, speaking on a socketpair as its stdin and stdout; `--decider-socket PATH` connects to
// a decider already listening there. Either way cordon-netproxy gets the channel as --decider-fd;
// the sandbox never gets an fd, a path or a namespace through which it could reach the decider.
#pragma once

#include <optional>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/child_process.h"

namespace cordon::launcher {

struct DeciderChannel {
  // The proxy's end, handed to it as --decider-fd; close it once the proxy is started, so that
  // the proxy holds the only copy (the decider then sees end of file when the proxy ends).
  UniqueFd proxy_end;
  // The decider command, run as cordon's user in cordon's namespaces with cordon's stderr;
  // stopped (SIGTERM, then SIGKILL) and reaped on destruction. Empty for --decider-socket.
  std::optional<ChildProcess> child;
};

// Runs `command` with /bin/sh -c, its stdin and stdout one end of a new socketpair. It gets
// cordon's environment and no other fd of cordon's, and SIGTERM if cordon dies.
Result<DeciderChannel> start_decider_command(const std::string& command);

// Connects to the AF_UNIX stream socket at `path` (as cordon's user, before any namespace).
Result<DeciderChannel> connect_decider_socket(const std::string& path);

}  // namespace cordon::launcher
