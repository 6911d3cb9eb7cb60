// Peeking at a client's first flight, and the name-mismatch (domain fronting) check built on it.
#include "netproxy/first_flight.h"

#include <algorithm>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "netproxy/body_guard.h"
#include "netproxy/wire/http_head.h"
#include "netproxy/wire/sni.h"

namespace cordon::netproxy {

namespace {

using namespace asio::experimental::awaitable_operators;

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

}  // namespace

asio::awaitable<std::optional<FirstFlight>> peek_first_flight(Context& ctx, tcp::socket& s,
                                                              beast::flat_buffer& buf) {
  FirstFlight out;
  const auto start = Clock::now();
  auto deadline = start + ctx.peek_timeout;
  // The bytes so far have begun a ClientHello or a request head with a registered method and
  // are not complete: waited for (up to the handshake timeout), never relayed as opaque.
  bool pending = false;
  auto wait_for_the_rest = [&] {
    pending = true;
    deadline = std::max(deadline, start + ctx.handshake_timeout);
  };
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
    if (wire::looks_like_tls(bytes)) {
      auto hello = wire::parse_client_hello(bytes);
      if (hello.status == wire::ParseStatus::NeedMore) {
        pending = false;
        if (wire::tls_record_begun(bytes)) {
          wait_for_the_rest();
        }
        continue;
      }
      pending = false;
      // A handshake record the parser cannot read (a zero-length one first, a bad length) is
      // refused, not relayed: OpenSSL servers skip an empty handshake record and read the
      // ClientHello after it, whose SNI nobody checked.
      out.kind = hello.status == wire::ParseStatus::Done ? "tls" : "malformed";
      if (hello.has_sni) {
        out.claimed = hello.sni;
      }
      break;
    }
    // Servers skip blank lines before a request line (RFC 9112 section 2.2), so bytes that
    // begin with them are judged by what follows: a request head there is refused (no client
    // sends one on a fresh connection), anything else is a stream.
    size_t blank = 0;
    while (blank < bytes.size() && (bytes[blank] == '\r' || bytes[blank] == '\n')) {
      ++blank;
    }
    if (blank > 0) {
      if (blank == bytes.size()) {
        wait_for_the_rest();
        continue;
      }
      pending = false;
      if (wire::http_request_begun(bytes.subspan(blank))) {
        out.kind = "malformed";
        out.began_http = true;
      } else {
        out.kind = "opaque";
      }
      break;
    }
    auto head = wire::parse_http_head(bytes);
    if (head.status == wire::ParseStatus::NeedMore) {
      pending = false;
      if (wire::http_request_begun(bytes)) {
        wait_for_the_rest();
      }
      continue;
    }
    pending = false;
    if (head.status != wire::ParseStatus::Done && wire::http_request_begun(bytes)) {
      // Larger than the peek: incomplete. Otherwise it began as a request and does not parse
      // (two Host headers, a bad Host, bare LF line ends, a tab in the request line): a lenient
      // server would still answer it, so it is refused rather than relayed as a stream.
      out.kind = bytes.size() >= wire::kMaxHttpHead ? "incomplete" : "malformed";
      out.began_http = true;
      break;
    }
    out.kind = head.status == wire::ParseStatus::Done ? "http" : "opaque";
    out.claimed = head.host;
    if (head.status == wire::ParseStatus::Done) {
      out.method = head.method;
      out.target = head.target;
      out.obs_fold = head.obs_fold;
    }
    break;
  }
  if (pending) {
    out.kind = "incomplete";
    out.began_http = !wire::looks_like_tls(
        std::span<const uint8_t>(static_cast<const uint8_t*>(buf.data().data()), buf.size()));
  } else if (out.kind == "silent" && buf.size() > 0) {
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

asio::awaitable<void> refuse_unreadable_first_flight(Context& ctx, tcp::socket& s,
                                                     const FirstFlight& f, const RequestSite& at) {
  const bool incomplete = f.kind == "incomplete";
  const std::string what = f.began_http ? "an HTTP request head" : "a TLS handshake record";
  const std::string msg =
      incomplete ? "cordon: the connection's first bytes began " + what +
                       " that did not complete within " +
                       std::to_string(ctx.handshake_timeout.count() / 1000) +
                       " s or 16 KiB; refused unread"
                 : "cordon: the connection's first bytes began " + what + " that does not parse (" +
                       (f.began_http ? "a repeated or bad Host, bare LF line ends, a blank line "
                                       "before the request line, or a bad request line"
                                     : "an empty or oversized record") +
                       "); refused unrelayed";
  ctx.emit("net.refused", {{"name", at.name},
                           {"port", at.port},
                           {"mode", at.mode},
                           {"decision", "deny"},
                           {"rule", incomplete ? "network (first flight incomplete)"
                                               : "network (first flight malformed)"},
                           {"decided_by", "policy"},
                           {"client", at.client},
                           {"peek", f.kind},
                           {"reason", msg}});
  beast::error_code ec;
  if (f.began_http && !incomplete) {
    FirstFlight as_http;
    as_http.kind = "http";
    co_await refuse_first_flight(s, as_http, msg, "400 Bad Request");
    co_return;
  }
  s.set_option(asio::socket_base::linger(true, 0), ec);
  s.close(ec);
}

asio::awaitable<void> refuse_first_flight(tcp::socket& s, const FirstFlight& p,
                                          const std::string& msg, std::string_view status) {
  if (p.kind == "http") {
    std::string body = msg + "\n";
    std::string res = "HTTP/1.1 " + std::string(status) +
                      "\r\nServer: cordon\r\nContent-Type: text/plain; "
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

asio::awaitable<bool> refuse_secret_in_first_flight(Context& ctx, tcp::socket& s,
                                                    const FirstFlight& f,
                                                    const beast::flat_buffer& buf,
                                                    const RequestSite& site) {
  RequestSite at = site;
  at.method = !f.method.empty() ? std::string_view(f.method)
              : f.kind == "tls" ? std::string_view("TLS")
                                : std::string_view("TCP");
  // The claim before normalisation would be the better carrier, but normalize_host only lowers
  // case and drops a trailing dot, which find_secret_in_name looks through anyway.
  std::optional<ExfilRefusal> refused;
  if (f.kind == "tls" && !f.claimed.empty()) {
    refused = refuse_secret_in_name(ctx, at, f.claimed, "sni");
  } else if (f.kind == "http" && !f.claimed.empty()) {
    refused = refuse_secret_in_name(ctx, at, f.claimed, "header host");
  } else if (f.kind == "opaque") {
    const auto d = buf.data();
    refused = refuse_secret_in_stream(
        ctx, at, std::string_view(static_cast<const char*>(d.data()), d.size()));
  }
  if (!refused) {
    co_return false;
  }
  co_await refuse_first_flight(s, f, refused->refusal.line);
  co_return true;
}

asio::awaitable<bool> tunnel_claim_matches(Context& ctx, tcp::socket& s, beast::flat_buffer& buf,
                                           Upstream& up) {
  if (up.name.empty()) {
    co_return true;  // a raw-IP target (allowed by its IP or CIDR): no name to front
  }
  beast::error_code ec;
  s.non_blocking(true, ec);
  auto flight = co_await peek_first_flight(ctx, s, buf);
  if (!flight) {
    co_return true;  // closed before sending anything: the tunnel ends at once
  }
  if (unreadable_first_flight(*flight)) {
    co_await refuse_unreadable_first_flight(ctx, s, *flight,
                                            {up.name, up.port, up.client, "", "", up.mode});
    up.finished = true;  // dialled, but nothing relayed: the refusal is its record
    up.slot.release();
    co_return false;
  }
  const RequestSite site{up.name, up.port, up.client, "", "", up.mode};
  if (flight->kind == "http" && flight->obs_fold) {
    // Relayed as bytes, the head would reach the server folded, past a scan of it unjoined.
    const auto r = refuse_obs_fold(ctx, up.name, up.port, flight->method, up.client, up.mode, "");
    up.finished = true;  // dialled, but nothing relayed: the refusal is its record
    up.slot.release();
    co_await refuse_first_flight(s, *flight, r.line, "400 Bad Request");
    co_return false;
  }
  bool refused = co_await refuse_secret_in_first_flight(ctx, s, *flight, buf, site);
  if (!refused && flight->kind == "http") {
    // Plain HTTP in a named tunnel is relayed as bytes, not through the HTTP front end: its first
    // head (target and headers, in every form) is searched as a stream's first flight is.
    FirstFlight as_stream = *flight;
    as_stream.kind = "opaque";
    refused = co_await refuse_secret_in_first_flight(ctx, s, as_stream, buf, site);
  }
  if (refused) {
    up.finished = true;  // dialled, but nothing relayed: the net.exfil event is its record
    up.slot.release();
    co_return false;
  }
  if (flight->kind == "tls") {
    up.sni = flight->claimed;
  }
  if (flight->claimed.empty() || flight->claimed_raw_ip || flight->claimed == up.name) {
    co_return true;
  }
  std::string msg = "cordon: " + std::string(flight->kind == "tls" ? "TLS SNI" : "Host") + " \"" +
                    flight->claimed + "\" does not match " + up.name + ", the " + up.mode +
                    " target (domain fronting)";
  ctx.emit("net.refused", {{"name", flight->claimed},
                           {"address", up.addr.to_string()},
                           {"port", up.port},
                           {"mode", up.mode},
                           {"decision", "deny"},
                           {"rule", "network (name mismatch)"},
                           {"resolved_name", up.name},
                           {"client", up.client},
                           {"peek", flight->kind},
                           {"reason", msg}});
  // The upstream was dialled but nothing was relayed: no net.connect for it, only the refusal.
  up.finished = true;
  up.slot.release();
  co_await refuse_first_flight(s, *flight, msg);
  co_return false;
}

namespace {

asio::awaitable<void> named_tunnel(Context& ctx, tcp::socket client, tcp::socket upstream,
                                   Upstream up, std::string leftover) {
  beast::flat_buffer buf;
  if (!leftover.empty()) {
    buf.commit(asio::buffer_copy(buf.prepare(leftover.size()), asio::buffer(leftover)));
    std::string().swap(leftover);
  }
  if (!co_await tunnel_claim_matches(ctx, client, buf, up)) {
    co_return;
  }
  start_tunnel(ctx, std::move(client), std::move(upstream), std::move(up), take_leftover(buf));
}

}  // namespace

void start_named_tunnel(Context& ctx, tcp::socket client, tcp::socket upstream, Upstream up,
                        std::string leftover) {
  asio::co_spawn(
      ctx.io,
      named_tunnel(ctx, std::move(client), std::move(upstream), std::move(up), std::move(leftover)),
      [](std::exception_ptr e) { log_coroutine_end("tunnel check", e); });
}

}  // namespace cordon::netproxy
