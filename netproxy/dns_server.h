// The sandbox's DNS responder: allowed names answered from network.resolve or the host resolver,
// everything else NXDOMAIN without any upstream query.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/udp.hpp>
#include <span>
#include <vector>

#include "netproxy/context.h"

namespace cordon::netproxy {

constexpr uint32_t kDnsTtl = 30;  // seconds; short so a policy or pin change is seen quickly

// Answers one query message; empty result = send nothing (dropped). Emits net.dns.
asio::awaitable<std::vector<uint8_t>> answer_dns(Context& ctx, std::span<const uint8_t> query,
                                                 size_t max_reply);

asio::awaitable<void> serve_dns_udp(Context& ctx, asio::ip::udp::socket& sock);
asio::awaitable<void> serve_dns_tcp_client(Context& ctx, tcp::socket client);

}  // namespace cordon::netproxy
