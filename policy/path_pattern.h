// Path patterns of filesystem.read/write/deny/deny_write/protect and process.exec_allow.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cordon::policy {

// Syntax: "~" and "~/" expand to the home directory given at parse time; "*" matches within one
// path segment, "?" one character, "**" any number of whole segments (including none).
// Absolute patterns ("/etc/x", "~/.ssh") name host paths. Relative patterns (".env", "**/*.pem",
// ".git/hooks/**") are anchored at the workspace root; "**/x" also matches "x" at the root.
// A pattern matches a path if it matches the path itself or any of its ancestors, so denying a
// directory denies everything beneath it.
struct PathPattern {
  std::string text;      // as written
  std::string expanded;  // "~" replaced, "." and duplicate "/" removed
  bool absolute = false;
  bool has_glob = false;

  static std::optional<PathPattern> parse(std::string_view text, std::string_view home,
                                          std::string* why);
  // `path`: absolute host path for absolute patterns, workspace-relative ("a/b", no leading "/")
  // for relative ones. Passing the other kind never matches.
  bool matches(std::string_view path) const;
  // Whether `path`'s last segment is named by the pattern with more of it to match beneath
  // (segments_name_prefix): a non-directory at such a path stands for what the pattern covers.
  bool names_beneath(std::string_view path) const;
  // Whether the pattern may match some path strictly beneath the directory `dir` (same kind of
  // path as for matches()), whether or not that path exists yet: "~/.claude/hooks/**" and
  // "**/.env" may match beneath "~/.claude", "/etc/x" may not. A pattern matching `dir` itself
  // (or an ancestor) matches everything beneath it too.
  bool may_match_beneath(std::string_view dir) const;
  bool operator==(const PathPattern&) const = default;

 private:
  // ".." resolution and the "~"/absolute/relative rules shared by both questions.
  bool match_with(std::string_view path,
                  bool (*segments)(std::string_view, std::string_view)) const;
};

}  // namespace cordon::policy
