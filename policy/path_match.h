// segments_match: the one segment-wise path matcher behind PathPattern::matches, header-only and
// allocation-free so the preload shim (no libstdc++ at run time) evaluates the same rules.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string_view>

#include "policy/glob.h"

namespace cordon::policy {

// Walks the segments of a path string, skipping empty and "." segments, without allocating.
// Only non-throwing string_view members are used (no substr), so no libstdc++ symbol is needed.
class SegmentCursor {
 public:
  explicit SegmentCursor(std::string_view s) : s_(s) { skip(); }
  bool done() const { return pos_ >= s_.size(); }
  std::string_view peek() const { return std::string_view(s_.data() + pos_, end_ - pos_); }
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

// Whether the normalized pattern `pat` matches `path` or one of its ancestors. Segments play the
// role of characters in classic wildcard matching: "**" is the star, every other segment a
// one-element glob ('*' within the segment, '?' one character), and the pattern ends in an
// implicit "**" (a match of an ancestor covers everything beneath). With one-element tokens,
// remembering only the last star is exact; worst case O(|pat| * |path|), and no allocation: this
// runs for every pattern on every file access the filesystem layer and the shim check.
// `path` must not contain ".." (PathPattern::matches resolves it first). `ancestors` false: the
// whole path must match (HTTP rules), no implicit trailing "**".
inline bool segments_match(std::string_view pat, std::string_view path, bool ancestors = true) {
  SegmentCursor p(pat), s(path);
  bool have_star = false;
  SegmentCursor star_p = p, star_s = s;
  while (!s.done()) {
    std::string_view tok = p.done() ? std::string_view() : p.peek();
    if (p.done() && ancestors) {
      return true;  // the pattern matched an ancestor of `path`
    }
    if (tok == "**") {
      p.next();
      have_star = true;
      star_p = p;
      star_s = s;
      continue;
    }
    if (!p.done() && glob_match(tok, s.peek())) {
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

// Whether something strictly beneath `path` could match `pat` with `path`'s own last segment
// named by the pattern (a literal or glob segment, not swallowed by a "**"): ".git" for
// "**/.git/config", ".github" for "**/.github/workflows/**". A file or symlink standing at such a
// name stands for what the pattern protects (a `.git` file points git at another directory, a
// `.github` symlink at another tree). "**" alone never makes a name stand for anything, or every
// file would. A set of pattern positions is simulated (an NFA over segments), so it is exact and
// O(|pat| * |path|) without allocation; patterns of more than 63 segments answer true.
inline bool segments_name_prefix(std::string_view pat, std::string_view path) {
  std::string_view tok[64];
  size_t n = 0;
  for (SegmentCursor p(pat); !p.done(); p.next()) {
    if (n == 63) {
      return true;  // unreasonably deep: fail towards protection
    }
    tok[n++] = p.peek();
  }
  // Positions reachable without consuming a segment: a "**" may match nothing.
  auto closure = [&](uint64_t set) {
    for (size_t i = 0; i < n; ++i) {
      if ((set >> i & 1) && tok[i] == "**") {
        set |= uint64_t{1} << (i + 1);
      }
    }
    return set;
  };
  uint64_t any = closure(1), named = 0;
  bool consumed = false;
  for (SegmentCursor s(path); !s.done(); s.next()) {
    uint64_t next = 0, by_name = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!(any >> i & 1)) {
        continue;
      }
      if (tok[i] == "**") {
        next |= uint64_t{1} << i;
      } else if (glob_match(tok[i], s.peek())) {
        next |= uint64_t{1} << (i + 1);
        by_name |= uint64_t{1} << (i + 1);
      }
    }
    any = closure(next);
    named = closure(by_name);
    consumed = true;
  }
  // Some pattern segment is left to match beneath `path` after a name matched its last segment.
  uint64_t unfinished = n == 0 ? 0 : (uint64_t{1} << n) - 1;
  return consumed && (named & unfinished) != 0;
}

}  // namespace cordon::policy
