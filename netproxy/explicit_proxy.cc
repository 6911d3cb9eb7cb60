// Explicit proxy port: one listening socket serves both SOCKS5 and HTTP proxy clients.
#include <spdlog/spdlog.h>

#include "netproxy/frontends.h"

namespace cordon::netproxy {

asio::awaitable<void> serve_explicit(Context& ctx, tcp::socket client) {
  beast::tcp_stream stream(std::move(client));
  beast::flat_buffer buf;
  stream.expires_after(ctx.handshake_timeout);
  auto [ec, n] = co_await stream.async_read_some(buf.prepare(512), use_nothrow);
  if (ec || n == 0) {
    co_return;
  }
  buf.commit(n);
  auto first = static_cast<const uint8_t*>(buf.data().data())[0];
  if (first == 0x05) {
    co_await serve_socks5(ctx, std::move(stream), std::move(buf));
  } else {
    co_await serve_http_proxy(ctx, std::move(stream), std::move(buf));
  }
}

}  // namespace cordon::netproxy
