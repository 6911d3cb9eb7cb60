// The decider channel (docs/decider.md): a process outside the sandbox that answers, over JSON
// lines on one stream socket, for connections the policy refuses only for not being in
// network.allow. Asynchronous on the proxy's io_context: a held connection is a suspended
// coroutine with a timer, so the proxy keeps serving everyone else while a question is open.
#pragma once

#include <sys/types.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "netproxy/decider_wire.h"

namespace cordon::netproxy {

struct Context;

// Who made a network decision, as events name it ("source").
// Person: the decider is `cordon run --ask`, where each answer is typed by someone at cordon's
// terminal.
enum class DecisionSource { Policy, Decider, Person, Timeout, DeciderError };
const char* source_name(DecisionSource s);
// True for an answer the decider (or the person) gave, as opposed to a timeout or a failure.
inline bool answered(DecisionSource s) {
  return s == DecisionSource::Decider || s == DecisionSource::Person;
}

struct DeciderVerdict {
  bool allow = false;
  bool session = false;  // the answer holds for the session (cached)
  bool cached = false;   // a session answer given earlier: the decider was not asked again
  std::string reason;    // the decider's reason, or what went wrong with it
  DecisionSource source = DecisionSource::DeciderError;
};

class Decider {
 public:
  // Takes `fd` (a connected stream socket). `timeout`: how long one question stays open before it
  // is denied (source timeout). `person`: the answers are typed by a person (`cordon run --ask`),
  // and events say decided_by "person".
  // `sandbox_init`: the sandbox's init (this pid namespace's number), whose processes a question
  // names (DeciderQuestion::process, client_process.h); 0 = none named.
  Decider(Context& ctx, int fd, std::chrono::milliseconds timeout, bool person = false,
          pid_t sandbox_init = 0);
  ~Decider();
  Decider(const Decider&) = delete;
  Decider& operator=(const Decider&) = delete;

  // Starts reading replies. Call once, before run().
  void start();
  // How long a question waits, at most, while the process behind it is looked up in /proc (the
  // proxy's one thread waits with it): past it the question goes without the process.
  static constexpr std::chrono::milliseconds kProcessLookup{20};
  // Asks about `q` (its id is assigned here; its process looked up) and resumes when the answer,
  // the timeout or the channel's end comes. Denies at once, never asking, once the channel is
  // broken. A session answer for the same kind, host and port is returned without asking. Emits
  // net.decider.
  boost::asio::awaitable<DeciderVerdict> ask(DeciderQuestion q);
  // Closes the channel: every open question is denied (source decider-error).
  void close();

 private:
  struct Pending {
    boost::asio::steady_timer* wake;  // cancelled when the answer is in
    std::optional<DeciderVerdict>* answer;
  };
  boost::asio::awaitable<void> read_replies();
  boost::asio::awaitable<void> write_queued();
  void answer(uint64_t id, DeciderVerdict v);
  void broken(const std::string& why);  // denies every open question; later ones at once

  Context& ctx_;
  boost::asio::posix::stream_descriptor channel_;
  std::chrono::milliseconds timeout_;
  DecisionSource answers_as_;
  pid_t sandbox_init_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  std::map<std::string, DeciderVerdict> session_;  // "kind host port" -> session answer
  std::deque<std::string> outbox_;
  bool writing_ = false;
  std::optional<std::string> broken_;  // why the channel is unusable, once it is
};

}  // namespace cordon::netproxy
