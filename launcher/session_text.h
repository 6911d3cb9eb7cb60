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
// "2026-11-22T10:57:47.123456Z" -> "11:57:47.123" in local time; the input unchanged otherwise.
std::string local_clock(std::string_view rfc3339);
// Control characters (ESC sequences a sandboxed program put in a path or a hostname) become
// \xNN, so printing an event can never drive the terminal. Cut to `max` characters with "...".
std::string one_line(std::string_view s, size_t max = 4096);

}  // namespace cordon::launcher::text
