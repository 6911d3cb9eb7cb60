// The one place every inspected HTTPS request passes through: its head before anything of it is
// forwarded (it may be refused), and its body as it streams upstream.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "netproxy/http_common.h"

namespace cordon::netproxy {

// An inspected request as decided: the connection's name and port, who sent it, its URL.
struct InspectedRequest {
  std::string name;  // the decided name (or IP literal) the TLS connection was opened for
  uint16_t port = 0;
  std::string client;
  std::string method;
  std::string target;  // origin form, as sent
  std::string url;     // https://name[:port]/target, for events
};

// Judges a request head (`p` holds it): framing a server could read differently from us
// (Content-Length with Transfer-Encoding, a Transfer-Encoding other than chunked last, an
// absolute or authority target, a Host naming another server) is a 400, and network.rules
// apply as to plain HTTP. A refusal has its net.refused event already written.
std::optional<RuleRefusal> judge_request_head(Context& ctx, const InspectedRequest& r,
                                              const http::request_parser<http::buffer_body>& p);

// Each piece of request body, in order, as it passes upstream: bytes are forwarded as they are.
void on_request_body(Context& ctx, const InspectedRequest& r, std::string_view piece);

}  // namespace cordon::netproxy
