// Transparent front end: connections netfilter REDIRECTed inside the sandbox's namespace. Decides
// on the name the sandbox resolved the address from, cross-checked with the peeked SNI / Host.
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <cstring>

#include "netproxy/decide.h"
#include "netproxy/frontends.h"
#include "netproxy/http_head.h"
#include "netproxy/sni.h"
#include "netproxy/upstream.h"

namespace cordon::netproxy {

namespace {

using namespace asio::experimental::awaitable_operators;

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

struct Peeked {
  std::string kind = "silent";  // tls | http | opaque | silent
  std::string claimed;          // SNI or Host, normalised; empty if none
  bool claimed_raw_ip = false;
};

// One read that gives up at `deadline` without closing the socket (a beast::tcp_stream timeout
// would close it, and a server-speaks-first client must survive the peek). nullopt = deadline.
asio::awaitable<std::optional<std::pair<beast::error_code, size_t>>> read_until(
    tcp::socket& s, asio::mutable_buffer b, Clock::time_point deadline) {
  // Usually the bytes are there already (the client sent its first flight right after connect):
  // take them without arming a timer (a timerfd update, and a cancel, per read).
  // Only on a non-blocking socket: a blocking read here would stall every connection.
  if (s.non_blocking()) {
    beast::error_code now_ec;
    const size_t now_n = s.read_some(b, now_ec);
    if (now_ec != asio::error::would_block) {
      co_return std::make_pair(now_ec, now_n);
    }
  }
  asio::steady_timer timer(s.get_executor());
  timer.expires_at(deadline);
  auto r = co_await (s.async_read_some(b, use_nothrow) || timer.async_wait(use_nothrow));
  if (r.index() == 1) {
    co_return std::nullopt;
  }
  auto [ec, n] = std::get<0>(r);
  co_return std::make_pair(ec, n);
}

asio::awaitable<std::optional<Peeked>> peek(Context& ctx, tcp::socket& s, beast::flat_buffer& buf) {
  Peeked out;
  auto deadline = Clock::now() + ctx.peek_timeout;
  constexpr size_t kMaxPeek = 16 * 1024 + 5 * 4;  // a ClientHello in a few records, or a head
  while (buf.size() < kMaxPeek) {
    // Grow by doubling from 1 KiB: most first flights are small, and a thousand connections
    // peeking at once should not each take the maximum.
    const size_t step = std::min(kMaxPeek - buf.size(), std::max<size_t>(1024, buf.size()));
    auto r = co_await read_until(s, buf.prepare(step), deadline);
    if (!r) {
      break;  // nothing (more) within the deadline: server-speaks-first, or a slow client
    }
    auto [ec, n] = *r;
    if (ec) {
      if (buf.size() == 0) {
        co_return std::nullopt;  // closed before sending anything
      }
      break;
    }
    buf.commit(n);
    auto d = buf.data();
    std::span<const uint8_t> bytes(static_cast<const uint8_t*>(d.data()), d.size());
    if (looks_like_tls(bytes)) {
      auto hello = parse_client_hello(bytes);
      if (hello.status == ParseStatus::NeedMore) {
        continue;
      }
      out.kind = hello.status == ParseStatus::Done ? "tls" : "opaque";
      if (hello.has_sni) {
        out.claimed = hello.sni;
      }
      break;
    }
    auto head = parse_http_head(bytes);
    if (head.status == ParseStatus::NeedMore) {
      continue;
    }
    out.kind = head.status == ParseStatus::Done ? "http" : "opaque";
    out.claimed = head.host;
    break;
  }
  if (out.kind == "silent" && buf.size() > 0) {
    out.kind = "opaque";
  }
  if (!out.claimed.empty()) {
    std::string norm = policy::normalize_host(out.claimed);
    out.claimed_raw_ip = policy::IpAddress::parse(out.claimed).has_value();
    // An unparseable name is kept verbatim so the mismatch check below refuses it.
    if (!norm.empty()) {
      out.claimed = norm;
    }
  }
  co_return out;
}

// Refuses: HTTP gets a readable 403; TLS and opaque streams are reset (RST via SO_LINGER 0).
asio::awaitable<void> refuse_client(tcp::socket& s, const Peeked& p, const std::string& msg) {
  if (p.kind == "http") {
    std::string body = msg + "\n";
    std::string res =
        "HTTP/1.1 403 Forbidden\r\nServer: cordon\r\nContent-Type: text/plain; "
        "charset=utf-8\r\nConnection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    // A few hundred bytes into a fresh socket's empty send buffer: completes at once.
    co_await asio::async_write(s, asio::buffer(res), use_nothrow);
    beast::error_code ec;
    s.shutdown(tcp::socket::shutdown_send, ec);
    co_return;
  }
  beast::error_code ec;
  s.set_option(asio::socket_base::linger(true, 0), ec);
  s.close(ec);
}

}  // namespace

asio::awaitable<void> serve_transparent(Context& ctx, tcp::socket client) {
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
  tcp::socket& s = client;
  // Non-blocking for read_until's first, speculative read (the relay sets it anyway).
  beast::error_code nb_ec;
  s.non_blocking(true, nb_ec);
  beast::flat_buffer buf;
  auto peeked = co_await peek(ctx, s, buf);
  if (!peeked) {
    co_return;
  }
  const std::string orig_text = orig->ip.to_string();
  auto entries = ctx.names.lookup(orig->ip);

  Destination dest;
  dest.port = orig->port;
  dest.mode = "transparent";
  dest.client = ctx.client_of(s);
  dest.sni = peeked->kind == "tls" ? peeked->claimed : std::string();
  dest.extra = {{"original_dst", orig_text}, {"peek", peeked->kind}};
  if (peeked->kind == "http" && !peeked->claimed.empty()) {
    dest.extra["host_header"] = peeked->claimed;
  }

  if (!entries.empty()) {
    const NameMap::Entry* chosen = nullptr;
    if (!peeked->claimed.empty() && !peeked->claimed_raw_ip) {
      for (const auto& e : entries) {
        if (e.name == peeked->claimed) {
          chosen = &e;
          break;
        }
      }
      if (chosen == nullptr) {
        // The address came from another name's answer: a fronted or misdirected request.
        std::string msg = "cordon: " + std::string(peeked->kind == "tls" ? "TLS SNI" : "Host") +
                          " \"" + peeked->claimed + "\" does not match " + entries.front().name +
                          ", the name " + orig_text + " was resolved from (domain fronting)";
        ctx.emit("net.refused", {{"name", peeked->claimed},
                                 {"address", orig_text},
                                 {"port", orig->port},
                                 {"mode", "transparent"},
                                 {"decision", "deny"},
                                 {"rule", "network (name mismatch)"},
                                 {"resolved_name", entries.front().name},
                                 {"client", dest.client},
                                 {"peek", peeked->kind},
                                 {"reason", msg}});
        co_await refuse_client(s, *peeked, msg);
        co_return;
      }
    } else {
      // No claim (server-speaks-first, opaque, or an IP literal in Host): decide on the name the
      // address came from; prefer one the policy allows on this port. That decision is the one
      // open_upstream uses: the name is not decided twice.
      for (const auto& e : entries) {
        auto d = ctx.policy.decide_destination(e.name, orig->port);
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

  auto opened = co_await open_upstream(ctx, std::move(dest));
  if (opened.failure != Failure::None) {
    co_await refuse_client(s, *peeked, opened.message);
    co_return;
  }
  if (peeked->kind == "http") {
    co_await serve_http_transparent(ctx, beast::tcp_stream(std::move(s)), std::move(buf),
                                    std::move(*opened.stream), opened.up);
    finish_upstream(ctx, opened.up);
    co_return;
  }
  start_tunnel(ctx, std::move(client), opened.stream->release_socket(), std::move(opened.up),
               take_leftover(buf));
}

}  // namespace cordon::netproxy
