// libFuzzer targets: `cordon policy import srt|codex` on arbitrary bytes. One source, two targets:
// CORDON_FUZZ_IMPORT_FORMAT (a compile definition, tests/policy/CMakeLists.txt) names the
// importer, Srt for fuzz_import_srt (JSON) and Codex for fuzz_import_codex (TOML). Whatever is
// imported must render to a policy the loader accepts (what `cordon policy check` runs); anything
// else must be refused with a PolicyError. Built only with -DCORDON_FUZZ=ON (clang);
// tests/run_fuzz.sh runs them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "policy/import/import.h"

using namespace cordon::policy;

namespace {
constexpr import::Format kFormat = import::Format::CORDON_FUZZ_IMPORT_FORMAT;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  LoadOptions o;
  o.home = "/home/fuzz";
  try {
    (void)import::detect_format(in, kFormat == import::Format::Codex ? "fuzz.toml" : "fuzz.json");
  } catch (const PolicyError&) {
    // An ambiguous file is refused by name.
  }
  import::ImportResult r;
  try {
    r = import::import_text(kFormat, in, "fuzz", "", o);
  } catch (const PolicyError&) {
    return 0;  // refusing is the expected outcome for most inputs
  }
  const std::string name(import::format_name(kFormat));
  std::string text = import::render(r, "fuzz", name);
  (void)import::report(r, "fuzz", name);
  try {
    (void)parse_policy(text, o);
  } catch (const PolicyError&) {
    __builtin_trap();  // an import that settles must pass the loader
  }
  return 0;
}
