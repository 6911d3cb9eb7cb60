// libFuzzer target: the record's chain verifier over arbitrary bytes as an events.jsonl (what
// `cordon log --verify` reads from a file anyone with the session's uid may have edited), and the
// promise that a sealed line verifies. Built only with -DCORDON_FUZZ=ON (clang).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "record/chain.h"

using namespace cordon::record;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ChainVerifier v;
  uint64_t n = 0;
  size_t at = 0;
  while (at < in.size()) {
    size_t nl = in.find('\n', at);
    bool complete = nl != std::string_view::npos;
    size_t end = complete ? nl : in.size();
    v.feed(++n, in.substr(at, end - at), complete);
    at = end + 1;
  }
  ChainReport r = v.finish();
  if (!r.ok() && (r.bad_line == 0 || r.bad_line > n || r.why.empty())) {
    __builtin_trap();  // a failure names a line of the input, and why
  }
  if (r.chained > n || r.head.size() != kChainHexLen) {
    __builtin_trap();
  }
  // Whatever an object's bytes, the line seal() makes of it verifies.
  if (in.find('\n') == std::string_view::npos && in.size() >= 2 && in.front() == '{' &&
      in.back() == '}') {
    std::string line = seal(in, kChainStart);
    ChainVerifier one;
    one.feed(1, std::string_view(line).substr(0, line.size() - 1), true);
    ChainReport s = one.finish();
    if (!s.ok() || s.chained != 1) {
      __builtin_trap();
    }
  }
  return 0;
}
