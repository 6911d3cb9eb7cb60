// libFuzzer target: the HTTP/1.x request-head sniffer, its obs-fold flag against the byte check,
// and the absolute-form URL splitter.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "netproxy/wire/http_head.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = cordon::netproxy::wire::parse_http_head(std::span<const uint8_t>(data, size));
  if (h.status == cordon::netproxy::wire::ParseStatus::Done && h.head_size > size) {
    __builtin_trap();
  }
  // A fold the sniffer saw is one the byte check over the same head sees (the front ends refuse
  // on either).
  std::string_view head(reinterpret_cast<const char*>(data), size);
  if (h.status == cordon::netproxy::wire::ParseStatus::Done && h.obs_fold &&
      !cordon::netproxy::wire::has_obs_fold(head.substr(0, h.head_size))) {
    __builtin_trap();
  }
  std::string host, path;
  uint16_t port = 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (cordon::netproxy::wire::parse_absolute_http(text, &host, &port, &path) &&
      (port == 0 || path.empty() || path[0] != '/')) {
    __builtin_trap();
  }
  return 0;
}
