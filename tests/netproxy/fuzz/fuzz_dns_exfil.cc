// libFuzzer target: the name normaliser and the search of names for secrets (netproxy/body_scan.h,
// name_letters and find_secret_in_name). Built only with -DCORDON_FUZZ=ON (clang);
// tests/run_fuzz.sh runs it.
// Input: byte 0 = secret length (16..47), byte 1 = which encoding to plant (hex / base32), byte 2 =
// seed of the label cuts and of the letters' case, then the secret, then a name. Checked:
// name_letters drops exactly the dots and upper case; a secret's hex or base32, cut into labels
// anywhere and in any case, between any prefix and suffix, is always found; the name as given
// never crashes the search.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "netproxy/body_scan.h"

using cordon::netproxy::BodyScanner;
using cordon::netproxy::find_secret_in_name;
using cordon::netproxy::name_letters;

namespace {

std::string hex_of(std::string_view s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// Base32 (RFC 4648, lower case, unpadded) written bit by bit: independent of the scanner's own.
std::string base32_of(std::string_view s) {
  static const char* kAlphabet = "abcdefghijklmnopqrstuvwxyz234567";
  std::string out;
  uint32_t bits = 0, have = 0;
  for (const char ch : s) {
    bits = bits << 8 | static_cast<unsigned char>(ch);
    have += 8;
    while (have >= 5) {
      out += kAlphabet[bits >> (have - 5) & 31];
      have -= 5;
    }
    bits &= (1u << have) - 1;
  }
  return out;
}

void check_letters(std::string_view name) {
  const std::string l = name_letters(name);
  size_t j = 0;
  for (const char c : name) {
    if (c == '.') {
      continue;
    }
    const char want = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    if (j >= l.size() || l[j] != want) {
      std::abort();
    }
    ++j;
  }
  if (j != l.size()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) {
    return 0;
  }
  const size_t len = 16 + data[0] % 32;
  if (size < 3 + len) {
    return 0;
  }
  const std::string secret(reinterpret_cast<const char*>(data) + 3, len);
  const std::string_view name(reinterpret_cast<const char*>(data) + 3 + len, size - 3 - len);
  const BodyScanner sc({secret});
  check_letters(name);
  (void)find_secret_in_name(sc, name);
  // The secret planted into the name: encoded, cut into labels at random, letters' case random.
  const std::string enc = data[1] % 2 == 0 ? hex_of(secret) : base32_of(secret);
  uint32_t seed = data[2] + 1u;
  std::string planted(name.substr(0, name.size() / 2));
  planted += '.';
  for (size_t i = 0; i < enc.size(); ++i) {
    seed = seed * 1103515245u + 12345u;
    char c = enc[i];
    if ((seed >> 16) % 2 == 1 && c >= 'a' && c <= 'z') {
      c = static_cast<char>(c - 'a' + 'A');
    }
    planted += c;
    if ((seed >> 20) % 13 == 0) {
      planted += '.';
    }
  }
  planted += '.';
  planted += name.substr(name.size() / 2);
  check_letters(planted);
  if (!find_secret_in_name(sc, planted)) {
    std::abort();
  }
  return 0;
}
