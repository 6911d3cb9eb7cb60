// What the HTTP front ends share: head limits, a parsed head as bytes, the network.rules check
// and the net.http event.
#pragma once

#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "netproxy/context.h"
#include "netproxy/wire/http_head.h"

namespace cordon::netproxy {

struct Upstream;
namespace http = beast::http;

constexpr uint32_t kMaxRequestHead = 16 * 1024;
constexpr uint32_t kMaxResponseHead = 64 * 1024;

// A parsed head as Beast serialises it (the bytes `os << header` gives), straight into one
// string: no ostream (its construction and locale cost more than the copy, per message).
template <bool isRequest>
std::string head_text(const http::header<isRequest, http::fields>& h) {
  auto text = [](const auto& bufs) {
    std::string out(beast::buffer_bytes(bufs), '\0');
    asio::buffer_copy(asio::buffer(out), bufs);
    return out;
  };
  if constexpr (isRequest) {
    http::fields::writer fr{h, h.version(), h.method()};
    return text(fr.get());
  } else {
    http::fields::writer fr{h, h.version(), h.result_int()};
    return text(fr.get());
  }
}

// network.rules for one request (host as decided, target in origin form): a refusal (403 naming
// the rule, or 400 for a path the rules cannot judge) with its net.refused event, or nullopt
// when the request may go.
struct RuleRefusal {
  http::status status;
  std::string line;
};
std::optional<RuleRefusal> check_rules(Context& ctx, std::string_view host, uint16_t port,
                                       std::string_view method, std::string_view target,
                                       const std::string& client, std::string_view mode,
                                       const std::string& url);

// A request head with a folded line (obs-fold, RFC 9112 5.2; wire::has_obs_fold): the 400 and
// its net.refused event (rule "network (obs-fold)"). A server may join folded lines otherwise
// than cordon does (with a space, with nothing, or not at all), so what it reads is not what was
// judged: such a request is refused, never forwarded, in every front end.
RuleRefusal refuse_obs_fold(Context& ctx, std::string_view host, uint16_t port,
                            std::string_view method, const std::string& client,
                            std::string_view mode, const std::string& url);

// A request sent to a server directly (transparent plain HTTP, inspected HTTPS) names a path
// (origin-form, "*" for OPTIONS). A URL there (absolute-form) names a host of its own, which a
// server or a proxy behind it may go to instead of the one decided on: std::nullopt for
// origin-form, else the 400 and its net.refused event (rule "network (request target)").
std::optional<RuleRefusal> refuse_unless_origin_form(Context& ctx, std::string_view host,
                                                     uint16_t port, std::string_view method,
                                                     std::string_view target,
                                                     const std::string& client,
                                                     std::string_view mode, const std::string& url);

// A deadline per operation on a tcp_stream. Plain sockets are only used for connections under
// the idle sweeper (`watched` below), which keeps one deadline for the whole connection.
inline void set_deadline(beast::tcp_stream& s, Millis timeout) { s.expires_after(timeout); }
inline void set_deadline(tcp::socket&, Millis) {}
inline void set_deadline(beast::ssl_stream<beast::tcp_stream>& s, Millis timeout) {
  beast::get_lowest_layer(s).expires_after(timeout);
}
// Records a move on a watched connection (nullptr: not watched).
inline void touch(Clock::time_point* watched) {
  if (watched != nullptr) {
    *watched = Clock::now();
  }
}

// Reads a message head into `p`, like http::async_read_header, within `timeout` for all of it. A
// head already complete in `buf` (the transparent peek read the first one; a keep-alive client's
// next request often came with the last) is parsed in place, with no read operation or timer.
// Body bytes read with the head stay in `buf`. *folded (may be null) is set when the head, as
// received, has a line folded onto the one before (obs-fold): Beast joins such lines, so the
// parsed head would not show it. `watched`: see relay_message (then `timeout` is not used).
// Errors are Beast's: end_of_stream when the peer closed before a byte, partial_message after.
template <bool isRequest, class Stream>
asio::awaitable<beast::error_code> read_head(Stream& in, beast::flat_buffer& buf,
                                             http::parser<isRequest, http::buffer_body>& p,
                                             Millis timeout, Clock::time_point* watched = nullptr,
                                             bool* folded = nullptr) {
  char last = 0;  // the last byte the parser took: a fold can straddle two of its steps
  bool fold = false;
  bool armed = false;  // one deadline for the whole head, as Beast's read: no slow trickle
  for (;;) {
    if (buf.size() > 0) {
      beast::error_code ec;
      const size_t used = p.put(buf.data(), ec);
      const std::string_view took(static_cast<const char*>(buf.data().data()), used);
      if (!took.empty()) {
        fold = fold || wire::has_obs_fold(took) ||
               (last == '\n' && (took.front() == ' ' || took.front() == '\t'));
        last = took.back();
      }
      buf.consume(used);
      if (!ec && p.is_header_done()) {
        if (folded != nullptr) {
          *folded = fold;
        }
        co_return ec;
      }
      if (ec && ec != http::error::need_more) {
        co_return ec;
      }
    }
    if (!armed) {
      set_deadline(in, timeout);
      armed = true;
    }
    auto [ec, n] =
        co_await in.async_read_some(buf.prepare(beast::read_size(buf, 64 * 1024)), use_nothrow);
    touch(watched);
    buf.commit(n);
    if (ec == asio::error::eof) {
      co_return (buf.size() == 0 && !p.got_some())
          ? beast::error_code(http::error::end_of_stream)
          : beast::error_code(http::error::partial_message);
    }
    if (ec) {
      co_return ec;
    }
  }
}

// What a relay does with each piece of a request body before writing it (BodyGuard::pass): the
// piece in, with whether the body ends with it; out, the bytes to write now (fewer, more or others
// than came in), or nullopt to stop the message where it is.
using BodyFilter = std::function<std::optional<std::string_view>(std::string_view, bool)>;

// A chunked message's trailer fields (RFC 9112 7.1.2), name and value, in the order received.
using Trailers = std::vector<std::pair<std::string, std::string>>;
// What a relay does with them before they are written: changed in place (a credential's value in
// place of its placeholder), or false to stop the message before its last chunk.
using TrailerFilter = std::function<bool(Trailers&)>;

// Beast's parser adds trailer fields to the message's fields: those past the first `head_fields`
// are taken out (so that a head not yet written does not carry them) and returned.
template <bool isRequest>
Trailers take_trailers(http::message<isRequest, http::buffer_body>& m, size_t head_fields) {
  Trailers out;
  auto it = m.begin();
  for (size_t i = 0; i < head_fields && it != m.end(); ++i) {
    ++it;
  }
  while (it != m.end()) {
    out.emplace_back(std::string(it->name_string()), std::string(it->value()));
    it = m.erase(it);
  }
  return out;
}

// Streams a message (head already parsed into `p`, not yet written) from `in` to `out` through a
// bounded buffer, the shape of Beast's relay example: for chunked bodies the framing has to be
// parsed to find the message's end, and a TLS stream cannot splice. `on_body` (may be empty) sees
// each piece of body as it passes, in order; then `filter` (may be empty) decides what of it is
// written (a stop is an operation_aborted error). A chunked message's trailer fields go out after
// its last chunk as trailers (never in the head), each as `on_trailers` (may be empty) leaves it;
// its false stops the message before the last chunk (operation_aborted). Counts bytes written;
// `outbound` says which byte budget they are charged to. Returns an error, or a cap name in *cut
// when a budget ran out. `watched`: see relay_message.
template <bool isRequest, class Stream>
asio::awaitable<beast::error_code> relay_parsed(
    Context& ctx, Stream& in, beast::flat_buffer& buf,
    http::parser<isRequest, http::buffer_body>& p, Stream& out, bool outbound, uint64_t* written,
    std::string* cut, Clock::time_point* watched,
    const std::function<void(std::string_view)>& on_body = {}, const BodyFilter& filter = {},
    const TrailerFilter& on_trailers = {}) {
  http::serializer<isRequest, http::buffer_body> sr{p.get()};
  std::array<char, 16 * 1024> chunk;
  const auto head_fields = static_cast<size_t>(std::distance(p.get().begin(), p.get().end()));
  std::string last_chunk;  // "0", the trailer fields, CRLF: written by us, not the serializer
  const auto timeout = ctx.policy.idle_timeout.count() > 0 ? ctx.policy.idle_timeout
                                                           : Millis(std::chrono::hours(24));
  do {
    if (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      set_deadline(in, timeout);
      auto [ec, n] = co_await http::async_read(in, buf, p, use_nothrow);
      touch(watched);
      if (ec == http::error::need_buffer) {
        ec = {};
      }
      if (ec) {
        co_return ec;
      }
      p.get().body().size = chunk.size() - p.get().body().size;
      p.get().body().data = chunk.data();
      p.get().body().more = !p.is_done();
      if (on_body) {
        on_body(std::string_view(chunk.data(), p.get().body().size));
      }
      if (filter) {
        const auto out = filter(std::string_view(chunk.data(), p.get().body().size), p.is_done());
        if (!out) {
          co_return beast::error_code(asio::error::operation_aborted);
        }
        // The serializer only reads through the pointer. Nothing to write is a null buffer: a
        // chunked serializer would frame an empty one as "0\r\n\r\n", the end of the body.
        p.get().body().data = out->empty() ? nullptr : const_cast<char*>(out->data());
        p.get().body().size = out->size();
      }
      if (p.is_done() && p.chunked()) {
        auto trailers = take_trailers(p.get(), head_fields);
        if (!trailers.empty()) {
          if (on_trailers && !on_trailers(trailers)) {
            co_return beast::error_code(asio::error::operation_aborted);
          }
          // The serializer ends a body with an empty last chunk: this one carries the fields.
          last_chunk = "0\r\n";
          for (const auto& [name, value] : trailers) {
            last_chunk += name + ": " + value + "\r\n";
          }
          last_chunk += "\r\n";
          p.get().body().more = true;
          if (p.get().body().size == 0) {
            p.get().body().data = nullptr;
          }
        }
      }
    } else {
      p.get().body().data = nullptr;
      p.get().body().size = 0;
      p.get().body().more = false;
    }
    set_deadline(out, timeout);
    auto [ec, w] = co_await http::async_write(out, sr, use_nothrow);
    touch(watched);
    if (ec == http::error::need_buffer) {
      ec = {};
    }
    *written += w;
    uint64_t ok = outbound ? ctx.caps.take_out(w) : ctx.caps.take_in(w);
    if (ec) {
      co_return ec;
    }
    if (ok < w) {
      // The budget ran out inside this chunk: cut here (an HTTP message cannot be trimmed).
      *cut = outbound ? "network.max_bytes_out" : "network.max_bytes_in";
      co_return beast::error_code(asio::error::connection_aborted);
    }
  } while (!p.is_done() && !sr.is_done());
  if (!last_chunk.empty()) {
    set_deadline(out, timeout);
    auto [ec, w] = co_await asio::async_write(out, asio::buffer(last_chunk), use_nothrow);
    touch(watched);
    *written += w;
    const uint64_t ok = outbound ? ctx.caps.take_out(w) : ctx.caps.take_in(w);
    if (ec) {
      co_return ec;
    }
    if (ok < w) {
      *cut = outbound ? "network.max_bytes_out" : "network.max_bytes_in";
      co_return beast::error_code(asio::error::connection_aborted);
    }
  }
  co_return beast::error_code{};
}

// One net.http event per relayed request; skipped without an event log (it is built per
// request). `mode` is added when not empty, `duration_ms` when `started` is set.
void emit_http(const Context& ctx, const Upstream& up, std::string_view method,
               std::string_view url, std::string_view name, uint16_t port, unsigned status,
               uint64_t req_bytes, uint64_t resp_bytes, std::string_view mode,
               Clock::time_point started = {});

}  // namespace cordon::netproxy
