// L7 rules: request-path normalisation and the first-match decision over network.rules.
#include "policy/http_rules.h"

#include "policy/path_match.h"

namespace cordon::policy {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// Adds one decoded segment to `out`, resolving "." and "..".
void push_segment(std::string& out, std::string_view seg) {
  if (seg.empty() || seg == ".") {
    return;
  }
  if (seg == "..") {
    size_t slash = out.rfind('/');
    out.resize(slash == std::string::npos ? 0 : slash);
    return;
  }
  out += '/';
  out += seg;
}

}  // namespace

std::optional<std::string> normalize_http_path(std::string_view target, std::string* why) {
  auto refuse = [&](std::string reason) -> std::optional<std::string> {
    if (why) {
      *why = std::move(reason);
    }
    return std::nullopt;
  };
  target = target.substr(0, target.find_first_of("?#"));
  if (target.empty() || target[0] != '/') {
    return refuse("the request path does not start with \"/\"");
  }
  std::string out;
  std::string seg;
  bool in_params = false;  // after a ';' in this segment: cut
  for (size_t i = 0; i < target.size(); ++i) {
    char c = target[i];
    if (c == '/') {
      push_segment(out, seg);
      seg.clear();
      in_params = false;
      continue;
    }
    if (c == '\\') {
      return refuse("the request path contains a backslash (some servers read it as \"/\")");
    }
    if (is_control(static_cast<unsigned char>(c))) {
      return refuse("the request path contains a control byte");
    }
    if (c == '%') {
      int hi = i + 2 < target.size() ? hex_value(target[i + 1]) : -1;
      int lo = hi >= 0 ? hex_value(target[i + 2]) : -1;
      if (lo < 0) {
        return refuse("the request path has a broken percent-escape at byte " + std::to_string(i));
      }
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
      if (c == '/' || c == '\\' || c == '%' || c == ';' ||
          is_control(static_cast<unsigned char>(c))) {
        return refuse("the request path encodes a '/', '\\', '%', ';' or control byte (" +
                      std::string(target.substr(i - 2, 3)) + "), which servers decode differently");
      }
    } else if (c == ';') {
      in_params = true;
    }
    if (!in_params) {
      seg += c;
    }
  }
  push_segment(out, seg);
  if (out.empty()) {
    out = "/";
  }
  return out;
}

bool http_path_matches(std::string_view pattern, std::string_view path) {
  return segments_match(pattern, path, /*ancestors=*/false);
}

HttpDecision decide_http(const std::vector<HttpRule>& rules, std::string_view host, uint16_t port,
                         std::string_view method, std::string_view path) {
  HttpDecision d;
  for (size_t i = 0; i < rules.size(); ++i) {
    const HttpRule& r = rules[i];
    if (!r.host.matches_name(host, port)) {
      continue;
    }
    d.ruled = true;
    bool method_ok = r.methods.empty();
    for (const auto& m : r.methods) {
      method_ok = method_ok || glob_match(m, method, {.question = false, .case_insensitive = true});
    }
    bool path_ok = r.paths.empty();
    for (const auto& p : r.paths) {
      path_ok = path_ok || http_path_matches(p, path);
    }
    if (method_ok && path_ok) {
      d.allow = r.allow;
      d.rule = "network.rules[" + std::to_string(i) + "]";
      return d;
    }
  }
  if (d.ruled) {
    d.allow = false;
    d.rule = "network.rules (no match)";
  }
  return d;
}

}  // namespace cordon::policy
