// TLS inspection: both handshakes, then HTTP/1.1 request by request (keep-alive, chunked and
// Content-Length bodies, Expect: 100-continue, WebSocket upgrades checked then relayed).
#include "netproxy/inspect.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/ssl.hpp>

#include "netproxy/body_guard.h"
#include "netproxy/credentials.h"
#include "netproxy/http_common.h"
#include "netproxy/request_hook.h"
#include "netproxy/tls_ca.h"
#include "netproxy/upstream.h"

namespace cordon::netproxy {

namespace {

using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using namespace asio::experimental::awaitable_operators;

bool is_ip_literal(const std::string& s) {
  beast::error_code ec;
  asio::ip::make_address(s, ec);
  return !ec;
}

Millis idle_of(const Context& ctx) {
  return ctx.policy.idle_timeout.count() > 0 ? ctx.policy.idle_timeout : ctx.handshake_timeout;
}

asio::awaitable<void> send_line(Context& ctx, TlsStream& s, http::status status,
                                const std::string& line, bool keep_alive) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::server, "cordon");
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.keep_alive(keep_alive);
  res.body() = line + "\n";
  res.prepare_payload();
  set_deadline(s, ctx.handshake_timeout);
  co_await http::async_write(s, res, use_nothrow);
}

void refuse_event(Context& ctx, const Upstream& up, const std::string& rule,
                  const std::string& reason) {
  ctx.emit("net.refused", {{"name", up.name.empty() ? up.addr.to_string() : up.name},
                           {"address", up.addr.to_string()},
                           {"port", up.port},
                           {"mode", "inspect"},
                           {"decision", "deny"},
                           {"rule", rule},
                           {"client", up.client},
                           {"reason", reason}});
}

// The Sec-WebSocket-Accept a server must answer `key` with (RFC 6455 4.2.2).
std::string websocket_accept(std::string_view key) {
  std::string in(key);
  in += "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(in.data()), in.size(), digest);
  unsigned char out[4 * ((SHA_DIGEST_LENGTH + 2) / 3) + 1];
  const int n = EVP_EncodeBlock(out, digest, SHA_DIGEST_LENGTH);
  return std::string(reinterpret_cast<char*>(out), static_cast<size_t>(n));
}

// Bytes one way after an upgrade, until EOF or an error, charged to the byte budget.
asio::awaitable<void> copy_one_way(Context& ctx, TlsStream& from, beast::flat_buffer& pending,
                                   TlsStream& to, bool outbound, uint64_t* counted) {
  std::array<char, 16 * 1024> chunk;
  for (;;) {
    size_t n = 0;
    if (pending.size() > 0) {
      n = asio::buffer_copy(asio::buffer(chunk), pending.data());
      pending.consume(n);
    } else {
      set_deadline(from, idle_of(ctx));
      auto [ec, got] = co_await from.async_read_some(asio::buffer(chunk), use_nothrow);
      if (ec) {
        break;
      }
      n = got;
    }
    const uint64_t ok = outbound ? ctx.caps.take_out(n) : ctx.caps.take_in(n);
    set_deadline(to, idle_of(ctx));
    auto [ec, w] = co_await asio::async_write(to, asio::buffer(chunk.data(), ok), use_nothrow);
    *counted += w;
    if (ec || ok < n) {
      break;
    }
  }
  beast::error_code ignored;
  beast::get_lowest_layer(to).socket().shutdown(tcp::socket::shutdown_send, ignored);
}

// The HTTP/1.1 exchange over both TLS streams, request by request.
asio::awaitable<void> serve_requests(Context& ctx, TlsStream& cs, TlsStream& us, Upstream& up,
                                     const std::string& name) {
  beast::flat_buffer cbuf, ubuf;
  const std::string authority = (name.find(':') != std::string::npos ? "[" + name + "]" : name) +
                                (up.port == 443 ? "" : ":" + std::to_string(up.port));
  for (int count = 0; count < 100000; ++count) {
    http::request_parser<http::buffer_body> p;
    p.header_limit(kMaxRequestHead);
    p.body_limit(boost::none);
    bool folded = false;
    auto ec = co_await read_head(cs, cbuf, p, count == 0 ? ctx.handshake_timeout : idle_of(ctx),
                                 nullptr, &folded);
    if (ec) {
      if (ec == http::error::header_limit) {
        co_await send_line(
            ctx, cs, http::status::request_header_fields_too_large,
            "cordon: request head over " + std::to_string(kMaxRequestHead) + " bytes", false);
      } else if (ec == http::error::bad_transfer_encoding ||
                 ec == http::error::bad_content_length) {
        co_await send_line(ctx, cs, http::status::bad_request,
                           "cordon: request refused: ambiguous body framing (" + ec.message() +
                               "), e.g. Content-Length with Transfer-Encoding",
                           false);
        refuse_event(ctx, up, "network.inspect (request framing)",
                     "ambiguous body framing: " + ec.message());
      } else if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
                 ec != asio::ssl::error::stream_truncated && ec != asio::error::eof &&
                 ec != asio::error::connection_reset) {
        co_await send_line(ctx, cs, http::status::bad_request,
                           "cordon: malformed request (" + ec.message() + ")", false);
      }
      co_return;
    }
    const auto started = Clock::now();
    auto& req = p.get();
    InspectedRequest r{
        name, up.port, up.client, std::string(req.method_string()), std::string(req.target()), ""};
    r.url = "https://" + authority + r.target;
    const bool client_keep = req.keep_alive();
    if (folded) {
      auto refused = refuse_obs_fold(ctx, r.name, r.port, r.method, r.client, "inspect", r.url);
      co_await send_line(ctx, cs, refused.status, refused.line, false);
      co_return;
    }
    if (auto refused = refuse_unless_origin_form(ctx, r.name, r.port, r.method, r.target, r.client,
                                                 "inspect", r.url)) {
      co_await send_line(ctx, cs, refused->status, refused->line, false);
      co_return;
    }
    auto refusal = judge_request_head(ctx, r, p);
    if (!refusal) {
      refusal =
          apply_credentials(ctx, {r.name, r.port, r.client, r.method, r.url, "inspect"}, p.get());
    }
    if (refusal) {
      const bool keep = client_keep && p.is_done() && refusal->status == http::status::forbidden;
      co_await send_line(ctx, cs, refusal->status, refusal->line, keep);
      if (!keep) {
        co_return;
      }
      continue;
    }
    const bool upgrade = beast::iequals(req[http::field::upgrade], "websocket");
    const std::string ws_key(req[http::field::sec_websocket_key]);
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      // Answered here, after the rules allowed the request, so the body follows at once.
      req.erase(http::field::expect);
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      set_deadline(cs, ctx.handshake_timeout);
      co_await asio::async_write(cs, asio::buffer(kContinue), use_nothrow);
    }
    beast::error_code body_ec;
    if (auto body_refusal = co_await scan_request_body(
            ctx, cs, cbuf, p, {r.name, r.port, r.client, r.method, r.url, "inspect"}, idle_of(ctx),
            body_ec)) {
      co_await send_line(ctx, cs, body_refusal->status, body_refusal->line, false);
      co_return;
    }
    if (body_ec) {
      co_return;
    }
    std::optional<BodyGuard> guard;
    BodyFilter filter;
    TrailerFilter trailers;
    if (needs_body_guard(ctx, p)) {
      guard.emplace(ctx, RequestSite{r.name, r.port, r.client, r.method, r.url, "inspect"});
      filter = [&](std::string_view piece, bool last) { return guard->pass(piece, last); };
      trailers = [&](Trailers& t) { return guard->pass_trailers(t); };
    }
    uint64_t req_bytes = 0, resp_bytes = 0;
    std::string cut;
    auto rec = co_await relay_parsed(
        ctx, cs, cbuf, p, us, true, &req_bytes, &cut, nullptr,
        [&](std::string_view piece) { on_request_body(ctx, r, piece); }, filter, trailers);
    up.bytes_out += req_bytes;
    if (guard && guard->refusal()) {
      // Part of the body may have gone: the server's connection is reset (no close_notify), so
      // it never sees the message end; the program gets the 403.
      up.end = "exfil";
      beast::error_code ignored;
      auto& raw = beast::get_lowest_layer(us).socket();
      raw.set_option(asio::socket_base::linger(true, 0), ignored);
      raw.close(ignored);
      co_await send_line(ctx, cs, guard->refusal()->status, guard->refusal()->line, false);
      co_return;
    }
    if (rec) {
      up.end = cut.empty() ? "reset" : cut;
      co_return;
    }
    http::response_parser<http::buffer_body> rp;
    rp.header_limit(kMaxResponseHead);
    rp.body_limit(boost::none);
    if (req.method() == http::verb::head) {
      rp.skip(true);
    }
    set_deadline(us, idle_of(ctx));
    auto [hec, hn] = co_await http::async_read_header(us, ubuf, rp, use_nothrow);
    if (hec) {
      co_await send_line(
          ctx, cs, http::status::bad_gateway,
          "cordon: " + authority + " did not send a response (" + hec.message() + ")", false);
      co_return;
    }
    const unsigned status = rp.get().result_int();
    if (status == 101) {
      // An upgrade passes only as the WebSocket handshake it claims to be.
      const bool valid = upgrade && !ws_key.empty() &&
                         beast::iequals(rp.get()[http::field::upgrade], "websocket") &&
                         rp.get()[http::field::sec_websocket_accept] == websocket_accept(ws_key);
      if (!valid) {
        const std::string line =
            "cordon: " + r.url + " answered 101 without a matching WebSocket handshake";
        refuse_event(ctx, up, "network.inspect (upgrade)", line);
        co_await send_line(ctx, cs, http::status::bad_gateway, line, false);
        co_return;
      }
      const std::string head = head_text(rp.get().base());
      set_deadline(cs, idle_of(ctx));
      auto [wec, w] = co_await asio::async_write(cs, asio::buffer(head), use_nothrow);
      resp_bytes += w;
      emit_http(ctx, up, r.method, r.url, name, up.port, status, req_bytes, resp_bytes, "inspect",
                started);
      if (wec) {
        co_return;
      }
      uint64_t out = 0, in = 0;
      co_await (copy_one_way(ctx, cs, cbuf, us, true, &out) &&
                copy_one_way(ctx, us, ubuf, cs, false, &in));
      up.bytes_out += out;
      up.bytes_in += in + resp_bytes;
      co_return;
    }
    auto sec = co_await relay_parsed(ctx, us, ubuf, rp, cs, false, &resp_bytes, &cut, nullptr);
    up.bytes_in += resp_bytes;
    emit_http(ctx, up, r.method, r.url, name, up.port, status, req_bytes, resp_bytes, "inspect",
              started);
    if (sec) {
      up.end = cut.empty() ? "reset" : cut;
      co_return;
    }
    if (!client_keep || !rp.get().keep_alive()) {
      co_return;
    }
  }
}

}  // namespace

bool should_inspect(const Context& ctx, const Upstream& up) {
  return ctx.ca != nullptr &&
         ctx.policy.inspects(up.name.empty() ? up.addr.to_string() : up.name, up.port);
}

asio::awaitable<void> serve_inspected(Context& ctx, tcp::socket client, tcp::socket upstream,
                                      Upstream up, std::string leftover) {
  const std::string name = up.name.empty() ? up.addr.to_string() : up.name;
  SSL_CTX* leaf = ctx.ca->server_ctx(name);
  if (leaf == nullptr) {
    refuse_event(ctx, up, "network.inspect", "cordon: could not mint a certificate for " + name);
    finish_upstream(ctx, up);
    co_return;
  }
  // asio's context takes ownership of the handle it is given: each holds a reference of its own.
  SSL_CTX_up_ref(leaf);
  asio::ssl::context leaf_ctx(leaf);
  SSL_CTX_up_ref(ctx.upstream_tls);
  asio::ssl::context up_ctx(ctx.upstream_tls);
  TlsStream cs(beast::tcp_stream(std::move(client)), leaf_ctx);
  TlsStream us(beast::tcp_stream(std::move(upstream)), up_ctx);

  // The upstream first: a certificate that fails is reported to the client inside TLS, in words.
  SSL* ussl = us.native_handle();
  const bool ip = is_ip_literal(name);
  if (ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ussl), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ussl, name.c_str());
    SSL_set1_host(ussl, name.c_str());
  }
  set_deadline(us, ctx.policy.connect_timeout);
  auto [uec] = co_await us.async_handshake(asio::ssl::stream_base::client, use_nothrow);
  std::string bad;
  if (uec) {
    const long vr = SSL_get_verify_result(ussl);
    bad = vr != X509_V_OK
              ? std::string("certificate verify failed: ") + X509_verify_cert_error_string(vr)
              : "TLS handshake failed: " + uec.message();
    bad =
        "cordon: the server " + name + ":" + std::to_string(up.port) + " failed TLS (" + bad + ")";
    refuse_event(ctx, up, "network.inspect (upstream certificate)", bad);
    up.end = "upstream_tls";
  }

  set_deadline(cs, ctx.handshake_timeout);
  auto [cec, used] = co_await cs.async_handshake(asio::ssl::stream_base::server,
                                                 asio::buffer(leftover), use_nothrow);
  if (cec) {
    if (bad.empty()) {
      refuse_event(ctx, up, "network.inspect (client handshake)",
                   "cordon: the program's TLS handshake for " + name + " failed (" + cec.message() +
                       "): a client that pins certificates or does not trust the session CA; "
                       "add the host to network.inspect_exclude");
      up.end = "client_tls";
    }
  } else if (!bad.empty()) {
    co_await send_line(ctx, cs, http::status::bad_gateway, bad, false);
  } else {
    co_await serve_requests(ctx, cs, us, up, name);
  }
  // close_notify both ways, bounded; then the sockets close with the streams.
  set_deadline(cs, Millis(1000));
  set_deadline(us, Millis(1000));
  co_await (cs.async_shutdown(use_nothrow) && us.async_shutdown(use_nothrow));
  finish_upstream(ctx, up);
}

}  // namespace cordon::netproxy
