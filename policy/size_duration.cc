// Sizes ("64M", "1.5G") and durations ("1m30s", "250ms"): parsing and canonical formatting.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "policy/loader.h"

namespace cordon::policy {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

// A decimal number "123" or "1.25", split into its integer part and its fraction digits. Exact
// integer arithmetic throughout: "1.5G" must be 1610612736, not a rounded double.
struct Decimal {
  uint64_t whole = 0;
  uint64_t frac = 0;      // the fraction digits as an integer ("25" for .25)
  uint64_t frac_div = 1;  // 10^digits
};

// Consumes a decimal from the front of `s`; nullopt on no digits or overflow.
std::optional<Decimal> take_decimal(std::string_view& s) {
  Decimal d;
  size_t i = 0;
  bool any = false;
  while (i < s.size() && is_digit(s[i])) {
    uint64_t digit = static_cast<uint64_t>(s[i] - '0');
    if (d.whole > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return std::nullopt;
    }
    d.whole = d.whole * 10 + digit;
    any = true;
    ++i;
  }
  if (any && i < s.size() && s[i] == '.') {  // ".5" is refused: write "0.5"
    ++i;
    bool frac_any = false;
    while (i < s.size() && is_digit(s[i])) {
      // More than 18 fraction digits adds nothing a byte or a millisecond can hold.
      if (d.frac_div < 1000000000000000000ull) {
        d.frac = d.frac * 10 + static_cast<uint64_t>(s[i] - '0');
        d.frac_div *= 10;
      }
      frac_any = true;
      ++i;
    }
    if (!frac_any) {
      return std::nullopt;  // "1." is a typo, not a number
    }
    any = true;
  }
  if (!any) {
    return std::nullopt;
  }
  s.remove_prefix(i);
  return d;
}

// d * mult, exactly; nullopt on overflow or when the result is not a whole number of units.
std::optional<uint64_t> scale(const Decimal& d, uint64_t mult) {
  if (d.whole != 0 && d.whole > std::numeric_limits<uint64_t>::max() / mult) {
    return std::nullopt;
  }
  uint64_t base = d.whole * mult;
  uint64_t part = 0;
  if (d.frac != 0) {
    // frac < 10^18 and mult <= 2^60: the product needs 128 bits to stay exact.
    unsigned __int128 num = static_cast<unsigned __int128>(d.frac) * mult;
    if (num % d.frac_div != 0) {
      return std::nullopt;
    }
    part = static_cast<uint64_t>(num / d.frac_div);
  }
  if (base > std::numeric_limits<uint64_t>::max() - part) {
    return std::nullopt;
  }
  return base + part;
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view text) {
  if (iequals(text, "unlimited")) {
    return 0;
  }
  std::string_view s = text;
  auto d = take_decimal(s);
  if (!d) {
    return std::nullopt;
  }
  if (!s.empty() && s.front() == ' ') {
    s.remove_prefix(1);  // "1 G" reads naturally; allow exactly one space before the unit
    if (s.empty()) {
      return std::nullopt;
    }
  }
  uint64_t mult = 1;
  if (!s.empty()) {
    // Every spelling is a binary multiple: "1G", "1GB", "1GiB" all mean 2^30 bytes. Policies
    // are about limits, and mixing decimal and binary units there only breeds off-by-7% bugs.
    static constexpr struct {
      char letter;
      int shift;
    } kUnits[] = {{'k', 10}, {'m', 20}, {'g', 30}, {'t', 40}, {'p', 50}, {'e', 60}};
    char first = lower(s.front());
    std::string_view rest = s.substr(1);
    if (first == 'b' && rest.empty()) {
      mult = 1;
    } else {
      bool found = false;
      for (const auto& u : kUnits) {
        if (u.letter == first) {
          mult = 1ull << u.shift;
          found = true;
        }
      }
      if (!found || !(rest.empty() || iequals(rest, "b") || iequals(rest, "ib"))) {
        return std::nullopt;
      }
    }
  }
  return scale(*d, mult);
}

std::optional<Millis> parse_duration(std::string_view text) {
  std::string_view s = text;
  if (s.empty()) {
    return std::nullopt;
  }
  // A bare number is seconds ("90", "1.5").
  {
    std::string_view probe = s;
    auto d = take_decimal(probe);
    if (d && probe.empty()) {
      auto ms = scale(*d, 1000);
      if (!ms || *ms > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return std::nullopt;
      }
      return Millis(static_cast<int64_t>(*ms));
    }
  }
  static constexpr struct {
    std::string_view name;
    uint64_t ms;
  } kUnits[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  uint64_t total = 0;
  uint64_t last_unit = std::numeric_limits<uint64_t>::max();
  while (!s.empty()) {
    auto d = take_decimal(s);
    if (!d) {
      return std::nullopt;
    }
    uint64_t unit = 0;
    // kUnits lists "ms" before "m", so the longer unit wins.
    for (const auto& u : kUnits) {
      if (s.size() >= u.name.size() && iequals(s.substr(0, u.name.size()), u.name)) {
        unit = u.ms;
        s.remove_prefix(u.name.size());
        break;
      }
    }
    // Components must come largest first and once each ("1m30s", not "30s1m" or "1m1m").
    if (unit == 0 || unit >= last_unit) {
      return std::nullopt;
    }
    last_unit = unit;
    auto part = scale(*d, unit);
    if (!part || total > std::numeric_limits<uint64_t>::max() - *part) {
      return std::nullopt;
    }
    total += *part;
  }
  if (total > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return Millis(static_cast<int64_t>(total));
}

std::string format_size(uint64_t bytes) {
  if (bytes == 0) {
    return "0";
  }
  static constexpr struct {
    char letter;
    int shift;
  } kUnits[] = {{'E', 60}, {'P', 50}, {'T', 40}, {'G', 30}, {'M', 20}, {'K', 10}};
  for (const auto& u : kUnits) {
    uint64_t m = 1ull << u.shift;
    if (bytes % m == 0) {
      return std::to_string(bytes / m) + u.letter;
    }
  }
  return std::to_string(bytes);
}

std::string format_duration(Millis d) {
  int64_t ms = d.count();
  if (ms <= 0) {
    return "0";
  }
  std::string out;
  static constexpr struct {
    const char* name;
    int64_t ms;
  } kUnits[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
  for (const auto& u : kUnits) {
    if (ms >= u.ms) {
      out += std::to_string(ms / u.ms) + u.name;
      ms %= u.ms;
    }
  }
  return out;
}

}  // namespace cordon::policy
