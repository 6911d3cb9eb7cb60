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

// Before a request head is forwarded: toward a credential's hosts, each of its placeholders in
// the target and header values becomes the value (same length, so framing is unchanged) and its
// "header" is set; toward any other host, a placeholder in the target or any header is a 403
// with a net.exfil event naming the credential (never its value).
std::optional<RuleRefusal> apply_credentials(Context& ctx, const RequestSite& at,
                                             http::request<http::buffer_body>& req);

}  // namespace cordon::netproxy
