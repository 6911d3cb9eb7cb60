// Reading the session record safely: every open is relative to a directory fd with O_NOFOLLOW, so
// a symlink or FIFO planted in a session directory can neither redirect nor hang a reader.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::launcher::store {

// "20261122-105747-3f9a2c": UTC date and time, then 6 hex digits of randomness.
inline constexpr size_t kIdLength = 22;
bool is_session_id(std::string_view name);
// What users may type as an id or a prefix of one: [0-9a-f-] only, so no '/', "." or ".." can
// ever reach a path.
bool is_id_text(std::string_view text);
// A fresh id for `unix_seconds` with `random24` (24 bits) as suffix.
std::string make_session_id(int64_t unix_seconds, uint32_t random24);
// The start time encoded in an id (UTC seconds since the epoch), or -1 if it is not an id.
int64_t session_id_time(std::string_view id);

// Opens the sessions root (following symlinks: ~/.local/state may legitimately be one).
// ENOENT is returned as an error with code ENOENT so callers can say "no sessions yet".
Result<UniqueFd> open_root(const std::string& root);
// The session ids under the root, oldest first. Two sessions started in the same second are
// ordered by the modification time of their policy.json, which Session::create() sets to the
// creation instant in nanoseconds.
Result<std::vector<std::string>> list_sessions(int root_fd);
// `cordon run` holds an exclusive flock(2) on its session directory from before the directory
// has its id until cordon exits; the kernel drops it with the last fd, so a killed cordon holds
// nothing. Takes that lock on `dir_fd` if nobody holds it: true = taken, and held until every
// duplicate of dir_fd is closed; false = a live cordon (or another prune) holds it.
bool try_lock_session(int dir_fd);
// Opens root/<id> as a directory without following a symlink.
Result<UniqueFd> open_session_dir(int root_fd, std::string_view id);
// Opens dir/<name> for reading: O_NOFOLLOW, O_NONBLOCK (a FIFO cannot block us), regular files
// only.
Result<UniqueFd> open_file(int dir_fd, const char* name);
// Reads at most `limit` bytes of dir/<name>; a longer file is an error (summary.json is small).
Result<std::string> read_file(int dir_fd, const char* name, size_t limit);
// Reads the first `max` bytes of an open file, and the last complete-or-torn line (at most `max`
// bytes) without reading the middle.
std::string read_head(int fd, size_t max);
std::string read_last_line(int fd, size_t max);

// Parses one events.jsonl line, which may come from a hostile writer: anything nested deeper than
// kMaxDepth is refused before parsing (nlohmann's dump() and comparisons recurse, so a line of
// 100k '[' would overflow the stack of `cordon log`). Returns a discarded value when refused.
inline constexpr int kMaxDepth = 32;
nlohmann::json parse_event(std::string_view line);

// Streams an events.jsonl from its current offset: emit(line_number, line, complete) per line,
// without the newline. `complete` is false for a line too long to be one EventLog wrote (over
// kMaxLine: not buffered) and for a torn last line that fails to parse later anyway. Reads at
// most `max_bytes` (0 = no limit); returns true if that limit cut the scan short.
inline constexpr size_t kMaxLine = 1u << 20;
using LineFn = std::function<void(size_t, std::string_view, bool)>;
Result<bool> for_each_line(int fd, size_t max_bytes, const LineFn& emit);

}  // namespace cordon::launcher::store
