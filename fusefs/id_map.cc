// Parsing the ids cordon-fs's owner map is given on its command line.
#include "fusefs/id_map.h"

#include <charconv>
#include <string>

namespace cordon::fusefs {

namespace {

// A decimal id below (uid_t)-1, which chown(2) reads as "leave it".
bool parse_id(std::string_view text, uint32_t* out) {
  if (text.empty() || text.size() > 10) {
    return false;
  }
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v == static_cast<uint32_t>(-1)) {
    return false;
  }
  *out = v;
  return true;
}

}  // namespace

Result<Ids> parse_ids(std::string_view text, std::string_view flag) {
  size_t colon = text.find(':');
  uint32_t uid = 0, gid = 0;
  if (colon == std::string_view::npos || !parse_id(text.substr(0, colon), &uid) ||
      !parse_id(text.substr(colon + 1), &gid)) {
    return make_error(std::string(flag) + " \"" + std::string(text) +
                          "\" is not UID:GID (two decimal ids, e.g. 1000:1000)",
                      "pass numeric ids, as `id -u`:`id -g` print them");
  }
  return Ids{static_cast<uid_t>(uid), static_cast<gid_t>(gid)};
}

}  // namespace cordon::fusefs
