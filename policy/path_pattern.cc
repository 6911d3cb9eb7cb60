// PathPattern: parsing ("~" expansion, normalization) and segment-wise glob matching.
#include "policy/path_pattern.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/glob.h"
#include "policy/path_match.h"

namespace cordon::policy {
namespace {

bool fail(std::string* why, std::string msg) {
  if (why != nullptr) {
    *why = std::move(msg);
  }
  return false;
}

// Splits on '/', dropping empty and "." segments.
std::vector<std::string_view> segments(std::string_view p) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) {
      j = p.size();
    }
    std::string_view seg = p.substr(i, j - i);
    if (!seg.empty() && seg != ".") {
      out.push_back(seg);
    }
    i = j + 1;
  }
  return out;
}

bool has_dotdot(std::string_view path) {
  if (path.find("..") == std::string_view::npos) {
    return false;  // the common case, in one memchr-speed pass
  }
  for (SegmentCursor c(path); !c.done(); c.next()) {
    if (c.peek() == "..") {
      return true;
    }
  }
  return false;
}

// Resolves ".." lexically (the filesystem layer resolves symlinks itself, never through these
// strings). A ".." above the root of a relative path leaves the workspace: nullopt, which matches
// nothing. Only paths that contain ".." pay for the copy.
std::optional<std::string> resolve_dotdot(std::string_view path) {
  std::vector<std::string_view> out;
  // A leading "~" is a root too: what lies above the home directory is unknown here.
  size_t floor = 0;
  for (SegmentCursor c(path); !c.done(); c.next()) {
    std::string_view seg = c.peek();
    if (out.empty() && floor == 0 && seg == "~" && path.front() == '~') {
      out.push_back(seg);
      floor = 1;
      continue;
    }
    if (seg == "..") {
      if (out.size() == floor) {
        if (path.empty() || path.front() != '/') {
          return std::nullopt;
        }
        continue;  // "/.." is "/"
      }
      out.pop_back();
    } else {
      out.push_back(seg);
    }
  }
  std::string r = (!path.empty() && path.front() == '/') ? "/" : "";
  for (size_t i = 0; i < out.size(); ++i) {
    r += (i == 0 ? "" : "/") + std::string(out[i]);
  }
  return r;
}

// Resolves ".." in `path` (into `storage`, only when it has one). False when it climbs above the
// root of a relative path: such a path matches nothing.
bool without_dotdot(std::string_view& path, std::optional<std::string>& storage) {
  if (!has_dotdot(path)) {
    return true;
  }
  storage = resolve_dotdot(path);
  if (!storage) {
    return false;
  }
  path = *storage;
  return true;
}

}  // namespace

std::optional<PathPattern> PathPattern::parse(std::string_view text, std::string_view home,
                                              std::string* why) {
  if (text.empty()) {
    fail(why, "the path is empty");
    return std::nullopt;
  }
  if (text.find('\0') != std::string_view::npos) {
    fail(why, "the path contains a NUL byte");
    return std::nullopt;
  }
  if (text.size() > 4096) {
    fail(why, "the path is longer than PATH_MAX (4096)");
    return std::nullopt;
  }
  PathPattern p;
  p.text = std::string(text);
  std::string raw;
  if (text.front() == '~') {
    if (text.size() > 1 && text[1] != '/') {
      fail(why, "\"~user\" paths are not supported; write \"~/...\" or an absolute path");
      return std::nullopt;
    }
    if (home.empty() || home.front() != '/') {
      fail(why, "\"~\" needs an absolute home directory, and $HOME is not set to one");
      return std::nullopt;
    }
    raw = std::string(home) + "/" + std::string(text.substr(1));
  } else {
    raw = std::string(text);
  }
  p.absolute = raw.front() == '/';
  std::string expanded = p.absolute ? "/" : "";
  bool first = true;
  for (std::string_view seg : segments(raw)) {
    if (seg == "..") {
      fail(why, "\"..\" segments are not allowed in a pattern; write the path it means");
      return std::nullopt;
    }
    if (seg.find_first_of("*?") != std::string_view::npos) {
      p.has_glob = true;
    }
    if (!first) {
      expanded += "/";
    }
    expanded += seg;
    first = false;
  }
  p.expanded = std::move(expanded);
  return p;
}

bool PathPattern::may_match_beneath(std::string_view dir) const {
  if (matches(dir)) {
    return true;
  }
  std::optional<std::string> resolved;
  if (!without_dotdot(dir, resolved)) {
    return false;
  }
  bool abs_dir = !dir.empty() && dir.front() == '/';
  if (abs_dir != absolute) {
    return false;
  }
  // The pattern's segments as an automaton ("**" loops on any segment): run it over the segments
  // of `dir`; a state left with pattern segments to spare can go on to match below `dir`.
  std::vector<std::string_view> pat = segments(expanded);
  std::vector<bool> at(pat.size() + 1, false), next(pat.size() + 1);
  auto close = [&](std::vector<bool>& states) {  // "**" may also match no segment at all
    for (size_t i = 0; i < pat.size(); ++i) {
      if (states[i] && pat[i] == "**") {
        states[i + 1] = true;
      }
    }
  };
  at[0] = true;
  close(at);
  for (SegmentCursor c(dir); !c.done(); c.next()) {
    std::fill(next.begin(), next.end(), false);
    for (size_t i = 0; i < pat.size(); ++i) {
      if (!at[i]) {
        continue;
      }
      if (pat[i] == "**") {
        next[i] = true;
      } else if (glob_match(pat[i], c.peek())) {
        next[i + 1] = true;
      }
    }
    close(next);
    at.swap(next);
  }
  for (size_t i = 0; i < pat.size(); ++i) {
    if (at[i]) {
      return true;
    }
  }
  return false;
}

bool PathPattern::matches(std::string_view path) const {
  return match_with(path, [](std::string_view pat, std::string_view p) {
    return segments_match(pat, p);  // ancestors: a pattern naming a directory covers what it holds
  });
}

bool PathPattern::names_beneath(std::string_view path) const {
  return match_with(path, segments_name_prefix);
}

bool PathPattern::match_with(std::string_view path,
                             bool (*segments)(std::string_view, std::string_view)) const {
  std::optional<std::string> resolved;
  if (!without_dotdot(path, resolved)) {
    return false;
  }
  // "~/x" paths (as a user would type them in a query) are matched against the pattern as written,
  // so a decision does not depend on whose $HOME the caller has.
  if (!path.empty() && path.front() == '~') {
    if (text.empty() || text.front() != '~' || (path.size() > 1 && path[1] != '/')) {
      return false;
    }
    return segments(text, path);
  }
  bool abs_path = !path.empty() && path.front() == '/';
  if (abs_path != absolute) {
    return false;
  }
  return segments(expanded, path);
}

}  // namespace cordon::policy
