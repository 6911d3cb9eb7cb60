// One events.jsonl line built by hand for the proxy's hot events (net.http per request,
// net.connect per connection): the JSON nlohmann::json would write for the same fields, without
// building a JSON tree twice (EventLog::write copies the event into a second object). Measured on
// the transparent keep-alive path, the two trees and their dump were ~20 % of the proxy's CPU.
#pragma once

#include <array>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include "record/events.h"

namespace cordon::netproxy {

class EventLine {
 public:
  // `source` is the EventLog's (the proxy's events are "netproxy", main.cc).
  explicit EventLine(std::string_view kind, std::string_view source = "netproxy")
      : kind_(kind), source_(source) {}

  // Keys are literals (alive for the line's life); string values are referenced, not copied, and
  // must outlive write(). Hostile bytes are fine: strings are escaped, invalid UTF-8 becomes
  // U+FFFD. At most kMaxFields fields (beyond that: dropped, and write() reports it).
  EventLine& add(std::string_view key, std::string_view value);
  EventLine& add(std::string_view key, const std::string& value) {
    return add(key, std::string_view(value));
  }
  EventLine& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  EventLine& add(std::string_view key, uint64_t value);
  EventLine& add(std::string_view key, int64_t value);
  EventLine& add(std::string_view key, uint32_t value) { return add(key, uint64_t{value}); }
  EventLine& add(std::string_view key, uint16_t value) { return add(key, uint64_t{value}); }
  EventLine& add(std::string_view key, int value) { return add(key, int64_t{value}); }
  EventLine& add(std::string_view key, bool value);

  // The line (keys sorted, as nlohmann's std::map-backed objects print them; ts, session, source
  // and kind added), without the newline.
  std::string text(std::string_view ts, std::string_view session) const;
  // Writes it with one write(2) to the log's O_APPEND fd. A line over EventLog's 64 KiB limit
  // goes through EventLog::write instead, which truncates long strings.
  Status write(const record::EventLog& log) const;

  static constexpr size_t kMaxFields = 24;

 private:
  struct Field {
    std::string_view key;
    enum class Kind : uint8_t { String, Unsigned, Signed, Bool } kind = Kind::String;
    std::string_view s;
    uint64_t u = 0;
    int64_t i = 0;
  };
  EventLine& push(const Field& f);  // drops the field (and notes it) past kMaxFields
  nlohmann::json to_json() const;

  std::string_view kind_;
  std::string_view source_;
  std::array<Field, kMaxFields> fields_{};
  size_t n_ = 0;
  bool overflow_ = false;
};

// Appends `s` as a JSON string (quotes included) as nlohmann::json::dump(-1, ' ', false,
// error_handler_t::replace) writes it: \" \\ \b \f \n \r \t, other control characters as \u00xx,
// everything else as is; each byte of an invalid UTF-8 sequence becomes U+FFFD.
void append_json_string(std::string& out, std::string_view s);

}  // namespace cordon::netproxy
