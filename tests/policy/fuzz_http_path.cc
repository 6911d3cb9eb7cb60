// libFuzzer target: network.rules' request-path normaliser and path matcher on arbitrary bytes,
// checking the promises of normalize_http_path (its result is in the one normal form). Built
// only with -DCORDON_FUZZ=ON (clang); tests/run_fuzz.sh runs it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "policy/http_rules.h"

using namespace cordon::policy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // Before the first NUL: a path pattern; after it: the request target (or the whole input).
  size_t z = in.find('\0');
  std::string_view pattern = z == std::string_view::npos ? in : in.substr(0, z);
  std::string_view target = z == std::string_view::npos ? in : in.substr(z + 1);
  std::string why;
  auto path = normalize_http_path(target, &why);
  if (!path) {
    if (why.empty()) {
      __builtin_trap();  // a refusal must say why
    }
    return 0;
  }
  const std::string& p = *path;
  if (p.empty() || p[0] != '/' || (p.size() > 1 && p.back() == '/')) {
    __builtin_trap();
  }
  for (char c : p) {
    if (c == '%' || c == '\\' || c == ';' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      __builtin_trap();  // decoded once, params cut, nothing left to decode differently
    }
  }
  if (p.find("//") != std::string::npos || p.find("/./") != std::string::npos ||
      p.find("/../") != std::string::npos || p.ends_with("/..") || p.ends_with("/.")) {
    __builtin_trap();
  }
  // Normal form is a fixed point (a decoded '?' or '#' would start a query on a second pass).
  if (p.find_first_of("?#") == std::string::npos) {
    auto again = normalize_http_path(p, &why);
    if (!again || *again != p) {
      __builtin_trap();
    }
  }
  (void)http_path_matches(pattern, p);
  return 0;
}
