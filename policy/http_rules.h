// L7 rules of network.rules (which methods and paths a host's HTTP requests may use) and the one
// normalisation of request paths they are matched against.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/host_pattern.h"

namespace cordon::policy {

// One entry of network.rules: {"host": "api.github.com", "methods": ["GET"],
// "paths": ["/repos/*/*/issues/**"], "action": "allow"}. Empty methods or paths match any.
// Paths use the segment globs of filesystem patterns ("*" within a segment, "**" any number of
// segments) but match the whole path, not its ancestors.
struct HttpRule {
  HostPattern host;
  std::vector<std::string> methods;  // uppercased
  std::vector<std::string> paths;    // as written (each starts with "/")
  bool allow = false;
  bool operator==(const HttpRule&) const = default;
};

// The path an HTTP request target names, in the one form rules are matched against, or
// std::nullopt with `why` set when the target is ambiguous (servers could read it differently)
// or malformed. `target`: origin-form ("/a/b?q"), the query and fragment are not part of it.
//  - percent-escapes are decoded once; an escape that decodes to '/', '\', '%', ';', NUL or another
//    control byte is refused, as are raw '\' and control bytes and a broken escape;
//  - ";params" are cut from every segment ("/admin;x/" is "/admin/");
//  - empty and "." segments are dropped, ".." removes the segment before it (never above "/");
//  - case is kept (paths are case-sensitive).
// The result starts with "/" and has no empty, "." or ".." segments.
std::optional<std::string> normalize_http_path(std::string_view target, std::string* why);

// Whether `pattern` (an HttpRule path) matches the normalised `path`.
bool http_path_matches(std::string_view pattern, std::string_view path);

struct HttpDecision {
  bool ruled = false;  // some rule names the host: the request is decided by network.rules
  bool allow = true;
  std::string rule;  // "network.rules[2]" or "network.rules (no match)"
};

// First match wins among the rules naming `host`; a host that some rule names but no rule
// matches is denied. Hosts no rule names are not ruled (the destination's decision stands).
// `host`: as normalize_host returns it; `method` compared case-insensitively; `path` normalised.
HttpDecision decide_http(const std::vector<HttpRule>& rules, std::string_view host, uint16_t port,
                         std::string_view method, std::string_view path);

}  // namespace cordon::policy
