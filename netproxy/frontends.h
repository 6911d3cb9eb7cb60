// The connection front ends: explicit (HTTP proxy + SOCKS5 on one port) and transparent.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "netproxy/context.h"

namespace cordon::netproxy {

// Explicit proxy port: sniffs the first byte (0x05 = SOCKS5, anything else = HTTP proxy).
asio::awaitable<void> serve_explicit(Context& ctx, tcp::socket client);

// HTTP proxy (absolute-form requests, keep-alive, CONNECT); `buf` holds bytes already read.
asio::awaitable<void> serve_http_proxy(Context& ctx, beast::tcp_stream client,
                                       beast::flat_buffer buf);

struct Decided;
// Plaintext HTTP captured transparently, after the destination was decided: every request is
// parsed, its Host checked against the decided name, judged (rules, credentials, a body judged
// whole), forwarded, and logged as net.http. The upstream is dialled when the first request has
// passed its judges, so a refused first request sends no packet toward the destination; the
// connection's net.connect is written at the end.
asio::awaitable<void> serve_http_transparent(Context& ctx, tcp::socket client,
                                             beast::flat_buffer buf, Decided decided);

// SOCKS5 (no auth, CONNECT); `buf` holds bytes already read.
asio::awaitable<void> serve_socks5(Context& ctx, beast::tcp_stream client, beast::flat_buffer buf);

// A connection redirected by netfilter: original destination, peeked SNI/Host, name map.
// `peer` is the client's address as accept(2) returned it.
asio::awaitable<void> serve_transparent(Context& ctx, tcp::socket client, tcp::endpoint peer);

// The NFLOG socket (nflog.h): one net.refused per dropped packet, at most `per_second` a second,
// the rest summarised.
asio::awaitable<void> serve_nflog(Context& ctx, asio::posix::stream_descriptor& sock,
                                  uint32_t per_second);

}  // namespace cordon::netproxy
