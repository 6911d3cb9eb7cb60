// parse_otlp_url: the few URL forms an OTLP/HTTP collector is reached by, and nothing looser.
#include "policy/otlp_url.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace cordon::policy {

namespace {

constexpr std::string_view kForms = "give http://HOST[:PORT][/PATH] or https://HOST[:PORT][/PATH]";

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' || c == '_';
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::string OtlpUrl::host_header() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != (tls ? 443 : 80)) {
    h += ":" + std::to_string(port);
  }
  return h;
}

Result<OtlpUrl> parse_otlp_url(std::string_view url) {
  const std::string quoted = "\"" + std::string(url.substr(0, 200)) + "\"";
  auto bad = [&](const std::string& why) {
    return make_error(quoted + ": " + why, std::string(kForms));
  };
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return bad("a URL of printable ASCII without spaces is needed (percent-encode the rest)");
    }
  }
  OtlpUrl u;
  const size_t colon = url.find("://");
  if (colon == std::string_view::npos) {
    return bad("no scheme");
  }
  const std::string scheme = lower(url.substr(0, colon));
  if (scheme == "https") {
    u.tls = true;
  } else if (scheme != "http") {
    return bad("the scheme " + scheme + ":// is not one cordon sends OTLP over");
  }
  std::string_view rest = url.substr(colon + 3);
  const size_t end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  std::string_view tail = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  if (authority.find('@') != std::string_view::npos) {
    return bad(
        "user info in the URL would be written into the session's policy.json; "
        "put the collector behind an address that needs none");
  }
  if (tail.find('#') != std::string_view::npos) {
    return bad("a fragment (#…) means nothing to a collector");
  }
  std::string_view port_text;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return bad("an IPv6 address without its closing ]");
    }
    u.host = std::string(authority.substr(1, close - 1));
    in6_addr a6;
    if (::inet_pton(AF_INET6, u.host.c_str(), &a6) != 1) {
      return bad("[" + u.host + "] is not an IPv6 address");
    }
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        return bad("text after the IPv6 address's ]");
      }
      port_text = after.substr(1);
      if (port_text.empty()) {
        return bad("an empty port");
      }
    }
  } else {
    const size_t pc = authority.find(':');
    u.host = lower(authority.substr(0, pc));
    if (pc != std::string_view::npos) {
      port_text = authority.substr(pc + 1);
      if (port_text.empty()) {
        return bad("an empty port");
      }
    }
    if (u.host.empty()) {
      return bad("no host");
    }
    if (u.host.size() > 253 || !std::all_of(u.host.begin(), u.host.end(), name_char) ||
        u.host.front() == '.' || u.host.front() == '-' || u.host.find("..") != std::string::npos) {
      return bad("\"" + u.host + "\" is not a host name or an IPv4 address");
    }
  }
  if (!port_text.empty()) {
    if (port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(),
                                             [](char c) { return c >= '0' && c <= '9'; })) {
      return bad("the port \"" + std::string(port_text) + "\" is not a number");
    }
    const unsigned long p = std::stoul(std::string(port_text));
    if (p == 0 || p > 65535) {
      return bad("the port " + std::string(port_text) + " is not in 1-65535");
    }
    u.port = static_cast<uint16_t>(p);
  } else {
    u.port = u.tls ? 443 : 80;
  }
  // The OTLP/HTTP convention: a base URL gets the logs signal's path; a URL with a path is used
  // as it is (a collector mounted under a prefix).
  if (tail.empty() || tail == "/") {
    u.target = "/v1/logs";
  } else if (tail[0] == '?') {
    u.target = "/v1/logs" + std::string(tail);
  } else {
    u.target = std::string(tail);
  }
  return u;
}

}  // namespace cordon::policy
