// Upstream connections: one decision path for every front end, then the relay.
#include "netproxy/upstream.h"

#include <spdlog/spdlog.h>

#include <list>
#include <memory>


#include "netproxy/decide.h"
#include "netproxy/splice.h"

namespace cordon::netproxy {

namespace {

constexpr size_t kMaxAddresses = 16;

Opened refuse(Context& ctx, const Destination& dest, Failure f, std::string message,
              const std::string& rule, const std::string& address = {},
              const nlohmann::json& more = nlohmann::json::object()) {
  nlohmann::json ev = {{"name", dest.host},  {"port", dest.port}, {"mode", dest.mode},
                       {"decision", "deny"}, {"rule", rule},      {"reason", message}};
  if (!address.empty()) {
    ev["address"] = address;
  }
  if (!dest.sni.empty()) {
    ev["sni"] = dest.sni;
  }
  if (!dest.client.empty()) {
    ev["client"] = dest.client;
  }
  for (auto& [k, v] : dest.extra.items()) {
    ev[k] = v;
  }
  for (auto& [k, v] : more.items()) {
    ev[k] = v;
  }
  ctx.emit("net.refused", std::move(ev));
  Opened o;
  o.failure = f;
  o.message = std::move(message);
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

}  // namespace

asio::awaitable<Opened> open_upstream(Context& ctx, Destination dest) {
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
  const policy::NetDecision d =
      dest.decided ? *dest.decided : p.decide_destination(name, dest.port);
  if (!d.allow) {
    co_return refuse(ctx, dest, Failure::Policy, refusal_message(name, dest.port, d.decision()),
                     d.rule, name_ip ? name_ip->to_string() : std::string());
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

  Opened out;
  if (auto cap = ctx.caps.admit(name, &out.up.slot)) {
    ctx.emit("limit.hit", {{"cap", cap->cap},
                           {"limit", cap->limit},
                           {"name", name},
                           {"port", dest.port},
                           {"mode", dest.mode}});
    co_return refuse(ctx, dest, Failure::Cap, cap->message, cap->cap, {}, {{"cap", cap->cap}});
  }

  beast::tcp_stream stream(ctx.io);
  boost::system::error_code last;
  for (const auto& ip : addrs) {
    stream.expires_after(p.connect_timeout);
    auto [ec] = co_await stream.async_connect(tcp::endpoint(to_asio(ip), dest.port), use_nothrow);
    if (!ec) {
      stream.expires_never();
      out.up.addr = ip;
      last = {};
      break;
    }
    last = ec;
    stream.close();
  }
  if (last || !stream.socket().is_open()) {
    bool refused = last == asio::error::connection_refused;
    std::string why = last == beast::error::timeout
                          ? "timed out after " + std::to_string(p.connect_timeout.count()) + " ms"
                          : last.message();
    co_return refuse(ctx, dest, refused ? Failure::ConnectRefused : Failure::Unreachable,
                     "cordon: connecting to " + name + ":" + std::to_string(dest.port) + " (" +
                         addrs.front().to_string() + "): " + why,
                     d.rule, addrs.front().to_string());
  }
  stream.socket().set_option(tcp::no_delay(true));
  out.up.mode = dest.mode;
  out.up.name = name_ip ? std::string() : name;
  out.up.sni = dest.sni;
  out.up.client = dest.client;
  out.up.port = dest.port;
  out.up.rule = d.rule;
  out.up.start = Clock::now();
  out.stream.emplace(std::move(stream));
  co_return out;
}

void finish_upstream(Context& ctx, Upstream& up) {
  if (up.finished) {
    return;
  }
  up.finished = true;
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

// A decided connection after its front end is done: the two sockets and the connection's record,
// shared by the two direction coroutines; the last one to finish destroys it, which logs
// net.connect. Nothing else of the handshake stays alive while the tunnel idles.
struct Tunnel {
  Tunnel(Context& c, tcp::socket cl, tcp::socket u, Upstream record, std::string early)
      : ctx(c), client(std::move(cl)), upstream(std::move(u)), up(std::move(record)),
        leftover(std::move(early)) {
    pos = ctx.tunnels.insert(ctx.tunnels.end(), this);
  }
  ~Tunnel() {
    ctx.tunnels.erase(pos);
    finish_upstream(ctx, up);
  }
  Tunnel(const Tunnel&) = delete;
  Tunnel& operator=(const Tunnel&) = delete;

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
  Clock::time_point last = Clock::now();
  bool torn_down = false;
  std::list<Tunnel*>::iterator pos;
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
    auto [ec, n] = co_await asio::async_write(to, asio::buffer(t->leftover.data(), ok),
                                              use_nothrow);
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

// One timer for every tunnel's idle timeout (not one watchdog per tunnel): ticks while tunnels
// exist, so a tunnel is closed between idle_timeout and idle_timeout + one tick after its last
// byte.
asio::awaitable<void> idle_sweeper(Context& ctx) {
  const auto idle = ctx.policy.idle_timeout;
  const auto tick = std::min<Millis>(Millis(1000), std::max<Millis>(Millis(50), idle / 4));
  asio::steady_timer timer(ctx.io);
  while (!ctx.tunnels.empty()) {
    timer.expires_after(tick);
    auto [ec] = co_await timer.async_wait(use_nothrow);
    if (ec) {
      break;
    }
    const auto now = Clock::now();
    for (auto it = ctx.tunnels.begin(); it != ctx.tunnels.end();) {
      Tunnel* t = *it++;  // tear_down does not unlink; advance first all the same
      if (now - t->last >= idle) {
        t->tear_down("idle_timeout");
      }
    }
  }
  ctx.sweeping = false;
}

}  // namespace

void start_tunnel(Context& ctx, tcp::socket client, tcp::socket upstream, Upstream up,
                  std::string leftover) {
  auto t = std::make_shared<Tunnel>(ctx, std::move(client), std::move(upstream), std::move(up),
                                    std::move(leftover));
  auto done = [](std::exception_ptr e) { log_coroutine_end("tunnel", e); };
  asio::co_spawn(ctx.io, direction(t, true), done);
  asio::co_spawn(ctx.io, direction(std::move(t), false), done);
  if (ctx.policy.idle_timeout.count() > 0 && !ctx.sweeping) {
    ctx.sweeping = true;
    asio::co_spawn(ctx.io, idle_sweeper(ctx),
                   [](std::exception_ptr e) { log_coroutine_end("idle sweeper", e); });
  }
}

}  // namespace cordon::netproxy
