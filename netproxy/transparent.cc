// Transparent front end: connections netfilter REDIRECTed inside the sandbox's namespace. Decides
// on the name the sandbox resolved the address from, cross-checked with the peeked SNI / Host.
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cstring>

#include "netproxy/decide.h"
#include "netproxy/first_flight.h"
#include "netproxy/frontends.h"
#include "netproxy/inspect.h"
#include "netproxy/upstream.h"

namespace cordon::netproxy {

namespace {

// From <linux/netfilter_ipv4.h> / <linux/netfilter_ipv6/ip6_tables.h>, which clash with the libc
// socket headers when included together.
constexpr int kSoOriginalDst = 80;
constexpr int kIp6tSoOriginalDst = 80;

struct OriginalDst {
  policy::IpAddress ip;
  uint16_t port = 0;
};

// The destination the sandbox dialled before REDIRECT rewrote it. Tries IPv4 first (which also
// answers for v4 connections accepted on a dual-stack socket), then IPv6.
std::optional<OriginalDst> original_dst(int fd) {
  sockaddr_in v4{};
  socklen_t len = sizeof v4;
  if (getsockopt(fd, SOL_IP, kSoOriginalDst, &v4, &len) == 0 && v4.sin_family == AF_INET) {
    return OriginalDst{policy::IpAddress::from_v4(ntohl(v4.sin_addr.s_addr)), ntohs(v4.sin_port)};
  }
  sockaddr_in6 v6{};
  len = sizeof v6;
  if (getsockopt(fd, SOL_IPV6, kIp6tSoOriginalDst, &v6, &len) == 0 && v6.sin6_family == AF_INET6) {
    uint8_t b[16];
    std::memcpy(b, &v6.sin6_addr, 16);
    return OriginalDst{policy::IpAddress::from_v6_bytes(b), ntohs(v6.sin6_port)};
  }
  return std::nullopt;
}

// After the peek: decide, open the upstream (plain HTTP: after its first request is judged), serve.
// A coroutine of its own so that its state (destination, upstream, refusal text) takes memory only
// once the first flight is in: while connections wait in the peek (up to peek_timeout, a
// server-speaks-first client for all of it), each holds the peek's state alone.
asio::awaitable<void> decide_and_serve(Context& ctx, tcp::socket& client, const tcp::endpoint& peer,
                                       const OriginalDst& orig, const FirstFlight& peeked,
                                       beast::flat_buffer& buf) {
  tcp::socket& s = client;
  const std::string orig_text = orig.ip.to_string();
  auto entries = ctx.names.lookup(orig.ip);

  Destination dest;
  dest.port = orig.port;
  dest.mode = "transparent";
  dest.client = ctx.client_of(peer);
  dest.sni = peeked.kind == "tls" ? peeked.claimed : std::string();
  dest.original_dst = orig_text;
  dest.peek = peeked.kind;
  if (peeked.kind == "http") {
    dest.host_header = peeked.claimed;
    dest.method = peeked.method;  // a refused plain-HTTP request still counts as one (log --net)
    dest.path = peeked.target;
  }

  if (unreadable_first_flight(peeked)) {
    co_await refuse_unreadable_first_flight(
        ctx, s, peeked, {orig_text, orig.port, dest.client, "", "", "transparent"});
    co_return;
  }
  // A secret in the SNI or Host: refused before the name is matched or anything dialled (a
  // name carrying a secret is refused toward every host, so this needs no decided host).
  if (peeked.kind != "opaque" &&
      co_await refuse_secret_in_first_flight(ctx, s, peeked, buf,
                                             {peeked.claimed.empty() ? orig_text : peeked.claimed,
                                              orig.port, dest.client, "", "", "transparent"})) {
    co_return;
  }
  if (!entries.empty()) {
    const NameMap::Entry* chosen = nullptr;
    if (!peeked.claimed.empty() && !peeked.claimed_raw_ip) {
      for (const auto& e : entries) {
        if (e.name == peeked.claimed) {
          chosen = &e;
          break;
        }
      }
      if (chosen == nullptr) {
        // The address came from another name's answer: a fronted or misdirected request.
        std::string msg = "cordon: " + std::string(peeked.kind == "tls" ? "TLS SNI" : "Host") +
                          " \"" + peeked.claimed + "\" does not match " + entries.front().name +
                          ", the name " + orig_text + " was resolved from (domain fronting)";
        nlohmann::json ev = {{"name", peeked.claimed}, {"address", orig_text},
                             {"port", orig.port},      {"mode", "transparent"},
                             {"decision", "deny"},     {"rule", "network (name mismatch)"},
                             {"decided_by", "policy"}, {"resolved_name", entries.front().name},
                             {"client", dest.client},  {"peek", peeked.kind},
                             {"reason", msg}};
        if (!peeked.method.empty()) {
          ev["method"] = peeked.method;
        }
        ctx.emit("net.refused", std::move(ev));
        co_await refuse_first_flight(s, peeked, msg);
        co_return;
      }
    } else {
      // No claim (server-speaks-first, opaque, or an IP literal in Host): decide on the name the
      // address came from; prefer one the policy allows on this port. That decision is the one
      // open_upstream uses: the name is not decided twice.
      for (const auto& e : entries) {
        auto d = ctx.policy.decide_destination(e.name, orig.port);
        if (d.allow || chosen == nullptr) {
          chosen = &e;
          dest.decided = std::move(d);
        }
        if (dest.decided->allow) {
          break;
        }
      }
    }
    dest.host = chosen->name;
    dest.fixed_addr = chosen->real;
    const auto* pins = ctx.policy.pins(chosen->name);
    dest.fixed_pinned =
        pins != nullptr && std::find(pins->begin(), pins->end(), chosen->real) != pins->end();
  } else {
    // Never resolved through our DNS: a raw-IP connection, allowed only where the policy names
    // the IP or CIDR (open_upstream's raw-address path).
    dest.host = orig_text;
  }

  // An opaque first flight carrying a secret not bound to the decided host: refused undialled.
  if (peeked.kind == "opaque" &&
      co_await refuse_secret_in_first_flight(
          ctx, s, peeked, buf, {dest.host, dest.port, dest.client, "", "", "transparent"})) {
    co_return;
  }
  // A host the policy inspects (network.inspect, network.rules, a bound credential) is reached
  // only by TLS, which is terminated and judged request by request, or by plain HTTP, which the
  // HTTP front end judges: any other stream would reach it with no rule or credential check.
  if (peeked.kind != "tls" && peeked.kind != "http" && ctx.policy.inspects(dest.host, dest.port)) {
    std::string msg = "cordon: " + dest.host + ":" + std::to_string(dest.port) +
                      " is inspected (network.inspect, network.rules or a credential): only TLS or "
                      "HTTP/1.x may reach it, and this connection's first bytes were neither";
    ctx.emit("net.refused", {{"name", dest.host},
                             {"address", orig_text},
                             {"port", dest.port},
                             {"mode", "transparent"},
                             {"decision", "deny"},
                             {"rule", "network.inspect (not TLS or HTTP)"},
                             {"decided_by", "policy"},
                             {"client", dest.client},
                             {"peek", peeked.kind},
                             {"reason", msg}});
    co_await refuse_first_flight(s, peeked, msg);
    co_return;
  }
  if (peeked.kind == "http") {
    // Decided now, dialled once the first request has been judged (serve_http_transparent).
    auto decided = co_await decide_upstream(ctx, std::move(dest));
    if (decided.failure != Failure::None) {
      co_await refuse_first_flight(s, peeked, decided.message);
      co_return;
    }
    co_await serve_http_transparent(ctx, std::move(client), std::move(buf), std::move(decided));
    co_return;
  }
  auto opened = co_await open_upstream(ctx, std::move(dest));
  if (opened.failure != Failure::None) {
    co_await refuse_first_flight(s, peeked, opened.message);
    co_return;
  }
  if (peeked.kind == "tls" && should_inspect(ctx, opened.up)) {
    co_await serve_inspected(ctx, std::move(client), std::move(*opened.socket),
                             std::move(opened.up), take_leftover(buf));
    co_return;
  }
  start_tunnel(ctx, std::move(client), std::move(*opened.socket), std::move(opened.up),
               take_leftover(buf));
}

}  // namespace

asio::awaitable<void> serve_transparent(Context& ctx, tcp::socket client, tcp::endpoint peer) {
  auto orig = original_dst(client.native_handle());
  if (!orig) {
    // Not a redirected connection (someone dialled the proxy port directly): nothing to decide on.
    ctx.emit("net.refused",
             {{"mode", "transparent"},
              {"decision", "deny"},
              {"rule", "network"},
              {"reason", "no original destination (connection was not redirected)"}});
    co_return;
  }
  // Non-blocking (accept_loop set it) for read_until's first, speculative read.
  beast::flat_buffer buf;
  auto peeked = co_await peek_first_flight(ctx, client, buf);
  if (!peeked) {
    co_return;
  }
  co_await decide_and_serve(ctx, client, peer, *orig, *peeked, buf);
}

}  // namespace cordon::netproxy
