// The interpreter a script's `#!` line names, from the first bytes of the file: a small parser of
// bytes a package's author chose, kept apart so a fuzzer can reach it
// (tests/launcher/fuzz_shebang).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::launcher {

// "#!/usr/bin/env node" gives "node"; "#!/usr/bin/env -S node --flag" gives "node" (env's
// options and NAME=VALUE assignments skipped); "#!/opt/node/bin/node -x" gives
// "/opt/node/bin/node".
// "" when `head` does not start with "#!" or names nothing. Only the first line counts.
inline std::string shebang_interpreter(std::string_view head) {
  if (head.size() < 3 || head[0] != '#' || head[1] != '!') {
    return {};
  }
  std::string_view line = head.substr(
      2, head.find('\n') == std::string_view::npos ? std::string_view::npos : head.find('\n') - 2);
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    size_t start = line.find_first_not_of(" \t\r", i);
    if (start == std::string_view::npos) {
      break;
    }
    size_t end = std::min(line.find_first_of(" \t\r", start), line.size());
    words.push_back(line.substr(start, end - start));
    i = end;
  }
  if (words.empty()) {
    return {};
  }
  if (words[0].size() >= 4 && words[0].substr(words[0].size() - 4) == "/env") {
    for (size_t w = 1; w < words.size(); ++w) {
      if (words[w][0] != '-' && words[w].find('=') == std::string_view::npos) {
        return std::string(words[w]);
      }
    }
    return {};
  }
  return std::string(words[0]);
}

}  // namespace cordon::launcher
