// Upstream connections: one decision path for every front end, then the relay.
#include "netproxy/upstream.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <list>
#include <memory>

#include "netproxy/decide.h"
#include "netproxy/decider.h"
#include "netproxy/dns_tunnel.h"
#include "netproxy/splice.h"
#include "netproxy/wire/http_head.h"

namespace cordon::netproxy {

namespace {

using namespace asio::experimental::awaitable_operators;

constexpr size_t kMaxAddresses = 16;

Decided refuse(Context& ctx, const Destination& dest, Failure f, std::string message,
               const std::string& rule, const std::string& address = {},
               const nlohmann::json& more = nlohmann::json::object()) {
  nlohmann::json ev = {{"name", dest.host},     {"port", dest.port}, {"mode", dest.mode},
                       {"decision", "deny"},    {"rule", rule},      {"reason", message},
                       {"decided_by", "policy"}};
  if (!address.empty()) {
    ev["address"] = address;
  }
  if (!dest.sni.empty()) {
    ev["sni"] = dest.sni;
  }
  if (!dest.client.empty()) {
    ev["client"] = dest.client;
  }
  auto add_if_set = [&ev](const char* key, const std::string& value) {
    if (!value.empty()) {
      ev[key] = value;
    }
  };
  add_if_set("original_dst", dest.original_dst);
  add_if_set("peek", dest.peek);
  add_if_set("host_header", dest.host_header);
  add_if_set("method", dest.method);
  add_if_set("url", dest.url);
  for (auto& [k, v] : more.items()) {
    ev[k] = v;
  }
  ctx.emit("net.refused", std::move(ev));
  Decided o;
  o.failure = f;
  o.message = std::move(message);
  return o;
}

Opened failed(Decided d) {
  Opened o;
  o.failure = d.failure;
  o.message = std::move(d.message);
  return o;
}

asio::awaitable<std::pair<std::vector<policy::IpAddress>, std::string>> host_resolve(
    Context& ctx, const std::string& name) {
  // getaddrinfo on Asio's internal resolver thread: the io_context thread never blocks on DNS.
  tcp::resolver resolver(ctx.io);
  auto [ec, results] = co_await resolver.async_resolve(name, "", use_nothrow);
  std::vector<policy::IpAddress> out;
  if (ec) {
    co_return std::make_pair(out, ec.message());
  }
  for (const auto& r : results) {
    auto ip = from_asio(r.endpoint().address());
    if (std::find(out.begin(), out.end(), ip) == out.end() && out.size() < kMaxAddresses) {
      out.push_back(ip);
    }
  }
  co_return std::make_pair(out, std::string());
}

// Connects `sock` (opened here, non-blocking) to `ep` within `timeout`. To a nearby host (loopback
// above all) the handshake is usually complete by the time connect(2) returns EINPROGRESS: a
// zero-timeout poll(2) sees that without a timer, a reactor round trip and a coroutine switch.
// Otherwise it waits for writability or the deadline (beast::error::timeout). Either way the
// result is the handshake's, from SO_ERROR.
asio::awaitable<boost::system::error_code> connect_within(Context& ctx, tcp::socket& sock,
                                                          const tcp::endpoint& ep, Millis timeout) {
  boost::system::error_code ec;
  sock.open(ep.protocol(), ec);
  if (!ec) {
    sock.non_blocking(true, ec);
  }
  if (ec) {
    co_return ec;
  }
  const int fd = sock.native_handle();
  if (::connect(fd, ep.data(), static_cast<socklen_t>(ep.size())) == 0) {
    co_return ec;
  }
  if (errno != EINPROGRESS && errno != EINTR) {
    co_return boost::system::error_code(errno, boost::system::system_category());
  }
  pollfd pfd{fd, POLLOUT, 0};
  const int ready = ::poll(&pfd, 1, 0);
  if (ready == 1 && pfd.revents == POLLOUT) {
    co_return ec;  // writable and neither POLLERR nor POLLHUP: connected
  }
  if (ready <= 0) {
    asio::steady_timer timer(ctx.io);
    timer.expires_after(timeout);
    auto r = co_await (sock.async_wait(tcp::socket::wait_write, use_nothrow) ||
                       timer.async_wait(use_nothrow));
    if (r.index() == 1) {
      co_return beast::error::timeout;
    }
    if (auto [wec] = std::get<0>(r); wec) {
      co_return wec;
    }
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    err = errno;
  }
  co_return boost::system::error_code(err, boost::system::system_category());
}

}  // namespace

asio::awaitable<Decided> decide_upstream(Context& ctx, Destination dest) {
  const auto& p = ctx.policy;
  std::string name = policy::normalize_host(dest.host);
  if (name.empty()) {
    co_return refuse(ctx, dest, Failure::Policy,
                     "cordon: \"" + dest.host + "\" is not a valid host name", "network");
  }
  dest.host = name;
  std::vector<policy::IpAddress> addrs;
  std::string first_bad_rule, first_bad_addr;
  const auto name_ip = policy::IpAddress::parse(name);
  // The one decision on the destination as named (a raw address: only IP/CIDR rules can allow
  // it); a front end that already decided (transparent, choosing among names) passes it in.
  policy::NetDecision d = dest.decided ? *dest.decided : p.decide_destination(name, dest.port);
  DecisionSource source = DecisionSource::Policy;
  if (ctx.decider != nullptr && decider_may_answer(d)) {
    // The connection is held (the program sees a slow connect) until the decider answers; the
    // checks below (addresses, caps) still apply to what it allows.
    DeciderQuestion q;
    q.host = name;
    q.port = dest.port;
    q.mode = dest.mode;
    q.client = dest.client;
    q.sni = dest.sni;
    q.address = name_ip ? name_ip->to_string() : std::string();
    q.method = dest.method;
    q.path = dest.path;
    if (q.path.empty() && !dest.url.empty()) {
      std::string h;
      uint16_t pt = 0;
      wire::parse_absolute_http(dest.url, &h, &pt, &q.path);
    }
    if (q.method.empty()) {
      q.path.clear();
    }
    auto v = co_await ctx.decider->ask(std::move(q));
    source = v.source;
    if (v.allow) {
      d = {true, std::string(source_name(v.source)) + (v.session ? " (session)" : " (once)")};
    } else {
      std::string msg = refusal_message(name, dest.port, d.decision());
      if (!answered(v.source)) {
        msg += " (" + v.reason + ")";
      } else if (!v.reason.empty()) {
        msg += ": " + v.reason;
      }
      nlohmann::json more = {{"decided_by", source_name(source)}};
      if (answered(v.source) && !v.reason.empty()) {
        more["decider_reason"] = v.reason;
      }
      co_return refuse(ctx, dest, Failure::Policy, std::move(msg), d.rule,
                       name_ip ? name_ip->to_string() : std::string(), more);
    }
  }
  if (!d.allow) {
    co_return refuse(ctx, dest, Failure::Policy, refusal_message(name, dest.port, d.decision()),
                     d.rule, name_ip ? name_ip->to_string() : std::string());
  }
  if (!name_ip && !dest.fixed_addr && allowed_by_any_name(d)) {
    // Resolving it would carry the name to its zone's servers: the same check as a lookup's.
    if (auto why = tunnel_shaped(name)) {
      co_return refuse(ctx, dest, Failure::Policy,
                       "cordon: " + name + " is refused: only \"*\" allows it, and it has " + *why +
                           ", as a DNS tunnel's names do",
                       kTunnelRule);
    }
  }
  if (name_ip && !dest.fixed_addr) {
    addrs.push_back(*name_ip);
  } else {
    std::vector<policy::IpAddress> candidates;
    bool pinned = false;
    if (dest.fixed_addr) {
      candidates.push_back(*dest.fixed_addr);
      pinned = dest.fixed_pinned;
    } else if (auto* pins = p.pins(name)) {
      candidates = *pins;
      pinned = true;
    } else {
      auto [resolved, err] = co_await host_resolve(ctx, name);
      if (resolved.empty()) {
        co_return refuse(
            ctx, dest, Failure::Resolve,
            "cordon: " + name + " does not resolve (" + (err.empty() ? "no addresses" : err) + ")",
            d.rule);
      }
      candidates = std::move(resolved);
    }
    // Resolved once; every address checked; only checked addresses are dialled.
    for (const auto& ip : candidates) {
      auto ad = p.check_resolved(name, ip, dest.port, pinned, d);
      if (ad.allow) {
        addrs.push_back(ip);
      } else if (first_bad_rule.empty()) {
        first_bad_rule = ad.rule;
        first_bad_addr = ip.to_string();
      }
    }
    if (addrs.empty()) {
      std::string msg = "cordon: " + name + ":" + std::to_string(dest.port) + " resolves to " +
                        first_bad_addr + ", refused by " + first_bad_rule;
      co_return refuse(ctx, dest, Failure::Policy, msg, first_bad_rule, first_bad_addr);
    }
  }

  Decided out;
  out.addrs = std::move(addrs);
  out.rule = d.rule;
  out.source = source_name(source);
  out.raw_ip = name_ip.has_value();
  out.dest = std::move(dest);
  co_return out;
}

asio::awaitable<Opened> dial_upstream(Context& ctx, Decided dc) {
  const auto& p = ctx.policy;
  const Destination& dest = dc.dest;
  const std::string& name = dest.host;
  Opened out;
  if (auto cap = ctx.caps.admit(name, &out.up.slot)) {
    ctx.emit("limit.hit", {{"cap", cap->cap},
                           {"limit", cap->limit},
                           {"name", name},
                           {"port", dest.port},
                           {"mode", dest.mode}});
    co_return failed(
        refuse(ctx, dest, Failure::Cap, cap->message, cap->cap, {}, {{"cap", cap->cap}}));
  }

  tcp::socket sock(ctx.io);
  boost::system::error_code last;
  for (const auto& ip : dc.addrs) {
    auto ec = co_await connect_within(ctx, sock, tcp::endpoint(to_asio(ip), dest.port),
                                      p.connect_timeout);
    if (!ec) {
      out.up.addr = ip;
      last = {};
      break;
    }
    last = ec;
    boost::system::error_code ignored;
    sock.close(ignored);
  }
  if (last || !sock.is_open()) {
    bool refused = last == asio::error::connection_refused;
    std::string why = last == beast::error::timeout
                          ? "timed out after " + std::to_string(p.connect_timeout.count()) + " ms"
                          : last.message();
    co_return failed(refuse(ctx, dest, refused ? Failure::ConnectRefused : Failure::Unreachable,
                            "cordon: connecting to " + name + ":" + std::to_string(dest.port) +
                                " (" + dc.addrs.front().to_string() + "): " + why,
                            dc.rule, dc.addrs.front().to_string()));
  }
  boost::system::error_code nodelay_ec;
  sock.set_option(tcp::no_delay(true), nodelay_ec);
  out.up.mode = dest.mode;
  out.up.name = dc.name();
  out.up.sni = dest.sni;
  out.up.client = dest.client;
  out.up.port = dest.port;
  out.up.rule = std::move(dc.rule);
  out.up.source = dc.source;
  out.up.start = Clock::now();
  out.up.owner = RecordOwner(&ctx);
  out.socket.emplace(std::move(sock));
  co_return out;
}

asio::awaitable<Opened> open_upstream(Context& ctx, Destination dest) {
  auto decided = co_await decide_upstream(ctx, std::move(dest));
  if (decided.failure != Failure::None) {
    co_return failed(std::move(decided));
  }
  co_return co_await dial_upstream(ctx, std::move(decided));
}

Upstream::~Upstream() {
  if (Context* ctx = owner.get()) {
    finish_upstream(*ctx, *this);
  }
}

void finish_upstream(Context& ctx, Upstream& up) {
  if (up.finished) {
    return;
  }
  up.finished = true;
  if (ctx.stopped && up.end == "closed") {
    up.end = "stopped";
  }
  up.slot.release();
  if (!ctx.events.enabled()) {
    return;  // nothing to log: skip building the per-connection event
  }
  const int64_t ms = std::chrono::duration_cast<Millis>(Clock::now() - up.start).count();
  const std::string address = up.addr.to_string();
  EventLine ev("net.connect");
  ev.add("name", up.name)
      .add("address", address)
      .add("port", up.port)
      .add("mode", up.mode)
      .add("decision", "allow")
      .add("rule", up.rule)
      .add("decided_by", up.source)
      .add("bytes_out", up.bytes_out)
      .add("bytes_in", up.bytes_in)
      .add("duration_ms", ms)
      .add("end", up.end);
  if (!up.sni.empty()) {
    ev.add("sni", up.sni);
  }
  if (!up.client.empty()) {
    ev.add("client", up.client);
  }
  ctx.emit(ev);
}

namespace {

// One timer for every watched connection's idle timeout (not one watchdog per connection or
// operation): ticks while connections are watched, so one is closed between its limit and its
// limit + one tick after its last byte.
asio::awaitable<void> idle_sweeper(Context& ctx) {
  const Millis shortest = ctx.policy.idle_timeout.count() > 0
                              ? std::min(ctx.policy.idle_timeout, ctx.handshake_timeout)
                              : ctx.handshake_timeout;
  const auto tick = std::min<Millis>(Millis(1000), std::max<Millis>(Millis(50), shortest / 4));
  asio::steady_timer timer(ctx.io);
  while (!ctx.watched.empty()) {
    timer.expires_after(tick);
    auto [ec] = co_await timer.async_wait(use_nothrow);
    if (ec) {
      break;
    }
    const auto now = Clock::now();
    for (auto it = ctx.watched.begin(); it != ctx.watched.end();) {
      IdleWatch* w = *it++;  // expire() does not unlink; advance first all the same
      if (now - w->last >= w->limit) {
        w->expire();
      }
    }
  }
  ctx.sweeping = false;
}

}  // namespace

IdleWatchGuard::IdleWatchGuard(Context& ctx, IdleWatch& w)
    : ctx_(ctx), pos_(ctx.watched.insert(ctx.watched.end(), &w)) {
  if (!ctx.sweeping) {
    ctx.sweeping = true;
    asio::co_spawn(ctx.io, idle_sweeper(ctx),
                   [](std::exception_ptr e) { log_coroutine_end("idle sweeper", e); });
  }
}

// A decided connection after its front end is done: the two sockets and the connection's record,
// shared by the two direction coroutines; the last one to finish destroys it, which logs
// net.connect. Nothing else of the handshake stays alive while the tunnel idles.
struct Tunnel final : IdleWatch {
  Tunnel(Context& c, tcp::socket cl, tcp::socket u, Upstream record, std::string early)
      : ctx(c),
        client(std::move(cl)),
        upstream(std::move(u)),
        up(std::move(record)),
        leftover(std::move(early)) {
    limit = ctx.policy.idle_timeout;
    if (limit.count() > 0) {
      watch.emplace(ctx, *this);
    }
  }
  ~Tunnel() {
    watch.reset();
    finish_upstream(ctx, up);
  }
  Tunnel(const Tunnel&) = delete;
  Tunnel& operator=(const Tunnel&) = delete;

  void expire() override { tear_down("idle_timeout"); }

  // Ends both directions at once (reset, cap, idle): the other pump's pending wait completes.
  void tear_down(const std::string& why) {
    if (torn_down) {
      return;
    }
    torn_down = true;
    if (up.end == "closed") {
      up.end = why;
    }
    boost::system::error_code ec;
    client.shutdown(tcp::socket::shutdown_both, ec);
    upstream.shutdown(tcp::socket::shutdown_both, ec);
    client.close(ec);
    upstream.close(ec);
  }

  Context& ctx;
  ClientGuard guard{ctx};
  tcp::socket client;
  tcp::socket upstream;
  Upstream up;
  std::string leftover;  // sent upstream first, then released
  bool torn_down = false;
  std::optional<IdleWatchGuard> watch;  // under the idle sweeper when idle_timeout is set
};

namespace {

// One direction of a tunnel: splice until EOF (passed on as a half-close), a budget or an error.
// No buffer lives in this frame while the tunnel idles.
asio::awaitable<void> direction(std::shared_ptr<Tunnel> t, bool outbound) {
  Context& ctx = t->ctx;
  tcp::socket& from = outbound ? t->client : t->upstream;
  tcp::socket& to = outbound ? t->upstream : t->client;
  if (outbound && !t->leftover.empty()) {
    uint64_t ok = ctx.caps.take_out(t->leftover.size());
    auto [ec, n] =
        co_await asio::async_write(to, asio::buffer(t->leftover.data(), ok), use_nothrow);
    t->up.bytes_out += n;
    const bool cut = ok < t->leftover.size();
    std::string().swap(t->leftover);
    if (ec || cut) {
      t->tear_down(ec ? "reset" : ctx.caps.bytes_out_refusal().cap);
      co_return;
    }
  }
  auto end = co_await pump(ctx, from, to, std::nullopt, outbound,
                           {outbound ? &t->up.bytes_out : &t->up.bytes_in, &t->last});
  switch (end) {
    case PumpEnd::Eof: {
      boost::system::error_code ignored;
      to.shutdown(tcp::socket::shutdown_send, ignored);  // pass the half-close on
      break;
    }
    case PumpEnd::Budget: {
      auto cap = outbound ? ctx.caps.bytes_out_refusal() : ctx.caps.bytes_in_refusal();
      ctx.emit("limit.hit", {{"cap", cap.cap},
                             {"limit", cap.limit},
                             {"name", t->up.name},
                             {"address", t->up.addr.to_string()},
                             {"port", t->up.port},
                             {"reason", cap.message}});
      t->tear_down(cap.cap);
      break;
    }
    case PumpEnd::Limit:  // no limit given: not reached
    case PumpEnd::ReadError:
    case PumpEnd::WriteError:
      t->tear_down(t->torn_down ? t->up.end : "reset");
      break;
  }
}

}  // namespace

void start_tunnel(Context& ctx, tcp::socket client, tcp::socket upstream, Upstream up,
                  std::string leftover) {
  auto t = std::make_shared<Tunnel>(ctx, std::move(client), std::move(upstream), std::move(up),
                                    std::move(leftover));
  auto done = [](std::exception_ptr e) { log_coroutine_end("tunnel", e); };
  asio::co_spawn(ctx.io, direction(t, true), done);
  asio::co_spawn(ctx.io, direction(std::move(t), false), done);
}

}  // namespace cordon::netproxy
