// The wire of `cordon exec`: caller -> the session's control socket -> the sandbox's exec server,
// and the reports back. SOCK_SEQPACKET on every leg: a request or a report is one message, so
// there is no framing to get wrong and no partial read to wait on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::launcher {

// The largest encoded request (argv, environment and directory together). A request over it is
// refused by the caller before it is sent.
inline constexpr size_t kMaxExecRequest = 128 * 1024;

enum class ControlOp : char {
  Exec = 'x',  // run argv in the session; the caller's fds 0-2 ride along (SCM_RIGHTS)
  Stop = 's',  // end the session; the reply comes at once, the connection closes at its end
  // On an exec's own connection, while it runs: pass `signal` to its program's process group
  // (`cordon exec` got it). A connection that closes first has its program SIGKILLed.
  Signal = 'k',
};

struct ExecRequest {
  ControlOp op = ControlOp::Exec;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=VALUE set over the session's environment
  std::string cwd;               // tried first; "" or not shown in the sandbox = session's
  int signal = 0;                // Signal: 1-64
};

// Every string must be free of NUL bytes (as argv and environ always are).
std::string encode_request(const ExecRequest& r);
// Refuses what encode_request cannot have written: an unknown tag, a missing terminator, an exec
// without argv, an env entry without '=', a Signal without a signal number in 1-64.
Result<ExecRequest> decode_request(std::string_view bytes);

enum class ExecEvent : uint32_t {
  Started = 1,  // value = 0; pid = the program's pid in the sandbox
  Exited = 2,   // value = its raw wait status
  Failed = 3,   // cordon could not start it; value = the exit code to use (125), text follows
  Stopping = 4  // reply to Stop
};

// Sent as its bytes (trivially copyable), optionally followed by a message text.
struct ExecReport {
  uint64_t id = 0;  // the supervisor's number for the request; 0 on the caller's leg
  ExecEvent event = ExecEvent::Failed;
  int32_t value = 0;
  int32_t pid = 0;
};
std::string encode_report(const ExecReport& r, std::string_view text = {});
// The report and its text; an error for a message shorter than a report.
Result<std::pair<ExecReport, std::string>> decode_report(std::string_view bytes);

// One message with up to 3 fds (SCM_RIGHTS).
Status send_packet(int sock, std::string_view bytes, const int* fds = nullptr, size_t nfds = 0);

struct Packet {
  bool eof = false;  // the peer closed: no message
  std::string bytes;
  std::vector<UniqueFd> fds;  // received with O_CLOEXEC
};
// One message of at most `max_bytes`; a longer one, or one with more than 3 fds, is an error
// (and its fds are closed). `flags`: MSG_DONTWAIT or 0.
Result<Packet> recv_packet(int sock, size_t max_bytes, int flags);

}  // namespace cordon::launcher
