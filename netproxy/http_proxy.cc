// HTTP proxy front end: absolute-form requests (each decided and logged on its own, keep-alive,
// streamed bodies) and CONNECT tunnels.
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/http.hpp>

#include "netproxy/body_guard.h"
#include "netproxy/credentials.h"
#include "netproxy/decide.h"
#include "netproxy/first_flight.h"
#include "netproxy/frontends.h"
#include "netproxy/http_common.h"
#include "netproxy/inspect.h"
#include "netproxy/splice.h"
#include "netproxy/upstream.h"
#include "netproxy/wire/http_head.h"

namespace cordon::netproxy {

using namespace asio::experimental::awaitable_operators;

namespace {

// The helpers below serve both beast::tcp_stream (explicit proxy: a deadline per operation) and a
// plain tcp::socket (transparent: the idle sweeper's one deadline per connection).
tcp::socket& sock(beast::tcp_stream& s) { return s.socket(); }
tcp::socket& sock(tcp::socket& s) { return s; }
template <class Stream>
asio::awaitable<void> send_refusal(Context& ctx, Stream& s, unsigned version, http::status status,
                                   const std::string& line, bool keep_alive) {
  http::response<http::string_body> res{status, version};
  res.set(http::field::server, "cordon");
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.keep_alive(keep_alive);
  res.body() = line + "\n";
  res.prepare_payload();
  set_deadline(s, ctx.handshake_timeout);
  co_await http::async_write(s, res, use_nothrow);
}

// Closes `s` with a reset (SO_LINGER 0): the peer sees the connection fail, not end.
void reset_socket(tcp::socket& s) {
  beast::error_code ignored;
  s.set_option(asio::socket_base::linger(true, 0), ignored);
  s.close(ignored);
}

http::status status_for(Failure f) {
  return (f == Failure::Policy || f == Failure::Cap) ? http::status::forbidden
                                                     : http::status::bad_gateway;
}

// Ends when nothing moved for the idle timeout (the splice pump has no deadline of its own).
asio::awaitable<void> idle_guard(Context& ctx, const Clock::time_point& last) {
  const auto idle = ctx.policy.idle_timeout.count() > 0 ? ctx.policy.idle_timeout
                                                        : Millis(std::chrono::hours(24));
  asio::steady_timer timer(ctx.io);
  for (;;) {
    timer.expires_at(last + idle);
    auto [ec] = co_await timer.async_wait(use_nothrow);
    if (ec || Clock::now() >= last + idle) {
      co_return;
    }
  }
}

// Writes `head` then `body` to `out` in one gather write (two small writes would meet Nagle and
// the peer's delayed ACK), charged to the byte budget; an error with *cut set when the budget ran
// out inside them (what fitted was sent: budgets are exact). `fin_follows`: the caller shuts
// `out` down right after (the last message on the connection): the bytes are sent with MSG_MORE
// so that the FIN leaves in the same segment and the peer is woken once, not twice.
// `watched`: see relay_message.
template <class Stream>
asio::awaitable<beast::error_code> write_charged(Context& ctx, Stream& out, asio::const_buffer head,
                                                 asio::const_buffer body, bool outbound,
                                                 uint64_t* written, std::string* cut,
                                                 bool fin_follows, Clock::time_point* watched) {
  const std::array<asio::const_buffer, 2> bytes{head, body};
  const uint64_t total = head.size() + body.size();
  uint64_t ok = outbound ? ctx.caps.take_out(total) : ctx.caps.take_in(total);
  if (ok > 0) {
    const auto allowed = beast::buffers_prefix(ok, bytes);
    beast::buffers_suffix<decltype(allowed)> rest(allowed);
    if (sock(out).non_blocking()) {
      // A head (and the body bytes that came with it) usually fits the socket's free send
      // buffer: written at once, with no write operation, timer or reactor round trip.
      beast::error_code ec;
      const size_t w = sock(out).send(allowed, fin_follows ? MSG_MORE : 0, ec);
      *written += w;
      rest.consume(w);
      if (ec && ec != asio::error::would_block) {
        co_return ec;
      }
    }
    if (beast::buffer_bytes(rest) > 0) {
      set_deadline(out, ctx.policy.idle_timeout.count() > 0 ? ctx.policy.idle_timeout
                                                            : ctx.handshake_timeout);
      auto [ec, w] = co_await asio::async_write(out, rest, use_nothrow);
      *written += w;
      if (ec) {
        co_return ec;
      }
    }
    touch(watched);
  }
  if (ok < total) {
    *cut = outbound ? "network.max_bytes_out" : "network.max_bytes_in";
    co_return beast::error_code(asio::error::connection_aborted);
  }
  co_return beast::error_code{};
}

// Forwards one message whose head was just parsed into `p` (body bytes already read sit in
// `buf`): the head as Beast serialises it, then a body of known length (Content-Length, or a
// response running to EOF) by splice(2) with nothing copied through user space; chunked bodies
// go through relay_parsed, and so do bodies with a `filter` (a BodyGuard judging them: splice
// would pass them unseen); `on_trailers`: see relay_parsed. *to_eof: the body ended with the
// connection (no keep-alive).
// `client_closes`: for a response, the client's request asked to close the connection after it.
// `watched`: the connection is under the idle sweeper (IdleWatch), which closes it after the
// idle timeout: no deadline per operation, and *watched is set after each move. nullptr: each
// operation has its own deadline (beast::tcp_stream's timer).
template <bool isRequest, class Stream>
asio::awaitable<beast::error_code> relay_message(Context& ctx, Stream& in, beast::flat_buffer& buf,
                                                 http::parser<isRequest, http::buffer_body>& p,
                                                 Stream& out, bool outbound, uint64_t* written,
                                                 std::string* cut, bool* to_eof = nullptr,
                                                 bool client_closes = false,
                                                 Clock::time_point* watched = nullptr,
                                                 const BodyFilter& filter = {},
                                                 const TrailerFilter& on_trailers = {}) {
  if (p.chunked() || (filter && !p.is_done())) {
    co_return co_await relay_parsed(ctx, in, buf, p, out, outbound, written, cut, watched, {},
                                    filter, on_trailers);
  }
  // No body: HEAD, 204, 304, Content-Length 0, a bodiless request.
  const bool bodiless = p.is_done();
  std::optional<uint64_t> length;
  if (bodiless) {
    length = 0;
  } else if (auto cl = p.content_length()) {
    length = *cl;
  } else if (to_eof != nullptr) {
    *to_eof = true;  // a response delimited by the end of the connection
  }
  // Body bytes that arrived with the head go out with it, in one write.
  const uint64_t buffered = std::min<uint64_t>(buf.size(), length.value_or(buf.size()));
  // The whole of the last response on the connection goes out now: the callers shut the client
  // down right after it (serve_http_proxy, serve_http_transparent).
  const bool last_whole_response =
      !isRequest && length && buffered == *length && (client_closes || !p.get().keep_alive());
  {
    // The head exactly as it goes out (start line, fields, CRLF), charged like body bytes.
    const std::string text = head_text(p.get().base());
    auto ec = co_await write_charged(ctx, out, asio::buffer(text),
                                     asio::buffer(buf.data().data(), buffered), outbound, written,
                                     cut, last_whole_response, watched);
    buf.consume(buffered);
    if (ec) {
      co_return ec;
    }
  }
  std::optional<uint64_t> rest;
  if (length) {
    rest = *length - buffered;
    if (*rest == 0) {
      co_return beast::error_code{};
    }
  }
  PumpEnd end;
  if (watched != nullptr) {
    end = co_await pump(ctx, sock(in), sock(out), rest, outbound, {written, watched});
  } else {
    Clock::time_point last = Clock::now();
    auto r = co_await (pump(ctx, sock(in), sock(out), rest, outbound, {written, &last}) ||
                       idle_guard(ctx, last));
    if (r.index() == 1) {
      co_return beast::error_code(beast::error::timeout);
    }
    end = std::get<0>(r);
  }
  switch (end) {
    case PumpEnd::Limit:
      co_return beast::error_code{};
    case PumpEnd::Eof:
      // Fine for a body that runs to EOF; a short Content-Length body is a broken message.
      co_return length ? beast::error_code(http::error::partial_message) : beast::error_code{};
    case PumpEnd::Budget:
      *cut = outbound ? "network.max_bytes_out" : "network.max_bytes_in";
      co_return beast::error_code(asio::error::connection_aborted);
    case PumpEnd::ReadError:
    case PumpEnd::WriteError:
      break;
  }
  co_return beast::error_code(asio::error::connection_reset);
}

asio::awaitable<void> serve_connect(Context& ctx, beast::tcp_stream& client,
                                    beast::flat_buffer& buf,
                                    const http::request<http::buffer_body>& req) {
  std::string host;
  int port = 0;
  std::string target(req.target());
  if (!wire::split_host_port(target, &host, &port) || port == 0) {
    co_await send_refusal(ctx, client, req.version(), http::status::bad_request,
                          "cordon: CONNECT needs host:port, got \"" + target + "\"", false);
    co_return;
  }
  Destination dest;
  dest.host = host;
  dest.port = static_cast<uint16_t>(port);
  dest.mode = "connect";
  dest.client = ctx.client_of(client.socket());
  // A name carrying a secret's form is refused before it is resolved or dialled.
  if (auto refused = refuse_secret_in_name(
          ctx, {host, dest.port, dest.client, "CONNECT", target, "connect"}, host, "connect")) {
    co_await send_refusal(ctx, client, req.version(), refused->refusal.status,
                          refused->refusal.line, false);
    co_return;
  }
  auto opened = co_await open_upstream(ctx, std::move(dest));
  if (opened.failure != Failure::None) {
    co_await send_refusal(ctx, client, req.version(), status_for(opened.failure), opened.message,
                          false);
    co_return;
  }
  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
  client.expires_after(ctx.handshake_timeout);
  auto [ec, n] = co_await asio::async_write(client, asio::buffer(kEstablished), use_nothrow);
  if (ec) {
    finish_upstream(ctx, opened.up);
    co_return;
  }
  if (should_inspect(ctx, opened.up)) {
    co_await serve_inspected(ctx, client.release_socket(), std::move(*opened.socket),
                             std::move(opened.up), take_leftover(buf));
    co_return;
  }
  start_named_tunnel(ctx, client.release_socket(), std::move(*opened.socket), std::move(opened.up),
                     take_leftover(buf));
}

}  // namespace

std::optional<RuleRefusal> check_rules(Context& ctx, std::string_view host, uint16_t port,
                                       std::string_view method, std::string_view target,
                                       const std::string& client, std::string_view mode,
                                       const std::string& url) {
  if (ctx.policy.rules.empty()) {
    return std::nullopt;
  }
  const std::string name = policy::normalize_host(host);
  std::string why;
  auto path = policy::normalize_http_path(target, &why);
  policy::HttpDecision d;
  RuleRefusal r{http::status::forbidden, {}};
  if (!path) {
    // Judged as the root so a host without rules is not refused over its paths.
    d = policy::decide_http(ctx.policy.rules, name, port, method, "/");
    if (!d.ruled) {
      return std::nullopt;
    }
    d.allow = false;
    d.rule = "network.rules (path)";
    r.status = http::status::bad_request;
    r.line = "cordon: " + std::string(method) + " " + name + " refused: " + why +
             " (network.rules judge the decoded path)";
  } else {
    d = policy::decide_http(ctx.policy.rules, name, port, method, *path);
    if (d.allow) {
      return std::nullopt;
    }
    r.line = "cordon: " + std::string(method) + " " + name + *path + " is denied by " + d.rule;
  }
  ctx.emit("net.refused", {{"name", name},
                           {"port", port},
                           {"mode", std::string(mode)},
                           {"decision", "deny"},
                           {"rule", d.rule},
                           {"client", client},
                           {"method", std::string(method)},
                           {"url", url},
                           {"reason", r.line}});
  return r;
}

namespace {

// A request head refused as unreadable to the server the way cordon read it: the 400 with its
// one-line reason, and the net.refused event naming `rule`.
RuleRefusal refuse_head(Context& ctx, std::string_view host, uint16_t port, std::string_view method,
                        const std::string& client, std::string_view mode, const std::string& url,
                        std::string_view rule, std::string_view why) {
  RuleRefusal r{http::status::bad_request, "cordon: " + std::string(method) + " " +
                                               std::string(host) + " refused: " + std::string(why)};
  ctx.emit("net.refused", {{"name", std::string(host)},
                           {"port", port},
                           {"mode", std::string(mode)},
                           {"decision", "deny"},
                           {"rule", std::string(rule)},
                           {"client", client},
                           {"method", std::string(method)},
                           {"url", url},
                           {"reason", r.line}});
  return r;
}

}  // namespace

RuleRefusal refuse_obs_fold(Context& ctx, std::string_view host, uint16_t port,
                            std::string_view method, const std::string& client,
                            std::string_view mode, const std::string& url) {
  return refuse_head(ctx, host, port, method, client, mode, url, "network (obs-fold)",
                     "a header line is folded onto the one before it (obs-fold, RFC 9112 5.2); "
                     "send each field on one line");
}

std::optional<RuleRefusal> refuse_unless_origin_form(Context& ctx, std::string_view host,
                                                     uint16_t port, std::string_view method,
                                                     std::string_view target,
                                                     const std::string& client,
                                                     std::string_view mode,
                                                     const std::string& url) {
  if ((!target.empty() && target.front() == '/') || (method == "OPTIONS" && target == "*")) {
    return std::nullopt;
  }
  return refuse_head(ctx, host, port, method, client, mode, url, "network (request target)",
                     "the request names a URL, not a path (absolute-form sent to a server, RFC "
                     "9112 3.2); send the path alone");
}

void emit_http(const Context& ctx, const Upstream& up, std::string_view method,
               std::string_view url, std::string_view name, uint16_t port, unsigned status,
               uint64_t req_bytes, uint64_t resp_bytes, std::string_view mode,
               Clock::time_point started) {
  if (!ctx.events.enabled()) {
    return;
  }
  const std::string address = up.addr.to_string();
  EventLine ev("net.http");
  ev.add("method", method)
      .add("url", url)
      .add("name", name)
      .add("port", port)
      .add("status", status)
      .add("request_bytes", req_bytes)
      .add("response_bytes", resp_bytes)
      .add("decision", "allow")
      .add("rule", up.rule)
      .add("address", address)
      .add("client", up.client);
  if (!mode.empty()) {
    ev.add("mode", mode);
  }
  if (started != Clock::time_point{}) {
    ev.add("duration_ms", static_cast<uint64_t>(
                              std::chrono::duration_cast<Millis>(Clock::now() - started).count()));
  }
  ctx.emit(ev);
}

asio::awaitable<void> serve_http_proxy(Context& ctx, beast::tcp_stream client,
                                       beast::flat_buffer buf) {
  std::optional<beast::tcp_stream> up_stream;
  std::optional<beast::flat_buffer> up_buf;
  Upstream up;
  std::string up_key;
  bool client_shut = false;  // the client's EOF was sent after the last response
  auto close_upstream = [&] {
    if (up_stream) {
      beast::error_code ignored;
      // A FIN (or RST if unread bytes remain), as shutdown+close.
      up_stream->socket().close(ignored);
      finish_upstream(ctx, up);
      up_stream.reset();
      up_buf.reset();
    }
  };

  for (int count = 0;; ++count) {
    http::request_parser<http::buffer_body> p;
    p.header_limit(kMaxRequestHead);
    p.body_limit(boost::none);
    bool folded = false;
    auto ec = co_await read_head(
        client, buf, p,
        count == 0 ? ctx.handshake_timeout
                   : (ctx.policy.idle_timeout.count() > 0 ? ctx.policy.idle_timeout
                                                          : ctx.handshake_timeout),
        nullptr, &folded);
    if (ec) {
      if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
          ec != asio::error::connection_reset && count == 0) {
        co_await send_refusal(ctx, client, 11, http::status::bad_request,
                              "cordon: malformed proxy request (" + ec.message() + ")", false);
      }
      break;
    }
    auto& req = p.get();
    if (req.method() == http::verb::connect) {
      close_upstream();
      co_await serve_connect(ctx, client, buf, req);
      co_return;
    }
    const std::string method(req.method_string());
    const std::string url(req.target());
    const unsigned version = req.version();
    const bool client_keep = req.keep_alive();
    std::string host, path;
    uint16_t port = 0;
    if (!wire::parse_absolute_http(url, &host, &port, &path)) {
      co_await send_refusal(ctx, client, version, http::status::bad_request,
                            "cordon: proxy requests need an absolute http:// URL (https:// goes "
                            "through CONNECT), got \"" +
                                url + "\"",
                            false);
      break;
    }
    const std::string who = ctx.client_of(client.socket());
    if (folded) {
      // Before anything else reads the head: its fields are not what a server would read.
      auto r = refuse_obs_fold(ctx, host, port, method, who, "http", url);
      co_await send_refusal(ctx, client, version, r.status, r.line, false);
      break;
    }
    auto refusal = check_rules(ctx, host, port, method, path, who, "http", url);
    if (!refusal) {
      refusal = apply_credentials(ctx, {host, port, who, method, url, "http"}, req);
      if (!refusal && req.target() != url) {
        // A credential's value went into the URL: the origin-form sent upstream is its path.
        const std::string substituted(req.target());
        wire::parse_absolute_http(substituted, &host, &port, &path);
      }
    }
    if (refusal) {
      bool keep = client_keep && p.is_done();
      co_await send_refusal(ctx, client, version, refusal->status, refusal->line, keep);
      if (!keep) {
        break;
      }
      continue;
    }
    // Origin-form upstream; hop-by-hop proxy headers are ours, not the server's.
    req.target(path);
    // The upstream sees the host that was decided on, never a different Host header the client
    // slipped in (RFC 9112 3.2.2: a proxy replaces Host with the target's authority).
    req.set(http::field::host, (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                                   (port == 80 ? "" : ":" + std::to_string(port)));
    req.erase("Proxy-Connection");
    req.erase(http::field::proxy_authorization);
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      // Answer the client's expectation here so it sends the body without waiting.
      req.erase(http::field::expect);
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await asio::async_write(client, asio::buffer(kContinue), use_nothrow);
    }
    // A body judged whole is judged before the upstream is dialled: a refused request costs the
    // destination no connection.
    beast::error_code body_ec;
    if (auto body_refusal =
            co_await scan_request_body(ctx, client, buf, p, {host, port, who, method, url, "http"},
                                       ctx.handshake_timeout, body_ec)) {
      co_await send_refusal(ctx, client, version, body_refusal->status, body_refusal->line, false);
      break;
    }
    if (body_ec) {
      break;
    }
    std::string key = host + ":" + std::to_string(port);
    if (!up_stream || key != up_key) {
      close_upstream();
      Destination dest;
      dest.host = host;
      dest.port = port;
      dest.mode = "http";
      dest.client = who;
      dest.method = method;
      dest.url = url;
      auto opened = co_await open_upstream(ctx, std::move(dest));
      if (opened.failure != Failure::None) {
        // Keep the client connection only when no request body is left unread.
        bool keep = client_keep && p.is_done();
        co_await send_refusal(ctx, client, version, status_for(opened.failure), opened.message,
                              keep);
        if (!keep) {
          break;
        }
        continue;
      }
      up_stream.emplace(std::move(*opened.socket));
      up_buf.emplace();
      up = std::move(opened.up);
      up_key = key;
    }
    std::optional<BodyGuard> guard;
    BodyFilter filter;
    TrailerFilter trailers;
    if (needs_body_guard(ctx, p)) {
      guard.emplace(ctx, RequestSite{host, port, who, method, url, "http"});
      filter = [&](std::string_view piece, bool last) { return guard->pass(piece, last); };
      trailers = [&](Trailers& t) { return guard->pass_trailers(t); };
    }
    uint64_t req_bytes = 0, resp_bytes = 0;
    std::string cut;
    auto rec = co_await relay_message<true>(ctx, client, buf, p, *up_stream, true, &req_bytes, &cut,
                                            nullptr, false, nullptr, filter, trailers);
    up.bytes_out += req_bytes;
    if (guard && guard->refusal()) {
      // Part of the body went: the server's connection is reset so it never sees the message
      // end, and the program gets the 403.
      up.end = "exfil";
      reset_socket(up_stream->socket());
      close_upstream();
      co_await send_refusal(ctx, client, version, guard->refusal()->status, guard->refusal()->line,
                            false);
      break;
    }
    if (rec) {
      up.end = cut.empty() ? "reset" : cut;
      if (!cut.empty()) {
        ctx.emit("limit.hit", {{"cap", cut}, {"name", host}, {"port", port}, {"url", url}});
      }
      break;
    }
    http::response_parser<http::buffer_body> rp;
    rp.header_limit(kMaxResponseHead);
    rp.body_limit(boost::none);
    if (req.method() == http::verb::head) {
      rp.skip(true);
    }
    auto hec = co_await read_head(
        *up_stream, *up_buf, rp,
        ctx.policy.idle_timeout.count() > 0 ? ctx.policy.idle_timeout : ctx.handshake_timeout);
    if (hec) {
      co_await send_refusal(ctx, client, version, http::status::bad_gateway,
                            "cordon: " + key + " did not send a response (" + hec.message() + ")",
                            false);
      break;
    }
    const unsigned status = rp.get().result_int();
    bool to_eof = false;
    auto sec = co_await relay_message<false>(ctx, *up_stream, *up_buf, rp, client, false,
                                             &resp_bytes, &cut, &to_eof, !client_keep);
    const bool server_keep = rp.get().keep_alive() && !to_eof;
    up.bytes_in += resp_bytes;
    if (sec || !client_keep || !server_keep) {
      // Last response on this connection: the client's EOF first, so that the bookkeeping below
      // (events, closing the upstream) is not part of its wait.
      beast::error_code ignored;
      client.socket().shutdown(tcp::socket::shutdown_send, ignored);
      client_shut = true;
    }
    emit_http(ctx, up, method, url, host, port, status, req_bytes, resp_bytes, "");
    if (sec) {
      up.end = cut.empty() ? "reset" : cut;
      if (!cut.empty()) {
        ctx.emit("limit.hit", {{"cap", cut}, {"name", host}, {"port", port}, {"url", url}});
      }
      break;
    }
    if (!server_keep) {
      close_upstream();
    }
    if (!client_keep || !server_keep) {
      break;
    }
  }
  close_upstream();
  if (!client_shut) {
    beast::error_code ignored;
    client.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }
}

asio::awaitable<void> serve_http_transparent(Context& ctx, tcp::socket client,
                                             beast::flat_buffer buf, Decided decided) {
  beast::flat_buffer up_buf;
  // What the judges need before the dial; dial_upstream's Upstream replaces it.
  Upstream up;
  up.mode = decided.dest.mode;
  up.name = decided.name();
  up.addr = decided.addrs.front();
  up.port = decided.dest.port;
  up.client = decided.dest.client;
  tcp::socket upstream(ctx.io);
  bool dialled = false;
  const std::string authority =
      (up.name.empty() ? (up.addr.v6 ? "[" + up.addr.to_string() + "]" : up.addr.to_string())
                       : up.name) +
      (up.port == 80 ? "" : ":" + std::to_string(up.port));
  const Millis idle =
      ctx.policy.idle_timeout.count() > 0 ? ctx.policy.idle_timeout : ctx.handshake_timeout;
  // One idle deadline for the whole connection, kept by the sweeper, instead of a timer armed
  // and cancelled around every read and write: closing both sockets ends whatever waits.
  struct Watch final : IdleWatch {
    Watch(tcp::socket& c, tcp::socket& u) : client(c), upstream(u) {}
    void expire() override {
      beast::error_code ignored;
      client.close(ignored);
      upstream.close(ignored);
    }
    tcp::socket& client;
    tcp::socket& upstream;
  } watch(client, upstream);
  watch.limit = idle;
  IdleWatchGuard watching(ctx, watch);
  Clock::time_point* const watched = &watch.last;
  bool client_shut = false;  // the client's EOF was sent after the last response
  for (int count = 0; count < 100000; ++count) {
    http::request_parser<http::buffer_body> p;
    p.header_limit(kMaxRequestHead);
    p.body_limit(boost::none);
    bool folded = false;
    if (auto ec = co_await read_head(client, buf, p, idle, watched, &folded)) {
      break;
    }
    auto& req = p.get();
    const std::string method(req.method_string());
    const std::string target(req.target());
    const std::string url = "http://" + authority + target;
    const std::string site = up.name.empty() ? up.addr.to_string() : up.name;
    if (folded) {
      auto r = refuse_obs_fold(ctx, site, up.port, method, up.client, "transparent", url);
      co_await send_refusal(ctx, client, req.version(), r.status, r.line, false);
      break;
    }
    if (auto r = refuse_unless_origin_form(ctx, site, up.port, method, target, up.client,
                                           "transparent", url)) {
      co_await send_refusal(ctx, client, req.version(), r->status, r->line, false);
      break;
    }
    // Every request on the connection must name the host the connection was decided for: a
    // second request with another Host is the keep-alive form of domain fronting.
    std::string host;
    int host_port = 0;
    if (!up.name.empty() &&
        (!wire::split_host_port(std::string(req[http::field::host]), &host, &host_port) ||
         policy::normalize_host(host) != up.name)) {
      std::string msg = "cordon: Host \"" + std::string(req[http::field::host]) +
                        "\" does not match " + up.name + ", the name this connection was " +
                        "decided for";
      ctx.emit("net.refused", {{"name", host},
                               {"address", up.addr.to_string()},
                               {"port", up.port},
                               {"mode", "transparent"},
                               {"decision", "deny"},
                               {"rule", "network (name mismatch)"},
                               {"resolved_name", up.name},
                               {"client", up.client},
                               {"method", method},
                               {"url", url},
                               {"reason", msg}});
      co_await send_refusal(ctx, client, req.version(), http::status::forbidden, msg, false);
      break;
    }
    auto refusal = check_rules(ctx, site, up.port, method, target, up.client, "transparent", url);
    if (!refusal) {
      refusal = apply_credentials(ctx, {site, up.port, up.client, method, url, "transparent"}, req);
    }
    if (refusal) {
      // Before the dial (first request) or with the request unsent: it never reaches the server.
      co_await send_refusal(ctx, client, req.version(), refusal->status, refusal->line, false);
      break;
    }
    beast::error_code body_ec;
    if (auto body_refusal = co_await scan_request_body(
            ctx, client, buf, p, {site, up.port, up.client, method, url, "transparent"}, idle,
            body_ec, watched)) {
      co_await send_refusal(ctx, client, req.version(), body_refusal->status, body_refusal->line,
                            false);
      break;
    }
    if (body_ec) {
      break;
    }
    if (!dialled) {
      auto opened = co_await dial_upstream(ctx, std::move(decided));
      if (opened.failure != Failure::None) {
        co_await send_refusal(ctx, client, req.version(), status_for(opened.failure),
                              opened.message, false);
        break;
      }
      upstream = std::move(*opened.socket);
      up = std::move(opened.up);
      dialled = true;
    }
    const bool client_keep = req.keep_alive();
    std::optional<BodyGuard> guard;
    BodyFilter filter;
    TrailerFilter trailers;
    if (needs_body_guard(ctx, p)) {
      guard.emplace(ctx, RequestSite{site, up.port, up.client, method, url, "transparent"});
      filter = [&](std::string_view piece, bool last) { return guard->pass(piece, last); };
      trailers = [&](Trailers& t) { return guard->pass_trailers(t); };
    }
    uint64_t req_bytes = 0, resp_bytes = 0;
    std::string cut;
    auto rec = co_await relay_message<true>(ctx, client, buf, p, upstream, true, &req_bytes, &cut,
                                            nullptr, false, watched, filter, trailers);
    up.bytes_out += req_bytes;
    if (guard && guard->refusal()) {
      // As in serve_http_proxy: the server's connection reset mid-body, the program's 403.
      up.end = "exfil";
      reset_socket(upstream);
      co_await send_refusal(ctx, client, req.version(), guard->refusal()->status,
                            guard->refusal()->line, false);
      break;
    }
    if (rec) {
      up.end = cut.empty() ? "reset" : cut;
      break;
    }
    http::response_parser<http::buffer_body> rp;
    rp.header_limit(kMaxResponseHead);
    rp.body_limit(boost::none);
    if (req.method() == http::verb::head) {
      rp.skip(true);
    }
    if (auto hec = co_await read_head(upstream, up_buf, rp, idle, watched)) {
      break;
    }
    const unsigned status = rp.get().result_int();
    bool to_eof = false;
    auto sec = co_await relay_message<false>(ctx, upstream, up_buf, rp, client, false, &resp_bytes,
                                             &cut, &to_eof, !client_keep, watched);
    const bool server_keep = rp.get().keep_alive() && !to_eof;
    up.bytes_in += resp_bytes;
    if (sec || !client_keep || !server_keep) {
      // Last response: the client's EOF before the events (as in serve_http_proxy).
      beast::error_code ignored;
      client.shutdown(tcp::socket::shutdown_send, ignored);
      client_shut = true;
    }
    emit_http(ctx, up, method, url, up.name, up.port, status, req_bytes, resp_bytes, "transparent");
    if (sec) {
      up.end = cut.empty() ? "reset" : cut;
      break;
    }
    if (!client_keep || !server_keep) {
      break;
    }
  }
  if (!client_shut) {
    beast::error_code ignored;
    client.shutdown(tcp::socket::shutdown_send, ignored);
  }
  // The upstream is closed when this frame ends (a FIN, or a RST if unread bytes remain: the
  // same as shutdown then close).
  if (dialled) {
    finish_upstream(ctx, up);
  }
}

}  // namespace cordon::netproxy
