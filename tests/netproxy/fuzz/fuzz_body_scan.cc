// libFuzzer target: the body scanner (netproxy/body_scan.h) on arbitrary secrets and bodies fed in
// arbitrary pieces. Built only with -DCORDON_FUZZ=ON (clang); tests/run_fuzz.sh runs it.
// Input: byte 0 = secret length (8..71), byte 1 = seed of the piece sizes, then the secret, then
// the body. Checked: the raw secret in the body is always found; pieces change nothing about what
// is found; safe_end never goes back, never passes what was scanned, and holds back a bounded
// amount; no byte of a raw match was ever declared safe before the match.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "netproxy/body_scan.h"

using cordon::netproxy::BodyScan;
using cordon::netproxy::BodyScanner;
using cordon::netproxy::SecretForm;

namespace {

struct Run {
  std::vector<uint64_t> raw_ends;  // raw matches of the secret, as sent
  size_t matches = 0;
};

Run scan(const BodyScanner& sc, std::string_view body, uint32_t seed) {
  BodyScan s(sc);
  Run r;
  uint64_t last_safe = 0;
  const uint64_t bound = 3 * sc.longest() + 2;
  size_t at = 0;
  while (at < body.size()) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = seed == 0 ? body.size() : 1 + (seed >> 16) % 97;
    const auto piece = body.substr(at, n);
    at += piece.size();
    s.feed(piece, [&](const BodyScan::Match& m) {
      ++r.matches;
      if (m.form == SecretForm::Raw && m.stream == BodyScan::Stream::AsSent) {
        r.raw_ends.push_back(m.raw_end);
        // A match's first byte was never declared safe.
        if (last_safe > m.raw_end - m.length) {
          std::abort();
        }
      }
      return true;
    });
    const uint64_t safe = s.safe_end();
    if (safe < last_safe || safe > s.scanned() || s.scanned() - safe > bound || s.scanned() != at) {
      std::abort();
    }
    last_safe = safe;
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) {
    return 0;
  }
  const size_t len = 8 + data[0] % 64;
  if (size < 2 + len) {
    return 0;
  }
  const std::string secret(reinterpret_cast<const char*>(data) + 2, len);
  const std::string_view body(reinterpret_cast<const char*>(data) + 2 + len, size - 2 - len);
  const BodyScanner sc({secret});
  const Run whole = scan(sc, body, 0);
  const Run pieces = scan(sc, body, data[1] + 1u);
  if (whole.matches != pieces.matches || whole.raw_ends != pieces.raw_ends) {
    std::abort();
  }
  // Every occurrence of the secret as sent is reported, at its place.
  std::vector<uint64_t> expect;
  for (size_t i = body.find(secret); i != std::string_view::npos; i = body.find(secret, i + 1)) {
    expect.push_back(i + secret.size());
  }
  if (expect != whole.raw_ends) {
    std::abort();
  }
  return 0;
}
