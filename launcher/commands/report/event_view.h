// What the report shows of one event: its fields with every string made safe to display and cut
// to a bound, so a hostile record can neither reorder text on screen nor blow up the page.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cordon::launcher::report {

inline constexpr size_t kMaxString = 512;  // per string value, in bytes
inline constexpr size_t kMaxItems = 64;    // per array or object

// A copy of `ev` without "session" (the page says it once), every key and string value passed
// through text::escaped (bidi overrides and control characters become visible escapes) and cut
// to kMaxString, arrays and objects cut to kMaxItems with a "…" marker, nesting below `depth` 4
// replaced by its dump's first bytes.
nlohmann::json view_of(const nlohmann::json& ev);

// text::one_line(s, max): a string made safe to display and cut to `max` bytes. Short printable
// ASCII, which nearly every value in a record is, comes back as it is without the escaper's
// per-character work (a fifth of the report's build time went there).
std::string shown(std::string_view s, size_t max = kMaxString);

// The string field `key` of `ev`, or "" (a field of another type counts as absent).
std::string str(const nlohmann::json& ev, const char* key);
// The integer field `key` of `ev`, or `fallback`.
int64_t num(const nlohmann::json& ev, const char* key, int64_t fallback = -1);

}  // namespace cordon::launcher::report
