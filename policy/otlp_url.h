// record.otlp / --otlp: the collector's URL, parsed once for the loader and the exporter alike.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cordon::policy {

struct OtlpUrl {
  bool tls = false;    // https
  std::string host;    // a DNS name, an IPv4 literal or an IPv6 literal without brackets
  uint16_t port = 0;   // given, else 80 or 443
  std::string target;  // the request target: the URL's path and query, "/v1/logs" if it had none
  std::string host_header() const;
};

// http://HOST[:PORT][/PATH][?QUERY] or https://…; no user info (it would be written into
// policy.json), no fragment, only printable ASCII. The error says what is wrong and how to fix it.
Result<OtlpUrl> parse_otlp_url(std::string_view url);

}  // namespace cordon::policy
