// libFuzzer target: parse_otlp_url on arbitrary bytes (a policy file is not always the user's
// own), checking that what it accepts is a request cordon can send safely. Built only with
// -DCORDON_FUZZ=ON (clang); tests/run_fuzz.sh runs it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "policy/otlp_url.h"

using namespace cordon::policy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto u = parse_otlp_url(in);
  if (!u.ok()) {
    if (u.error().message.empty()) {
      __builtin_trap();  // a refusal must say why
    }
    return 0;
  }
  // Nothing that could split the request line or a header, and a target that starts the path.
  for (const std::string* s : {&u->host, &u->target}) {
    for (char c : *s) {
      if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
        __builtin_trap();
      }
    }
  }
  if (u->host.empty() || u->port == 0 || u->target.empty() || u->target[0] != '/') {
    __builtin_trap();
  }
  return 0;
}
