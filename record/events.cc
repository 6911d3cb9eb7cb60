// events.jsonl writer: one sealed line per event, one write(2) each, on an O_APPEND fd.
#include "record/events.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "record/chain.h"
#include "record/chain_head.h"

namespace cordon::record {

namespace {
constexpr size_t kMaxField = 4096;

// The writer of a record with the head `head` (an open of events.jsonl.head; invalid: none, the
// flock(2) path). A head that is there but not usable is said once per process.
std::unique_ptr<ChainWriter> chain_writer(UniqueFd head, const std::string& source) {
  if (!head) {
    return std::make_unique<ChainWriter>();
  }
  auto mapped = ChainHead::map(std::move(head));
  if (!mapped.ok()) {
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "cordon (%s): %s: chaining events.jsonl under flock(2)\n",
                   source.c_str(), mapped.error().to_string().c_str());
    });
    return std::make_unique<ChainWriter>();
  }
  return std::make_unique<ChainWriter>(std::move(mapped).value());
}

// Truncates long strings so one event always fits in one atomic write.
void clamp_strings(nlohmann::json& j) {
  if (j.is_string()) {
    auto& s = j.get_ref<std::string&>();
    if (s.size() > kMaxField) {
      s.resize(kMaxField);
      s += "...";
    }
  } else if (j.is_structured()) {
    for (auto& v : j) {
      clamp_strings(v);
    }
  }
}

void put_digits(char* p, unsigned v, int n) {
  for (int k = n - 1; k >= 0; --k) {
    p[k] = static_cast<char>('0' + v % 10);
    v /= 10;
  }
}

}  // namespace

std::string_view format_rfc3339(const timespec& ts, std::array<char, 27>& buf) {
  // The date and time of day change once a second: formatted then, and kept per thread.
  struct Second {
    time_t sec = -1;
    char text[20];  // "YYYY-MM-DDTHH:MM:SS."
  };
  thread_local Second cached;
  if (ts.tv_sec != cached.sec) {
    struct tm tm;
    if (gmtime_r(&ts.tv_sec, &tm) == nullptr || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) {
      return {};  // not four digits of year: the caller formats it the slow way
    }
    put_digits(cached.text, static_cast<unsigned>(tm.tm_year + 1900), 4);
    cached.text[4] = '-';
    put_digits(cached.text + 5, static_cast<unsigned>(tm.tm_mon + 1), 2);
    cached.text[7] = '-';
    put_digits(cached.text + 8, static_cast<unsigned>(tm.tm_mday), 2);
    cached.text[10] = 'T';
    put_digits(cached.text + 11, static_cast<unsigned>(tm.tm_hour), 2);
    cached.text[13] = ':';
    put_digits(cached.text + 14, static_cast<unsigned>(tm.tm_min), 2);
    cached.text[16] = ':';
    put_digits(cached.text + 17, static_cast<unsigned>(tm.tm_sec), 2);
    cached.text[19] = '.';
    cached.sec = ts.tv_sec;
  }
  std::memcpy(buf.data(), cached.text, sizeof cached.text);
  put_digits(buf.data() + 20, static_cast<unsigned>(ts.tv_nsec / 1000), 6);
  buf[26] = 'Z';
  return {buf.data(), buf.size()};
}

std::string now_rfc3339() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  std::array<char, 27> fast;
  if (std::string_view s = format_rfc3339(ts, fast); !s.empty()) {
    return std::string(s);
  }
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
  return buf;
}

Result<EventLog> EventLog::open(const std::string& path, std::string session, std::string source,
                                RecordLimits limits) {
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return sys_error("open(\"" + path + "\", O_APPEND|O_CREAT)");
  }
  UniqueFd efd(fd);
  auto head = open_head_file(AT_FDCWD, path + std::string(kHeadSuffix));
  if (!head.ok()) {
    std::fprintf(stderr, "cordon (%s): %s: chaining events.jsonl under flock(2)\n", source.c_str(),
                 head.error().to_string().c_str());
    return adopt(std::move(efd), std::move(session), std::move(source), limits);
  }
  return adopt(std::move(efd), std::move(session), std::move(source), limits,
               std::move(head).value());
}

EventLog EventLog::adopt(UniqueFd fd, std::string session, std::string source, RecordLimits limits,
                         UniqueFd head) {
  EventLog log;
  log.fd_ = std::move(fd);
  log.chain_ = chain_writer(std::move(head), source);
  log.session_ = std::move(session);
  log.source_ = std::move(source);
  if (limits.max_bytes > 0 || limits.events_per_second > 0) {
    log.limiter_ = std::make_unique<RecordLimiter>(limits);
  }
  return log;
}

std::string EventLog::render(nlohmann::json event) const {
  nlohmann::json line = nlohmann::json::object();
  line["ts"] = now_rfc3339();
  line["session"] = session_;
  line["source"] = source_;
  for (auto& [k, v] : event.items()) {
    line[k] = std::move(v);
  }
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() + kSealOverhead > kMaxLine) {
    clamp_strings(line);
    text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return text;
}

Status EventLog::raw_write(std::string_view line) const {
  auto wrote = chain_->append(fd_.get(), line);
  if (!wrote.ok()) {
    return std::move(wrote).error();
  }
  return {};
}

Status EventLog::report(const RecordLimiter::Drops& d, bool last) const {
  nlohmann::json f = {{"kind", "record.dropped"},
                      {"family", std::string(d.family)},
                      {"rate_limited", d.rate_limited},
                      {"over_cap", d.over_cap},
                      {"events_per_second", limiter_->limits().events_per_second}};
  if (last) {
    f["final"] = true;
  }
  return put("record.dropped", render(std::move(f)), Tier::kEssential);
}

Status EventLog::put(std::string_view kind, std::string line, Tier tier) const {
  if (!limiter_) {
    return raw_write(line);
  }
  if (tier == Tier::kNormal && is_alert(kind)) {
    tier = Tier::kAlert;
  }
  switch (limiter_->admit(kind, line.size() + kSealOverhead, tier, fd_.get())) {
    case RecordLimiter::Verdict::kDropped:
      return {};
    case RecordLimiter::Verdict::kCapReached: {
      const RecordLimits& l = limiter_->limits();
      std::string hit =
          render({{"kind", "limit.hit"},
                  {"limit", "record"},
                  {"value", l.max_bytes},
                  {"unit", "bytes"},
                  {"reserve", l.reserve()},
                  {"reason",
                   "events.jsonl reached record.max_bytes less the reserve kept for the end of "
                   "the session: events are counted, not written, from here on; the session "
                   "keeps running"}});
      limiter_->close_normal_part(*chain_, fd_.get(), hit);
      return {};
    }
    case RecordLimiter::Verdict::kWrite:
      break;
  }
  if (tier == Tier::kNormal || tier == Tier::kAlert) {
    if (auto due = limiter_->due(kind)) {
      TRY(report(*due, false));
    }
  }
  return raw_write(line);
}

Status EventLog::write(nlohmann::json event, Tier tier) const {
  if (!fd_.valid()) {
    return {};
  }
  std::string kind;
  if (auto it = event.find("kind"); it != event.end() && it->is_string()) {
    kind = it->get<std::string>();
  }
  return put(kind, render(std::move(event)), tier);
}

Status EventLog::emit(std::string_view kind, nlohmann::json fields, Tier tier) const {
  if (!fields.is_object()) {
    fields = nlohmann::json::object();
  }
  fields["kind"] = std::string(kind);
  return write(std::move(fields), tier);
}

Status EventLog::append(std::string_view kind, std::string_view line) const {
  if (!fd_.valid()) {
    return {};
  }
  if (!line.empty() && line.back() == '\n') {
    line.remove_suffix(1);
  }
  if (line.size() + kSealOverhead > kMaxLine) {
    // Within kMaxLine before sealing, not after: rendered again, its long strings cut.
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) {
      return write(std::move(j));
    }
  }
  return put(kind, std::string(line), Tier::kNormal);
}

Status EventLog::report_drops() const {
  if (!fd_.valid() || !limiter_) {
    return {};
  }
  for (const auto& d : limiter_->unreported()) {
    TRY(report(d, true));
  }
  return {};
}

}  // namespace cordon::record
