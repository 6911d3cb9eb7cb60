// libFuzzer target: the `#!` line parser (launcher/sandbox/shebang.h) on arbitrary bytes. Built
// only with -DCORDON_FUZZ=ON (clang); tests/run_fuzz.sh runs it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "launcher/sandbox/shebang.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view head(reinterpret_cast<const char*>(data), size);
  std::string name = cordon::launcher::shebang_interpreter(head);
  // What comes back is one word of the first line, never more.
  std::string_view first = head.substr(0, head.find('\n'));
  if (name.size() > first.size() || first.find(name) == std::string_view::npos ||
      name.find_first_of(" \t\r\n") != std::string::npos) {
    std::abort();
  }
  return 0;
}
