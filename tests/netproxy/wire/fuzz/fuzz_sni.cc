// libFuzzer target: the TLS ClientHello / SNI parser on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "netproxy/wire/sni.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = cordon::netproxy::wire::parse_client_hello(std::span<const uint8_t>(data, size));
  if (h.status == cordon::netproxy::wire::ParseStatus::Done && h.has_sni && h.sni.empty()) {
    __builtin_trap();  // a found SNI is never empty
  }
  return 0;
}
