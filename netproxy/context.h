// What every connection handler shares: the policy, the event log, caps and the name map. One per
// proxy, used from the single io_context thread only.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "netproxy/caps.h"
#include "netproxy/event_line.h"
#include "netproxy/name_map.h"
#include "netproxy/pipe_pool.h"
#include "policy/policy.h"
#include "record/events.h"

struct ssl_ctx_st;

namespace cordon::netproxy {

class BodyScanner;
class CertAuthority;
class Decider;

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using Millis = std::chrono::milliseconds;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

// A connection the one idle sweeper watches (IdleWatchGuard, upstream.h): expire() is called once
// nothing moved on it for `limit` (checked once a tick, so between `limit` and `limit` + a tick).
// Tunnels, and transparent plaintext HTTP connections: no timer per connection or operation.
struct IdleWatch {
  Clock::time_point last = Clock::now();  // the last byte moved (or the connection's start)
  Millis limit{0};
  virtual void expire() = 0;  // closes the connection's sockets: its pending operations end

 protected:
  ~IdleWatch() = default;
};

// A network.credentials secret (credentials.h): the policy's entry, the sandbox's placeholder and
// the real value (same length). Or a canary: no entry (bound to no host), `canary` its name,
// `placeholder` the decoy value, no real value.
struct Secret {
  const policy::Credential* cred;
  std::string placeholder, value;
  std::string canary;
  bool bound_to(std::string_view host, uint16_t port) const {
    return cred != nullptr && cred->bound_to(host, port);
  }
};

struct Context {
  Context(asio::io_context& io, const policy::NetworkPolicy& p, const record::EventLog& ev)
      : io(io), policy(p), events(ev), caps(p) {}
  asio::io_context& io;
  const policy::NetworkPolicy& policy;
  const record::EventLog& events;
  Caps caps;
  NameMap names;
  // TLS inspection (inspect.h): the CA minting leaves and the upstream verifying context; null
  // when the policy inspects nothing.
  CertAuthority* ca = nullptr;
  ssl_ctx_st* upstream_tls = nullptr;
  std::vector<Secret> secrets;  // one per policy.credentials, then the canaries' (load_secrets)
  std::shared_ptr<const BodyScanner> scanner;  // the secrets' forms (body_scan.h), or null
  // Asked about what the policy refuses only for not being in network.allow (decider.h); null
  // when no decider was given.
  Decider* decider = nullptr;
  int exfil_alarm_fd = -1;        // network.on_exfil: kill: a byte here per net.exfil (main.cc)
  PipePool pipes;                 // for the splice(2) data path (splice.h)
  std::list<IdleWatch*> watched;  // for the one idle-timeout sweeper (upstream.cc)
  bool sweeping = false;
  uint32_t clients = 0;  // accepted sockets being served (bounded by kMaxClients)
  // Set once the drain after a stop is over: a connection whose record is written from then on
  // (its coroutine destroyed with the io_context) ends "stopped", not "closed".
  bool stopped = false;
  static constexpr uint32_t kMaxClients = 8192;
  // How long to wait for a client's first bytes (transparent peek uses its own, shorter deadline).
  Millis handshake_timeout{std::chrono::seconds(30)};
  Millis peek_timeout{std::chrono::milliseconds(300)};

  void emit(std::string_view kind, nlohmann::json fields) const;
  // The same for a line built without a JSON tree (event_line.h): the per-request and
  // per-connection events.
  void emit(const EventLine& line) const;
  // peer_text(s) for the events' "client"; nothing computed when no event log is open.
  std::string client_of(const tcp::socket& s) const;
  std::string client_of(const tcp::endpoint& peer) const;
};

// Counts a served client for the bound on concurrent accepted sockets.
class ClientGuard {
 public:
  explicit ClientGuard(Context& c) : c_(c) { ++c_.clients; }
  ~ClientGuard() { --c_.clients; }
  ClientGuard(const ClientGuard&) = delete;
  ClientGuard& operator=(const ClientGuard&) = delete;

 private:
  Context& c_;
};

asio::ip::address to_asio(const policy::IpAddress& ip);

// The accepted socket's peer as the program saw its own end: "ip:port" or "[v6]:port", IPv4-mapped
// addresses (dual-stack listeners) written as IPv4. Empty if the peer is gone. Events carry it as
// "client", which the launcher joins with the preload shim's record of the same local address.
std::string peer_text(const tcp::socket& s);
std::string peer_text(const tcp::endpoint& peer);
policy::IpAddress from_asio(const asio::ip::address& a);

// Logs an exception escaping a connection coroutine: the handler every co_spawn gets.
void log_coroutine_end(const char* what, std::exception_ptr e);

}  // namespace cordon::netproxy
