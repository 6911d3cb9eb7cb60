// network.credentials in the proxy: the sandbox holds placeholders; requests to a credential's
// hosts get the real value in their place, and a placeholder headed anywhere else is refused.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "netproxy/http_common.h"

namespace cordon::netproxy {

// Reads cordon run's --credentials-fd text (a JSON array of {"env", "placeholder", "value"})
// into ctx.secrets; every credential of the policy has to be in it, and nothing else.
Status load_secrets(Context& ctx, std::string_view text);

// Where a request is headed, for decisions and events.
struct RequestSite {
  std::string_view name;  // the decided name (or IP literal)
  uint16_t port = 0;
  std::string_view client, method, url, mode;
};

// Whether `s`'s value goes in place of its placeholder in a request to `at`: `s` is a credential
// bound to at's name and port, and the request is inspected HTTPS, or plain HTTP (mode "http" or
// "transparent") to a credential whose plain_http allows it. Toward its own host over plain HTTP
// without plain_http, the placeholder passes as it is: neither the value nor a refusal.
bool substitutes(const Secret& s, const RequestSite& at);

// Before a request head is forwarded: toward a credential's hosts (where it `substitutes`), each
// of its placeholders in the target and header values becomes the value (same length, so framing
// is unchanged) and its "header" is set; toward any other host, a placeholder (or canary) in the
// target or any header name or value, in any form a body is scanned for (find_secret), is a 403
// with a net.exfil event naming the credential (never its value) and the form ("encoding").
std::optional<RuleRefusal> apply_credentials(Context& ctx, const RequestSite& at,
                                             http::request<http::buffer_body>& req);

// The same for a chunked request's trailer fields, before they are forwarded (as trailers): the
// channel in a refusal is "trailer NAME" (lowercase); bound placeholders in values are replaced.
std::optional<RuleRefusal> apply_credentials_to_trailers(Context& ctx, const RequestSite& at,
                                                         Trailers& fields);

// The 403 and net.exfil event for `s`'s placeholder (or canary) found in `channel` of a request to
// `at`, `encoding` ("", "base64", "url-encoded hex", ...) saying in what form; network.on_exfil:
// kill is told. The line and event name the secret, never its value.
RuleRefusal refuse_exfil(Context& ctx, const RequestSite& at, const Secret& s,
                         const std::string& channel, const std::string& encoding = "");

// Request bodies of Content-Length up to this are read whole before any of them is forwarded,
// so a refusal reaches the server as nothing at all; longer and chunked ones stream through a
// BodyGuard (body_guard.h), and a refusal ends them on their way.
constexpr uint64_t kMaxScannedBody = 1 << 20;

// The same for a whole request body (`size` bytes at `body`, changed in place): the channel in
// the refusal and event is "body"; the secrets' encodings are looked for as by a BodyGuard.
std::optional<RuleRefusal> apply_credentials_to_body(Context& ctx, const RequestSite& at,
                                                     char* body, size_t size);

// Whether scan_request_body judges this request's body whole (secrets in the policy, a
// Content-Length body of 1 to kMaxScannedBody bytes). A body that needs judging and is not judged
// whole has to go through a BodyGuard.
inline bool scans_body_whole(const Context& ctx, const http::request_parser<http::buffer_body>& p) {
  const auto length = p.content_length();
  return !ctx.secrets.empty() && !p.is_done() && !p.chunked() && length && *length > 0 &&
         *length <= kMaxScannedBody;
}
inline bool needs_body_guard(const Context& ctx, const http::request_parser<http::buffer_body>& p) {
  return !ctx.secrets.empty() && !p.is_done() && !scans_body_whole(ctx, p);
}

// A request body that scans_body_whole is read whole into `buf` (behind any of it already there)
// and judged by apply_credentials_to_body before the relay forwards it from `buf` as usual;
// other bodies are left to stream. A refusal leaves the body unread past `buf`: the caller closes
// the connection. `ec` is set when reading the body failed (the caller ends the connection
// without an answer).
template <class Stream>
asio::awaitable<std::optional<RuleRefusal>> scan_request_body(
    Context& ctx, Stream& in, beast::flat_buffer& buf,
    const http::request_parser<http::buffer_body>& p, const RequestSite& at, Millis timeout,
    beast::error_code& ec, Clock::time_point* watched = nullptr) {
  if (!scans_body_whole(ctx, p)) {
    co_return std::nullopt;
  }
  const auto length = p.content_length();
  const auto want = static_cast<size_t>(*length);
  while (buf.size() < want) {
    set_deadline(in, timeout);
    auto [rec, n] = co_await in.async_read_some(buf.prepare(want - buf.size()), use_nothrow);
    touch(watched);
    buf.commit(n);
    if (rec) {
      ec = rec;
      co_return std::nullopt;
    }
  }
  co_return apply_credentials_to_body(ctx, at, static_cast<char*>(buf.data().data()), want);
}

}  // namespace cordon::netproxy
