// Small text helpers shared by the summary, `cordon ls` and `cordon log`: durations, sizes,
// signal names, local times, and neutralising hostile bytes before they reach a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace cordon::launcher::text {

// "350ms", "1.2s", "59s", "2m3s", "30m", "1h5m".
std::string duration(std::chrono::milliseconds d);
// "512 B", "23 MiB", "1.5 GiB", "1 GiB".
std::string size(uint64_t bytes);
// "SIGSEGV"; "signal 99" for numbers libc has no name for.
std::string signal_name(int sig);
// Local time of a UTC instant: "2026-11-22 11:57:47" (date_and_time) or "11:57:47.123".
std::string local_datetime(int64_t unix_seconds);
// "2026-11-22T14:01:07.801335Z" -> seconds since the epoch (UTC); -1 when unparseable.
double epoch_seconds(std::string_view rfc3339);
// The same instant in microseconds; -1 when unparseable or before 1970.
int64_t epoch_micros(std::string_view rfc3339);
// "2026-11-22T10:57:47.123456Z" -> "11:57:47.123" in local time; the input unchanged otherwise.
std::string local_clock(std::string_view rfc3339);
// The one function that makes bytes a sandboxed program chose (file names, symlink targets, file
// contents, hostnames) safe to show on a terminal: what it prints can neither drive the terminal
// nor look like something else. C0 controls and DEL become \xNN (ESC, CR, BS, NUL...), C1
// controls U+0080..U+009F become \u00NN (0x9b CSI among them), bytes that are not valid UTF-8
// become \xNN, and characters that reorder or hide text (bidi overrides and isolates, zero-width
// characters, line and paragraph separators) become \uNNNN. Everything else passes as is.
struct EscapeOptions {
  bool keep_tab = false;          // diff lines: a tab only moves right, and code is full of them
  bool escape_backslash = false;  // names: "\\" so a literal "\x1b" cannot pass for an escape
};
std::string escaped(std::string_view s, EscapeOptions o = {});
// escaped(s), cut to `max` bytes (at a character boundary) with "...": one line of an event.
std::string one_line(std::string_view s, size_t max = 4096);

}  // namespace cordon::launcher::text
