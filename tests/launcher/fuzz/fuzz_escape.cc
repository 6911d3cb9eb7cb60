// libFuzzer target: text::escaped, the one escaping of bytes a sandboxed program chose before a
// terminal shows them. Whatever the input, the output holds no control byte, nothing escaping
// would change again, and (with backslashes escaped) decodes back to the input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "launcher/session/session_text.h"

namespace {

// Undoes escaped(s, {.escape_backslash = true}): \\, \xNN, \uNNNN (NNNN < 0x800: C1 and the
// reordering characters are all below U+FFFF and encoded back as UTF-8).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out.push_back(s[i]);
      continue;
    }
    char k = s[++i];
    if (k == '\\') {
      out.push_back('\\');
    } else if (k == 'x') {
      out.push_back(static_cast<char>(std::stoul(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      unsigned cp = static_cast<unsigned>(std::stoul(s.substr(i + 1, 4), nullptr, 16));
      i += 4;
      if (cp < 0x800) {
        out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
      } else {
        out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
      }
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  std::string out = cordon::launcher::text::escaped(in);
  for (unsigned char c : out) {
    if (c < 0x20 || c == 0x7f) {
      __builtin_trap();  // a control byte reached the terminal
    }
  }
  if (cordon::launcher::text::escaped(out) != out) {
    __builtin_trap();  // something escapable survived
  }
  if (unescape(cordon::launcher::text::escaped(in, {.escape_backslash = true})) != in) {
    __builtin_trap();  // the escaping lost information: two names would look the same
  }
  return 0;
}
