// The sandbox -> cordon report channel: one SOCK_SEQPACKET socketpair carrying small typed
// messages (setup error, exec error, the program's wait status, the pty master fd) and, in the
// other direction, the one-byte "go" that releases the child once its id maps are written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::launcher {

enum class MsgKind : uint32_t {
  SetupError = 1,      // cordon's own setup failed in the child; text = the message, value = errno
  ExecError = 2,       // execve of the program failed; value = errno
  ProgramExit = 3,     // init: the program ended; value = its raw wait status
  PtyMaster = 4,       // the pty master fd rides along (SCM_RIGHTS)
  NetSockets = 5,      // the capture sockets made in the sandbox's netns (netns.h); text = their
                       // roles, comma-separated, in the order of `fds` (SCM_RIGHTS)
  UsernsListener = 6,  // the program's seccomp listener for user namespaces (userns_listener.h)
  Decoys = 7,          // the canaries' files written (sandbox/decoys.h): fd = their inotify
                       // instance; text = "WD DEV INO" per decoy; value = how many
};

struct Msg {
  MsgKind kind{};
  int32_t value = 0;
  std::string text;
  UniqueFd fd;                // the first fd that rode along (PtyMaster's, NetSockets' first)
  std::vector<UniqueFd> fds;  // any further fds, in order (NetSockets)
};

// Both ends are SOCK_SEQPACKET: message boundaries hold, so no framing and no partial reads.
struct ChannelPair {
  UniqueFd parent, child;
};
Result<ChannelPair> make_channel();

// Child side. No allocation beyond the stack buffer; errors are ignored by callers that are about
// to _exit anyway, so these return bool.
bool send_msg(int sock, MsgKind kind, int32_t value, const char* text = nullptr, int fd = -1);
// Child side: several fds in one message (at most kMaxMsgFds).
inline constexpr size_t kMaxMsgFds = 8;
bool send_msg_fds(int sock, MsgKind kind, int32_t value, const char* text, const int* fds,
                  size_t nfds);
// Parent side: reads one message; std::nullopt at EOF (every child end closed).
Result<std::optional<Msg>> recv_msg(int sock);

// Parent side, during setup: reads until the child's message of `kind` (others sent before it
// are dropped). The child's setup error before it is the error; the channel's end is `if_ended`.
Result<Msg> recv_until(int sock, MsgKind kind, const std::string& if_ended);

// The release handshake: parent writes one byte; the child blocks until it comes (false if the
// parent died before releasing it).
Status release_child(int sock);
bool wait_for_release(int sock);

}  // namespace cordon::launcher
