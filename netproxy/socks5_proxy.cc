// SOCKS5 front end: no-auth greeting, CONNECT by name / IPv4 / IPv6, RFC 1928 reply codes.
#include <spdlog/spdlog.h>

#include "netproxy/body_guard.h"
#include "netproxy/first_flight.h"
#include "netproxy/frontends.h"
#include "netproxy/inspect.h"
#include "netproxy/upstream.h"
#include "netproxy/wire/socks5.h"

namespace cordon::netproxy {

namespace {

// Reads until `parse` is no longer NeedMore; the handshake is tiny, so the buffer is bounded.
template <typename Parse>
asio::awaitable<bool> read_until_parsed(Context& ctx, beast::tcp_stream& s, beast::flat_buffer& buf,
                                        Parse parse) {
  for (int i = 0; i < 64; ++i) {
    auto d = buf.data();
    auto st = parse(std::span<const uint8_t>(static_cast<const uint8_t*>(d.data()), d.size()));
    if (st != wire::ParseStatus::NeedMore) {
      co_return true;
    }
    if (buf.size() >= 600) {
      co_return false;
    }
    s.expires_after(ctx.handshake_timeout);
    auto [ec, n] = co_await s.async_read_some(buf.prepare(600 - buf.size()), use_nothrow);
    if (ec) {
      co_return false;
    }
    buf.commit(n);
  }
  co_return false;
}

asio::awaitable<void> send(Context& ctx, beast::tcp_stream& s, const std::vector<uint8_t>& bytes) {
  s.expires_after(ctx.handshake_timeout);
  co_await asio::async_write(s, asio::buffer(bytes), use_nothrow);
}

std::span<const uint8_t> view(const beast::flat_buffer& b) {
  auto d = b.data();
  return {static_cast<const uint8_t*>(d.data()), d.size()};
}

}  // namespace

asio::awaitable<void> serve_socks5(Context& ctx, beast::tcp_stream client, beast::flat_buffer buf) {
  if (!co_await read_until_parsed(ctx, client, buf,
                                  [](auto d) { return wire::socks5::parse_greeting(d).status; })) {
    co_return;
  }
  auto greeting = wire::socks5::parse_greeting(view(buf));
  if (greeting.status != wire::ParseStatus::Done) {
    co_return;
  }
  buf.consume(greeting.size);
  if (!greeting.no_auth) {
    static const std::vector<uint8_t> kNoMethod{0x05, 0xff};  // no acceptable method
    co_await send(ctx, client, kNoMethod);
    co_return;
  }
  static const std::vector<uint8_t> kNoAuth{0x05, 0x00};
  co_await send(ctx, client, kNoAuth);
  if (!co_await read_until_parsed(ctx, client, buf,
                                  [](auto d) { return wire::socks5::parse_request(d).status; })) {
    co_return;
  }
  auto req = wire::socks5::parse_request(view(buf));
  if (req.status != wire::ParseStatus::Done) {
    auto reply = wire::socks5::make_reply(wire::socks5::kGeneralFailure);
    co_await send(ctx, client, reply);
    co_return;
  }
  buf.consume(req.size);
  Destination dest;
  dest.host = req.ip ? req.ip->to_string() : req.host;
  dest.port = req.port;
  dest.mode = "socks5";
  dest.client = ctx.client_of(client.socket());
  if (req.error) {
    ctx.emit("net.refused", {{"name", dest.host},
                             {"port", dest.port},
                             {"mode", "socks5"},
                             {"decision", "deny"},
                             {"rule", "socks5"},
                             {"client", dest.client},
                             {"reason", *req.error == wire::socks5::kCommandNotSupported
                                            ? "command not supported"
                                            : "address type not supported"},
                             {"socks5_reply", int{*req.error}}});
    auto reply = wire::socks5::make_reply(*req.error);
    co_await send(ctx, client, reply);
    co_return;
  }
  // A name carrying a secret's form is refused before it is resolved or dialled.
  if (!req.ip &&
      refuse_secret_in_name(ctx, {dest.host, dest.port, dest.client, "CONNECT", "", "socks5"},
                            dest.host, "socks5")) {
    auto reply = wire::socks5::make_reply(wire::socks5::kNotAllowed);
    co_await send(ctx, client, reply);
    co_return;
  }
  auto opened = co_await open_upstream(ctx, std::move(dest));
  if (opened.failure != Failure::None) {
    wire::socks5::Reply code = wire::socks5::kGeneralFailure;
    switch (opened.failure) {
      case Failure::Policy:
      case Failure::Cap:
        code = wire::socks5::kNotAllowed;
        break;
      case Failure::Resolve:
      case Failure::Unreachable:
        code = wire::socks5::kHostUnreachable;
        break;
      case Failure::ConnectRefused:
        code = wire::socks5::kConnectionRefused;
        break;
      case Failure::None:
        break;
    }
    auto reply = wire::socks5::make_reply(code);
    co_await send(ctx, client, reply);
    co_return;
  }
  beast::error_code ec;
  auto local = opened.socket->local_endpoint(ec);
  std::optional<policy::IpAddress> bound;
  if (!ec) {
    bound = from_asio(local.address());
  }
  auto reply = wire::socks5::make_reply(wire::socks5::kSucceeded, bound, ec ? 0 : local.port());
  co_await send(ctx, client, reply);
  if (should_inspect(ctx, opened.up)) {
    co_await serve_inspected(ctx, client.release_socket(), std::move(*opened.socket),
                             std::move(opened.up), take_leftover(buf));
    co_return;
  }
  start_named_tunnel(ctx, client.release_socket(), std::move(*opened.socket), std::move(opened.up),
                     take_leftover(buf));
}

}  // namespace cordon::netproxy
