// HTTP/1.x request-head sniffing (RFC 9112 section 3), bounded and allocation-light.
#include "netproxy/wire/http_head.h"

#include <algorithm>
#include <charconv>

namespace cordon::netproxy::wire {

namespace {

bool is_tchar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

bool parse_port(std::string_view s, int* port) {
  if (s.empty() || s.size() > 5) {
    return false;
  }
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 1 || v > 65535) {
    return false;
  }
  *port = v;
  return true;
}

}  // namespace

bool split_host_port(std::string_view in, std::string* host, int* port) {
  *port = 0;
  if (in.empty()) {
    return false;
  }
  if (in.front() == '[') {
    auto close = in.find(']');
    if (close == std::string_view::npos || close == 1) {
      return false;
    }
    *host = std::string(in.substr(1, close - 1));
    auto rest = in.substr(close + 1);
    if (rest.empty()) {
      return true;
    }
    return rest.front() == ':' && parse_port(rest.substr(1), port);
  }
  auto colon = in.rfind(':');
  if (colon == std::string_view::npos) {
    *host = std::string(in);
    return true;
  }
  if (in.find(':') != colon) {
    return false;  // a bare IPv6 literal without brackets is ambiguous
  }
  *host = std::string(in.substr(0, colon));
  return !host->empty() && parse_port(in.substr(colon + 1), port);
}

bool parse_absolute_http(std::string_view target, std::string* host, uint16_t* port,
                         std::string* path) {
  constexpr std::string_view kScheme = "http://";
  if (target.size() <= kScheme.size() || !iequals(target.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  auto rest = target.substr(kScheme.size());
  auto end = rest.find_first_of("/?#");
  auto authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos) {
    return false;  // userinfo in a proxy target is a classic confusion vector: refuse it
  }
  int p = 0;
  if (!split_host_port(authority, host, &p)) {
    return false;
  }
  *port = static_cast<uint16_t>(p == 0 ? 80 : p);
  // Appends rather than `"/" + std::string`: GCC 12 -O3 -Wrestrict false positive (PR 105329).
  path->assign(1, '/');
  if (end != std::string_view::npos) {
    auto tail = rest.substr(end);
    if (tail.front() == '/') {
      tail.remove_prefix(1);
    }
    path->append(tail);
    if (auto hash = path->find('#'); hash != std::string::npos) {
      path->resize(hash);
    }
  }
  return true;
}

bool has_obs_fold(std::string_view head) {
  for (size_t at = head.find('\n'); at != std::string_view::npos && at + 1 < head.size();
       at = head.find('\n', at + 1)) {
    if (head[at + 1] == ' ' || head[at + 1] == '\t') {
      return true;
    }
  }
  return false;
}

bool http_request_begun(std::span<const uint8_t> data) {
  static constexpr std::string_view kMethods[] = {
      "GET ",   "HEAD ",     "POST ",      "PUT ",   "DELETE ", "CONNECT ", "OPTIONS ", "TRACE ",
      "PATCH ", "PROPFIND ", "PROPPATCH ", "MKCOL ", "COPY ",   "MOVE ",    "LOCK ",    "UNLOCK "};
  std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  for (std::string_view m : kMethods) {
    const size_t n = std::min(text.size(), m.size());
    if (n > 0 && text.substr(0, n) == m.substr(0, n)) {
      return true;
    }
  }
  return false;
}

HttpHead parse_http_head(std::span<const uint8_t> data) {
  HttpHead out;
  std::string_view text(reinterpret_cast<const char*>(data.data()),
                        std::min(data.size(), kMaxHttpHead));
  // A bare LF ends a line for lenient servers and not for us: a head that has one before its
  // end is not a head we can judge (NotThis), however much more arrives.
  bool bare_lf = false;
  for (size_t k = 0; k < text.size(); ++k) {
    if (text[k] == '\n' && (k == 0 || text[k - 1] != '\r')) {
      text = text.substr(0, k);
      bare_lf = true;
      break;
    }
  }
  auto need_more = [&](bool more) {
    return more && !bare_lf ? ParseStatus::NeedMore : ParseStatus::NotThis;
  };
  // Request line: method SP target SP HTTP/1.x CRLF. Validate what is there so far, so that
  // non-HTTP bytes are rejected without waiting for a CRLF that never comes.
  size_t i = 0;
  while (i < text.size() && is_tchar(text[i])) {
    ++i;
  }
  if (i == text.size()) {
    out.status = need_more(i < 16 && data.size() < kMaxHttpHead);
    return out;
  }
  if (i == 0 || i > 16 || text[i] != ' ') {
    out.status = ParseStatus::NotThis;
    return out;
  }
  auto line_end = text.find("\r\n");
  if (line_end == std::string_view::npos) {
    out.status = need_more(data.size() < kMaxHttpHead);
    return out;
  }
  auto line = text.substr(0, line_end);
  auto sp2 = line.rfind(' ');
  if (sp2 <= i) {
    out.status = ParseStatus::NotThis;
    return out;
  }
  auto version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    out.status = ParseStatus::NotThis;
    return out;
  }
  out.method = std::string(line.substr(0, i));
  out.target = std::string(line.substr(i + 1, sp2 - i - 1));
  if (out.target.empty() || out.target.find(' ') != std::string::npos) {
    out.status = ParseStatus::NotThis;
    return out;
  }
  size_t pos = line_end + 2;
  bool seen_host = false;
  for (;;) {
    auto eol = text.find("\r\n", pos);
    if (eol == std::string_view::npos) {
      out.status = need_more(data.size() < kMaxHttpHead);
      return out;
    }
    if (eol == pos) {
      out.head_size = eol + 2;
      out.status = ParseStatus::Done;
      return out;
    }
    auto field = text.substr(pos, eol - pos);
    pos = eol + 2;
    if (field.front() == ' ' || field.front() == '\t') {
      // Judged by the caller (refused); skipping it keeps a folded Host from being read here.
      out.obs_fold = true;
      continue;
    }
    auto colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      out.status = ParseStatus::NotThis;
      return out;
    }
    auto name = field.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_tchar)) {
      out.status = ParseStatus::NotThis;  // also rejects "Host :" (whitespace before colon)
      return out;
    }
    if (iequals(name, "host")) {
      if (seen_host) {
        out.status = ParseStatus::NotThis;  // two Host headers: ambiguous, refuse
        return out;
      }
      seen_host = true;
      if (!split_host_port(trim(field.substr(colon + 1)), &out.host, &out.host_port)) {
        out.status = ParseStatus::NotThis;
        return out;
      }
    }
  }
}

}  // namespace cordon::netproxy::wire
