// libFuzzer target: `cordon report`'s builder over a hostile events.jsonl. Whatever the bytes, the
// page's data block holds no '<' (so nothing can end the <script> or open a comment), no raw
// U+2028/2029, and parses back as JSON; and the builder neither crashes nor blows up.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "launcher/commands/report/model.h"
#include "launcher/commands/report/page.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon::launcher::report;
  SessionRecord rec;
  rec.id = "20261127-100000-abcdef";
  add_events(rec, std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string page = render_page(build_model(rec));
  const std::string open = "<script type=\"application/json\" id=\"cordon-data\">";
  const size_t a = page.find(open);
  const size_t b = a == std::string::npos ? a : page.find("</script>", a);
  if (a == std::string::npos || b == std::string::npos) {
    std::abort();
  }
  const std::string block = page.substr(a + open.size(), b - a - open.size());
  if (block.find('<') != std::string::npos || block.find("\xE2\x80\xA8") != std::string::npos ||
      block.find("\xE2\x80\xA9") != std::string::npos ||
      nlohmann::json::parse(block, nullptr, false).is_discarded()) {
    std::abort();
  }
  return 0;
}
