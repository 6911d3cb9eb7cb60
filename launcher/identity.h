// Who the sandbox runs as and whose home "~" means: as root never uid 0 ($SUDO_UID, else the
// workspace's owner, else nobody); rootless the invoking user. "~" is that user's home, so a
// policy's "~/.claude" and the default secrets (~/.ssh, ~/.aws, ...) name the files the program
// could otherwise reach, and $HOME inside matches the uid.
#pragma once

#include <sys/stat.h>

#include <string>

#include "launcher/plan.h"

namespace cordon::launcher {

// The home "~" means before the sandbox's user is known (for the workspace path itself): under
// sudo the invoking user's ($SUDO_UID's), not root's; otherwise $HOME, else the user database.
std::string invoking_home(const HostFacts& host);

// The identity for a workspace whose stat is `workspace`.
Identity choose_identity(const HostFacts& host, const struct stat& workspace);

}  // namespace cordon::launcher
