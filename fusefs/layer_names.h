// The upper layer's on-disk vocabulary: whiteouts, opaque markers, temp and origin records.
//
// Everything cordon-fs keeps in the upper layer besides the user's files is a name beginning with
// ".wh." (as fuse-overlayfs does, so it works rootless: no char-device whiteouts, no xattrs):
//   .wh.NAME          zero-size regular file: NAME is deleted in the merged view
//   .wh..wh..opq      in a directory: the lower directory underneath is not merged (opaque)
//   .wh..wh.tmp.N     a copy-up or snapshot in progress; never visible, removed at startup
//   .wh..wh.orig.NAME one line "ino size mtime_ns" of the lower file NAME was copied up from
//                     (commit refuses NAME when the real file no longer matches it)
// Internal names all start with ".wh..wh." so they can never be the whiteout of a user name: every
// name starting with ".wh." is reserved in the view (lookup ENOENT, create EPERM, hidden from
// readdir).
#pragma once

#include <string>
#include <string_view>

namespace cordon::fusefs {

inline constexpr std::string_view kWhiteoutPrefix = ".wh.";
inline constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";
inline constexpr std::string_view kTempPrefix = ".wh..wh.tmp.";
inline constexpr std::string_view kOriginPrefix = ".wh..wh.orig.";

// True for names the view never shows or creates.
inline bool is_reserved_name(std::string_view name) { return name.starts_with(kWhiteoutPrefix); }

// A single path component the daemon may use: not empty, not "." or "..", no '/', no NUL.
inline bool is_plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos && name.size() <= 255;
}

inline std::string whiteout_name(std::string_view name) {
  return std::string(kWhiteoutPrefix) + std::string(name);
}
inline std::string origin_name(std::string_view name) {
  return std::string(kOriginPrefix) + std::string(name);
}
// The user name a whiteout hides, or "" if `upper_name` is not a whiteout of a user name.
inline std::string_view whiteout_target(std::string_view upper_name) {
  if (!upper_name.starts_with(kWhiteoutPrefix) || upper_name.starts_with(".wh..wh.")) {
    return {};
  }
  return upper_name.substr(kWhiteoutPrefix.size());
}

}  // namespace cordon::fusefs
