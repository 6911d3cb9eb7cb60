// libFuzzer target: `cordon policy import srt` on arbitrary bytes as sandbox-runtime settings
// (JSON). Whatever is imported must render to a policy the loader accepts (what `cordon policy
// check` runs); anything else must be refused with a PolicyError. Built only with -DCORDON_FUZZ=ON
// (clang); tests/run_fuzz.sh runs it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "policy/import/import.h"

using namespace cordon::policy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  LoadOptions o;
  o.home = "/home/fuzz";
  try {
    (void)import::detect_format(in, "fuzz.json");
  } catch (const PolicyError&) {
    // An ambiguous file is refused by name.
  }
  import::ImportResult r;
  try {
    r = import::import_text(import::Format::Srt, in, "fuzz", "", o);
  } catch (const PolicyError&) {
    return 0;  // refusing is the expected outcome for most inputs
  }
  std::string text = import::render(r, "fuzz", "sandbox-runtime settings");
  (void)import::report(r, "fuzz", "sandbox-runtime settings");
  try {
    (void)parse_policy(text, o);
  } catch (const PolicyError&) {
    __builtin_trap();  // an import that settles must pass the loader
  }
  return 0;
}
