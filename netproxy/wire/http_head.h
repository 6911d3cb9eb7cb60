// HTTP/1.x request-head sniffing: method, target and Host from the first bytes of a connection.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "netproxy/wire/peek.h"

namespace cordon::netproxy::wire {

struct HttpHead {
  ParseStatus status = ParseStatus::NeedMore;
  std::string method;
  std::string target;
  std::string host;      // the Host header value without the port; empty when absent
  int host_port = 0;     // the port in the Host header, 0 when absent
  size_t head_size = 0;  // bytes up to and including the blank line
  // A field line began with SP or HTAB (obs-fold, RFC 9112 5.2): a line folded onto the one
  // before. The head still parses (the folded line is skipped here); callers refuse it with 400,
  // since a server may join the lines differently from cordon.
  bool obs_fold = false;
};

constexpr size_t kMaxHttpHead = 16 * 1024;

// Parses a request head ("GET /x HTTP/1.1\r\nHost: a\r\n\r\n"). NotThis for anything that is not
// an HTTP/1.x request head, for heads over kMaxHttpHead, and for two Host headers.
HttpHead parse_http_head(std::span<const uint8_t> data);

// Whether a request or response head (start line to blank line, as received) has a line folded
// onto the one before it (obs-fold: a line after the start line beginning with SP or HTAB).
bool has_obs_fold(std::string_view head);

// True when `data` is, or begins with, a registered HTTP method (RFC 9110 and WebDAV's) and a
// space, or is a prefix of one: "G", "POS", "GET /x". Such a flight has begun a request head
// (the proxy waits for the rest), where a line protocol's "PING" or "ping" has not.
bool http_request_begun(std::span<const uint8_t> data);

// Splits "host", "host:port", "[v6]", "[v6]:port". Returns false on malformed input.
bool split_host_port(std::string_view in, std::string* host, int* port);

// Absolute-form target "http://host[:port]/path?q" -> host, port (default 80), origin-form path.
bool parse_absolute_http(std::string_view target, std::string* host, uint16_t* port,
                         std::string* path);

}  // namespace cordon::netproxy::wire
