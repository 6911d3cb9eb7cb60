// Opening an upstream connection (decide -> caps -> resolve once -> check every address -> dial
// the checked one) and relaying bytes after the decision; both shared by every front end.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "netproxy/context.h"

namespace cordon::netproxy {

// Points at the Context an opened Upstream must be recorded in; a move leaves the source empty, so
// exactly one Upstream owns the record.
class RecordOwner {
 public:
  RecordOwner() = default;
  explicit RecordOwner(Context* c) : ctx_(c) {}
  RecordOwner(RecordOwner&& o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)) {}
  RecordOwner& operator=(RecordOwner&& o) noexcept {
    ctx_ = std::exchange(o.ctx_, nullptr);
    return *this;
  }
  Context* get() const { return ctx_; }

 private:
  Context* ctx_ = nullptr;
};

// One upstream connection, for its net.connect event at close. Once opened (open_upstream
// succeeded) it writes that event when it is destroyed unfinished, so a connection whose
// coroutine is destroyed with the io_context at a stop is still recorded.
struct Upstream {
  Upstream() = default;
  Upstream(Upstream&&) noexcept = default;
  Upstream& operator=(Upstream&&) noexcept = default;
  ~Upstream();

  std::string mode;  // http | connect | socks5 | transparent
  std::string name;  // the name decided on; empty for a raw-IP destination
  std::string sni;
  std::string
      client;  // the sandbox-side peer ("ip:port" / "[v6]:port"): joins with the shim's record
  policy::IpAddress addr;
  uint16_t port = 0;
  std::string rule;
  const char* source = "policy";  // who allowed it: policy | decider
  ConnSlot slot;
  Clock::time_point start = Clock::now();
  uint64_t bytes_out = 0;  // sandbox -> upstream
  uint64_t bytes_in = 0;   // upstream -> sandbox
  std::string end =
      "closed";  // why it ended: closed | idle_timeout | stopped | network.max_bytes_out | ...
  bool finished = false;
  RecordOwner owner;  // set by open_upstream on success
};

enum class Failure { None, Policy, Cap, Resolve, ConnectRefused, Unreachable };

struct Destination {
  std::string host;  // a name or IP literal, as the client gave it
  uint16_t port = 0;
  std::string mode;
  std::string sni;
  std::string client;  // peer_text() of the accepted socket
  // Transparent mode: the address the sandbox dialled, mapped back to the real one: dial exactly
  // that (never re-resolve). `fixed_pinned`: it came from network.resolve.
  std::optional<policy::IpAddress> fixed_addr;
  bool fixed_pinned = false;
  // Set when the front end already decided the name (so it is decided once): used as is.
  std::optional<policy::NetDecision> decided;
  // Added to refusal events only, each when not empty: no JSON object is built per connection.
  std::string original_dst, peek, host_header;  // transparent
  std::string method, url;                      // absolute-form HTTP
  std::string path;  // transparent plain HTTP: the request's target (a decider is shown it)
};

struct Opened {
  Failure failure = Failure::None;
  std::string message;                // the one-line refusal the client reads
  std::optional<tcp::socket> socket;  // connected, non-blocking, TCP_NODELAY
  Upstream up;
};

// A destination decided (policy or decider, resolved once, every address checked) and not yet
// dialled: a front end that must judge the request first (transparent plain HTTP) dials it only
// once the request may go, so a refused request costs the destination no connection.
struct Decided {
  Failure failure = Failure::None;
  std::string message;  // the refusal's line, with failure set (its net.refused is written)
  Destination dest;     // host normalised
  std::vector<policy::IpAddress> addrs;
  std::string rule;
  const char* source = "policy";
  bool raw_ip = false;  // dest.host is an IP literal: the Upstream has no name
  // The name the request judges are made for (as Upstream::name: empty for a raw IP).
  std::string name() const { return raw_ip ? std::string() : dest.host; }
};
asio::awaitable<Decided> decide_upstream(Context& ctx, Destination dest);

// Dials a decided destination: the connection caps (a refusal is Failure::Cap), then each checked
// address in turn.
asio::awaitable<Opened> dial_upstream(Context& ctx, Decided d);

// decide_upstream, then dial_upstream.
asio::awaitable<Opened> open_upstream(Context& ctx, Destination dest);

// Emits net.connect for `up` once (decision allow, bytes each way, duration).
void finish_upstream(Context& ctx, Upstream& up);

// Puts `w` under the idle sweeper (started if none runs) until the returned guard ends.
class IdleWatchGuard {
 public:
  IdleWatchGuard(Context& ctx, IdleWatch& w);
  ~IdleWatchGuard() { ctx_.watched.erase(pos_); }
  IdleWatchGuard(const IdleWatchGuard&) = delete;
  IdleWatchGuard& operator=(const IdleWatchGuard&) = delete;

 private:
  Context& ctx_;
  std::list<IdleWatch*>::iterator pos_;
};

// Hands a decided connection to a tunnel of its own and returns at once, so the front end's
// coroutines (and their handshake state) end. The tunnel relays with splice(2) (splice.h) until
// both directions reach EOF, an error, the idle timeout or a byte budget; a half-close is passed
// on. `leftover` (bytes the client sent before the decision) is sent upstream first. net.connect
// is logged when the tunnel ends.
void start_tunnel(Context& ctx, tcp::socket client, tcp::socket upstream, Upstream up,
                  std::string leftover);

// The bytes a handshake buffer still holds (sent upstream first by the tunnel).
inline std::string take_leftover(beast::flat_buffer& buf) {
  std::string out(static_cast<const char*>(buf.data().data()), buf.size());
  buf.consume(buf.size());
  return out;
}

}  // namespace cordon::netproxy
