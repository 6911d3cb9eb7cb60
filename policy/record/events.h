// The session's audit record: events.jsonl, one JSON object per line, each line written with a
// single write(2) on an O_APPEND fd so concurrent writers (launcher, netproxy, fusefs, shim) never
// interleave within a line.
#pragma once

#include <time.h>

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "policy/base/result.h"
#include "policy/base/unique_fd.h"

namespace cordon::record {

// RFC 3339 UTC with microseconds: "2026-11-22T10:57:47.123456Z".
std::string now_rfc3339();

// `ts` as now_rfc3339() writes it, into `buf`, without snprintf (it showed in the proxy's
// per-connection profiles): the part up to the second is formatted once a second per thread.
// Returns a view of `buf`; empty for a year that is not four digits (then use snprintf).
std::string_view format_rfc3339(const timespec& ts, std::array<char, 27>& buf);

class EventLog {
 public:
  EventLog() = default;  // a disabled log: write() is a no-op
  // Opens (creating, mode 0600) `path` for appending.
  static Result<EventLog> open(const std::string& path, std::string session, std::string source);
  // Adopts an already-open O_APPEND fd (a daemon handed one by the launcher).
  static EventLog adopt(UniqueFd fd, std::string session, std::string source);

  // Adds ts, session and source (unless already set), serialises to one line, writes it with one
  // write(2). A line is at most 64 KiB: longer string fields are truncated, never split.
  Status write(nlohmann::json event) const;
  // The same, building the common fields: {"kind": kind, ...fields}.
  Status emit(std::string_view kind, nlohmann::json fields = nlohmann::json::object()) const;

  bool enabled() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }
  const std::string& session() const { return session_; }

 private:
  UniqueFd fd_;
  std::string session_;
  std::string source_;
};

}  // namespace cordon::record
