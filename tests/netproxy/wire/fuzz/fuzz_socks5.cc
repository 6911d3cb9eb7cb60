// libFuzzer target: SOCKS5 greeting and request parsing.
#include <cstddef>
#include <cstdint>
#include <span>

#include "netproxy/wire/socks5.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  auto g = cordon::netproxy::wire::socks5::parse_greeting(in);
  if (g.status == cordon::netproxy::wire::ParseStatus::Done && g.size > size) {
    __builtin_trap();
  }
  auto r = cordon::netproxy::wire::socks5::parse_request(in);
  if (r.status == cordon::netproxy::wire::ParseStatus::Done && r.size > size) {
    __builtin_trap();
  }
  return 0;
}
