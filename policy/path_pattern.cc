// PathPattern: parsing ("~" expansion, normalization) and segment-wise glob matching.
#include "policy/path_pattern.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/glob.h"

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

// '*' = any run of characters within the segment, '?' = one character. Iterative with a single
// backtrack point, so hostile patterns cannot make it exponential.
bool segment_matches(std::string_view pat, std::string_view s) { return glob_match(pat, s); }

// Walks the segments of a path string, skipping empty and "." segments, without allocating.
class SegmentCursor {
 public:
  explicit SegmentCursor(std::string_view s) : s_(s) { skip(); }
  bool done() const { return pos_ >= s_.size(); }
  std::string_view peek() const { return s_.substr(pos_, end_ - pos_); }
  void next() {
    pos_ = end_;
    skip();
  }

 private:
  // Moves to the next non-empty, non-"." segment and finds its end.
  void skip() {
    while (true) {
      while (pos_ < s_.size() && s_[pos_] == '/') {
        ++pos_;
      }
      end_ = pos_;
      while (end_ < s_.size() && s_[end_] != '/') {
        ++end_;
      }
      if (end_ - pos_ == 1 && s_[pos_] == '.') {
        pos_ = end_;
        continue;
      }
      return;
    }
  }
  std::string_view s_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

// Whether `pat` matches `path` or one of its ancestors. Segments play the role of characters in
// classic wildcard matching: "**" is the star, every other segment a one-element predicate, and
// the pattern ends in an implicit "**" (a match of an ancestor covers everything beneath). With
// one-element tokens, remembering only the last star is exact; worst case O(|pat| * |path|), and
// no allocation: this runs for every pattern on every file access the filesystem layer checks.
bool segments_match(std::string_view pat, std::string_view path) {
  SegmentCursor p(pat), s(path);
  bool have_star = false;
  SegmentCursor star_p = p, star_s = s;
  while (!s.done()) {
    if (p.done()) {
      return true;  // the pattern matched an ancestor of `path`
    }
    std::string_view tok = p.peek();
    if (tok == "**") {
      p.next();
      have_star = true;
      star_p = p;
      star_s = s;
      continue;
    }
    if (segment_matches(tok, s.peek())) {
      p.next();
      s.next();
      continue;
    }
    if (!have_star) {
      return false;
    }
    star_s.next();  // let the last "**" swallow one more segment
    s = star_s;
    p = star_p;
  }
  while (!p.done() && p.peek() == "**") {
    p.next();
  }
  return p.done();
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

bool PathPattern::matches(std::string_view path) const {
  std::optional<std::string> resolved;
  if (has_dotdot(path)) {
    resolved = resolve_dotdot(path);
    if (!resolved) {
      return false;
    }
    path = *resolved;
  }
  // "~/x" paths (as a user would type them in a query) are matched against the pattern as written,
  // so a decision does not depend on whose $HOME the caller has.
  if (!path.empty() && path.front() == '~') {
    if (text.empty() || text.front() != '~' || (path.size() > 1 && path[1] != '/')) {
      return false;
    }
    return segments_match(text, path);
  }
  bool abs_path = !path.empty() && path.front() == '/';
  if (abs_path != absolute) {
    return false;
  }
  return segments_match(expanded, path);
}

}  // namespace cordon::policy
