// Upstream connections: one decision path for every front end, then the relay.
#include "netproxy/upstream.h"

#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "netproxy/decide.h"

namespace cordon::netproxy {

using namespace asio::experimental::awaitable_operators;

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
  policy::Decision d;
  std::string first_bad_rule, first_bad_addr;
  const auto name_ip = policy::IpAddress::parse(name);
  if (name_ip && !dest.fixed_addr) {
    const auto* ip = &*name_ip;
    // A raw address with no name behind it: only IP/CIDR rules can allow it.
    d = p.decide_ip(*ip, dest.port);
    if (!d.allow) {
      co_return refuse(ctx, dest, Failure::Policy, refusal_message(name, dest.port, d), d.rule,
                       ip->to_string());
    }
    addrs.push_back(*ip);
  } else {
    d = decide_name(p, name, dest.port);
    if (!d.allow) {
      co_return refuse(ctx, dest, Failure::Policy, refusal_message(name, dest.port, d), d.rule);
    }
    std::vector<policy::IpAddress> candidates;
    bool pinned = false;
    if (dest.fixed_addr) {
      candidates.push_back(*dest.fixed_addr);
      pinned = dest.fixed_pinned;
    } else if (auto* pins = pinned_addresses(p, name)) {
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
      auto ad = check_address(p, name, ip, dest.port, pinned, d);
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
  auto ms = std::chrono::duration_cast<Millis>(Clock::now() - up.start).count();
  nlohmann::json ev = {{"name", up.name},           {"address", up.addr.to_string()},
                       {"port", up.port},           {"mode", up.mode},
                       {"decision", "allow"},       {"rule", up.rule},
                       {"bytes_out", up.bytes_out}, {"bytes_in", up.bytes_in},
                       {"duration_ms", ms},         {"end", up.end}};
  if (!up.sni.empty()) {
    ev["sni"] = up.sni;
  }
  ctx.emit("net.connect", std::move(ev));
}

namespace {

struct RelayState {
  tcp::socket& client;
  tcp::socket& upstream;
  Upstream& up;
  Clock::time_point last = Clock::now();
  bool torn_down = false;

  // Ends both directions at once (reset, cap, idle): the other transfer's pending read completes.
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
};

asio::awaitable<void> transfer(Context& ctx, tcp::socket& from, tcp::socket& to, RelayState& st,
                               bool outbound) {
  // One bounded buffer per direction: a slow reader stops us reading (backpressure).
  std::array<char, 16 * 1024> buf;
  for (;;) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), use_nothrow);
    if (ec) {
      if (ec == asio::error::eof) {
        boost::system::error_code ignored;
        to.shutdown(tcp::socket::shutdown_send, ignored);  // pass the half-close on
      } else {
        st.tear_down(st.torn_down ? st.up.end : "reset");
      }
      co_return;
    }
    st.last = Clock::now();
    uint64_t ok = outbound ? ctx.caps.take_out(n) : ctx.caps.take_in(n);
    if (ok > 0) {
      auto [wec, w] = co_await asio::async_write(to, asio::buffer(buf.data(), ok), use_nothrow);
      (outbound ? st.up.bytes_out : st.up.bytes_in) += w;
      if (wec) {
        st.tear_down("reset");
        co_return;
      }
    }
    if (ok < n) {
      auto cap = outbound ? ctx.caps.bytes_out_refusal() : ctx.caps.bytes_in_refusal();
      ctx.emit("limit.hit", {{"cap", cap.cap},
                             {"limit", cap.limit},
                             {"name", st.up.name},
                             {"address", st.up.addr.to_string()},
                             {"port", st.up.port},
                             {"reason", cap.message}});
      st.tear_down(cap.cap);
      co_return;
    }
    st.last = Clock::now();
  }
}

asio::awaitable<void> watchdog(Context& ctx, RelayState& st) {
  auto idle = ctx.policy.idle_timeout;
  asio::steady_timer timer(ctx.io);
  for (;;) {
    timer.expires_at(st.last + idle);
    auto [ec] = co_await timer.async_wait(use_nothrow);
    if (ec) {
      co_return;  // the transfers finished first
    }
    if (Clock::now() >= st.last + idle) {
      st.tear_down("idle_timeout");
      co_return;
    }
  }
}

}  // namespace

asio::awaitable<void> relay(Context& ctx, tcp::socket& client, tcp::socket& upstream, Upstream& up,
                            asio::const_buffer leftover) {
  RelayState st{client, upstream, up};
  if (leftover.size() > 0) {
    uint64_t ok = ctx.caps.take_out(leftover.size());
    auto [ec, n] =
        co_await asio::async_write(upstream, asio::buffer(leftover.data(), ok), use_nothrow);
    up.bytes_out += n;
    if (ec || ok < leftover.size()) {
      st.tear_down(ec ? "reset" : ctx.caps.bytes_out_refusal().cap);
      co_return;
    }
  }
  if (ctx.policy.idle_timeout.count() > 0) {
    co_await (
        (transfer(ctx, client, upstream, st, true) && transfer(ctx, upstream, client, st, false)) ||
        watchdog(ctx, st));
  } else {
    co_await (transfer(ctx, client, upstream, st, true) &&
              transfer(ctx, upstream, client, st, false));
  }
}

}  // namespace cordon::netproxy
