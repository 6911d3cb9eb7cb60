// The decider protocol's lines (docs/decider.md), without any I/O: the question cordon-netproxy
// writes and the parser for the reply it reads. Kept apart from the channel so the parser, which
// reads bytes from a process cordon does not control, can be fuzzed on its own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cordon::netproxy {

// The protocol version in every question ("v"); a reply that names another version is refused.
inline constexpr int kDeciderProtocol = 1;
// Longest reply line read; anything longer breaks the channel (a decider that floods it is broken).
inline constexpr size_t kMaxDeciderLine = 16 * 1024;
// Longest reason kept from a reply: it is shown to the agent in the refusal line.
inline constexpr size_t kMaxDeciderReason = 512;

// A process of the sandbox, as cordon-netproxy read it from /proc outside the sandbox (never from
// anything the sandbox reports about itself).
struct SandboxProcess {
  int64_t pid = 0;                // as the sandbox numbers it
  std::string exe;                // /proc/PID/exe, as a path in the sandbox; empty if unreadable
  std::vector<std::string> argv;  // /proc/PID/cmdline, bounded (kMaxArgBytes, kMaxArgs)
  static constexpr size_t kMaxArgs = 64, kMaxArgBytes = 2048;
};

// A question about a connection the policy would refuse only for not being in network.allow.
struct DeciderQuestion {
  uint64_t id = 0;
  std::string kind = "connect";  // connect | dns (a name asked of the sandbox's DNS: no port)
  std::string host;              // the name, or the IP literal, the program gave
  uint16_t port = 0;             // 0 for dns
  std::string mode;              // http | connect | socks5 | transparent | dns
  std::string client;            // the program's end of the connection, "ip:port"
  std::string sni;               // transparent TLS: the name in the ClientHello
  std::string address;           // the address, when the program gave an IP literal
  // Plain HTTP whose request head was read before the question (an absolute-form request through
  // the proxy, or one caught transparently): its method and target path. Empty otherwise.
  std::string method, path;
  // The process holding the program's end of the connection, then its parent, and so on up to
  // (not including) the sandbox's init, at most kMaxChain. Empty when it was not found in time.
  std::vector<SandboxProcess> process;
  static constexpr size_t kMaxChain = 8;
};

// One JSON line (with its '\n') for `q`.
std::string question_line(const DeciderQuestion& q);

struct DeciderReply {
  uint64_t id = 0;
  bool allow = false;
  bool session = false;  // scope "session": cached for the rest of the session
  std::string reason;    // printable, at most kMaxDeciderReason bytes
};

// Parses one reply line (without its '\n'). Anything but a JSON object with an unsigned "id", a
// "decision" of "allow" or "deny", an optional "scope" of "once" or "session", an optional string
// "reason" and, if present, "v": 1 is an error naming what is wrong. Unknown keys are ignored so
// a later version can add fields. Never throws.
Result<DeciderReply> parse_decider_reply(std::string_view line);

// The decider's side, for a decider built into cordon (`cordon run --ask`): parses a question line
// (without its '\n'): a JSON object with "v": 1, a positive "id", a string "host" and "kind", and
// the optional fields question_line() writes. Never throws.
Result<DeciderQuestion> parse_decider_question(std::string_view line);

// One JSON line (with its '\n') for `r`; its reason is cleaned as parse_decider_reply() would.
std::string reply_line(const DeciderReply& r);

// The "id" of a reply that failed to parse, when it still names one (so only that question is
// denied rather than every open one); 0 when it does not.
uint64_t reply_id_hint(std::string_view line);

}  // namespace cordon::netproxy
