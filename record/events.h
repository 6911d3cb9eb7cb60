// The session's audit record: events.jsonl, one JSON object per line, each line written with a
// single write(2) on an O_APPEND fd so concurrent writers (launcher, netproxy, fusefs, shim) never
// interleave within a line. Each writer bounds its share (record/limiter.h).
#pragma once

#include <time.h>

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"
#include "record/chain_writer.h"
#include "record/limiter.h"

namespace cordon::record {

// RFC 3339 UTC with microseconds: "2026-11-22T10:57:47.123456Z".
std::string now_rfc3339();

// `ts` as now_rfc3339() writes it, into `buf`, without snprintf (it showed in the proxy's
// per-connection profiles): the part up to the second is formatted once a second per thread.
// Returns a view of `buf`; empty for a year that is not four digits (then use snprintf).
std::string_view format_rfc3339(const timespec& ts, std::array<char, 27>& buf);

// The longest line any writer appends; longer string fields are cut to fit.
inline constexpr size_t kMaxLine = 64 * 1024;

class EventLog {
 public:
  EventLog() = default;  // a disabled log: write() is a no-op
  // Opens (creating, mode 0600) `path` for appending, and its head `path`.head (created too when
  // absent; record/chain_head.h). Each writer opens the file itself (or is given its own open of
  // it): without a head, writers exclude each other with flock, which works between distinct opens
  // of the file only. A head that cannot be opened is said once on stderr; lines are then chained
  // under flock(2).
  static Result<EventLog> open(const std::string& path, std::string session, std::string source,
                               RecordLimits limits);
  // Adopts an already-open O_APPEND fd (a daemon handed one by the launcher) and the record's head
  // (`head`: an open of events.jsonl.head, handed over with it; invalid: flock(2), said on stderr
  // when a head was given but is not usable).
  static EventLog adopt(UniqueFd fd, std::string session, std::string source, RecordLimits limits,
                        UniqueFd head = {});

  // Adds ts, session and source (unless already set), serialises to one line, writes it with one
  // write(2). A line is at most kMaxLine: longer string fields are truncated, never split. An
  // event the limits drop is counted (and reported in a later record.dropped), not an error.
  Status write(nlohmann::json event, Tier tier = Tier::kNormal) const;
  // The same, building the common fields: {"kind": kind, ...fields}.
  Status emit(std::string_view kind, nlohmann::json fields = nlohmann::json::object(),
              Tier tier = Tier::kNormal) const;
  // A line built elsewhere (netproxy's EventLine), newline included, of kind `kind`; at most
  // kMaxLine bytes.
  Status append(std::string_view kind, std::string_view line) const;
  // The writer's last word: one record.dropped per kind family with drops not yet reported.
  Status report_drops() const;
  // Events this writer's limits dropped so far.
  uint64_t dropped() const { return limiter_ ? limiter_->dropped_total() : 0; }

  bool enabled() const { return fd_.valid(); }
  // Whether lines are chained through the record's head (false: flock(2), or disabled).
  bool has_head() const { return chain_ && chain_->has_head(); }
  int fd() const { return fd_.get(); }
  const std::string& session() const { return session_; }
  const std::string& source() const { return source_; }

 private:
  // `line` is the JSON object without its newline; seals it and adds it.
  Status put(std::string_view kind, std::string line, Tier tier) const;
  Status raw_write(std::string_view line) const;
  std::string render(nlohmann::json event) const;
  Status report(const RecordLimiter::Drops& d, bool last) const;

  UniqueFd fd_;
  std::string session_;
  std::string source_;
  std::unique_ptr<RecordLimiter> limiter_;  // null: no limits
  std::unique_ptr<ChainWriter> chain_;      // set with fd_
};

}  // namespace cordon::record
