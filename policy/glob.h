// glob_match: the one wildcard matcher behind path segments and environment-name patterns.
#pragma once

#include <string_view>

namespace cordon::policy {

struct GlobOptions {
  bool question = true;           // '?' matches one character (paths); literal otherwise
  bool case_insensitive = false;  // environment names match regardless of case
};

// '*' matches any run of characters. Iterative with a single backtrack point, so hostile patterns
// cannot make it exponential.
inline bool glob_match(std::string_view pat, std::string_view s, GlobOptions o = {}) {
  auto fold = [&](char c) {
    return o.case_insensitive && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  size_t p = 0, i = 0;
  size_t star = std::string_view::npos, star_i = 0;
  while (i < s.size()) {
    if (p < pat.size() && pat[p] != '*' &&
        ((o.question && pat[p] == '?') || fold(pat[p]) == fold(s[i]))) {
      ++p;
      ++i;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++;
      star_i = i;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++star_i;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') {
    ++p;
  }
  return p == pat.size();
}

}  // namespace cordon::policy
