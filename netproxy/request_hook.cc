// Judging inspected requests: framing, Host and network.rules.
#include "netproxy/request_hook.h"

#include "netproxy/wire/http_head.h"

namespace cordon::netproxy {

std::optional<RuleRefusal> judge_request_head(Context& ctx, const InspectedRequest& r,
                                              const http::request_parser<http::buffer_body>& p) {
  const auto& req = p.get();
  std::string why;
  const bool has_te = req.find(http::field::transfer_encoding) != req.end();
  const bool has_cl = req.find(http::field::content_length) != req.end();
  if (has_te && has_cl) {
    why = "both Content-Length and Transfer-Encoding (a request-smuggling pair)";
  } else if (has_te && !p.chunked()) {
    why = "a Transfer-Encoding whose last coding is not chunked";
  } else if (r.target.empty() || r.target[0] != '/') {
    why = "a request target that is not a path (\"" + r.target.substr(0, 200) + "\")";
  } else {
    std::string host;
    int port = 0;
    const std::string given(req[http::field::host]);
    if (!wire::split_host_port(given, &host, &port) ||
        policy::normalize_host(host) != policy::normalize_host(r.name) ||
        (port != 0 && port != r.port)) {
      why = "Host \"" + given.substr(0, 200) + "\" does not name " + r.name +
            ", the server this TLS connection was decided for";
    }
  }
  if (!why.empty()) {
    RuleRefusal refusal{http::status::bad_request,
                        "cordon: " + r.method + " " + r.url + " refused: " + why};
    ctx.emit("net.refused", {{"name", r.name},
                             {"port", r.port},
                             {"mode", "inspect"},
                             {"decision", "deny"},
                             {"rule", "network.inspect (request framing)"},
                             {"client", r.client},
                             {"method", r.method},
                             {"url", r.url},
                             {"reason", refusal.line}});
    return refusal;
  }
  return check_rules(ctx, r.name, r.port, r.method, r.target, r.client, "inspect", r.url);
}

void on_request_body(Context&, const InspectedRequest&, std::string_view) {}

}  // namespace cordon::netproxy
