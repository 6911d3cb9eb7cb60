// RecordLimiter: token buckets per kind family, and the size cap checked against the file itself.
#include "record/limiter.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

namespace cordon::record {

namespace {

constexpr double kBurstSeconds = 10;
constexpr int64_t kReportEveryNs = 1'000'000'000;

int64_t now_ns() {
  // Coarse is enough for buckets refilled at most a few thousand times a second, and it is the
  // cheapest clock there is (no syscall, no rdtsc).
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The size every writer sees: O_APPEND places each line at the end, so the file's size is the
// one shared counter all writers, in any process, advance and can read.
uint64_t file_size(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

uint64_t RecordLimits::reserve() const {
  return std::clamp<uint64_t>(max_bytes / 8, 256 << 10, 8 << 20);
}

size_t family_of(std::string_view kind) {
  if (is_alert(kind)) {
    return static_cast<size_t>(std::find(std::begin(kFamilies), std::end(kFamilies), "alert") -
                               std::begin(kFamilies));
  }
  std::string_view head = kind.substr(0, kind.find('.'));
  for (size_t i = 0; i + 1 < kFamilyCount; ++i) {
    if (kFamilies[i] == head) {
      return i;
    }
  }
  return kFamilyCount - 1;
}

RecordLimiter::RecordLimiter(RecordLimits limits) : limits_(limits) {
  if (limits_.max_bytes > 0) {
    normal_end_ = limits_.max_bytes > limits_.reserve() ? limits_.max_bytes - limits_.reserve() : 0;
  }
  for (Family& f : families_) {
    f.tokens = kBurstSeconds * limits_.events_per_second;
    f.refilled_ns = now_ns();
  }
}

bool RecordLimiter::take_token(Family& f, int64_t now) {
  const double rate = limits_.events_per_second;
  f.tokens = std::min(kBurstSeconds * rate, f.tokens + rate * (now - f.refilled_ns) / 1e9);
  f.refilled_ns = now;
  if (f.tokens < 1) {
    return false;
  }
  f.tokens -= 1;
  return true;
}

void RecordLimiter::count(Family& f, bool cap) {
  ++(cap ? f.over_cap : f.rate_limited);
  f.pending.store(true, std::memory_order_relaxed);
}

RecordLimiter::Verdict RecordLimiter::admit(std::string_view kind, size_t len, Tier tier, int fd) {
  if (ended_.load(std::memory_order_relaxed)) {
    return Verdict::kDropped;  // after the session's last line: not an event of the session
  }
  Family& f = families_[family_of(kind)];
  if (tier == Tier::kLast) {
    ended_.store(true);
    return Verdict::kWrite;
  }
  if (tier == Tier::kAlert) {
    std::lock_guard lock(f.mu);
    if (limits_.events_per_second > 0 && !take_token(f, now_ns())) {
      count(f, false);
      return Verdict::kDropped;
    }
    if (limits_.max_bytes == 0 ||
        file_size(fd) + len <= limits_.max_bytes - limits_.reserve() / 2) {
      return Verdict::kWrite;
    }
    count(f, true);
    return Verdict::kDropped;
  }
  if (tier != Tier::kNormal) {
    if (limits_.max_bytes == 0 ||
        file_size(fd) + len <= limits_.max_bytes - RecordLimits::kEndRoom) {
      return Verdict::kWrite;
    }
    std::lock_guard lock(f.mu);
    count(f, true);
    return Verdict::kDropped;
  }
  if (limits_.events_per_second > 0) {
    std::lock_guard lock(f.mu);
    if (!take_token(f, now_ns())) {
      count(f, false);
      return Verdict::kDropped;
    }
  }
  if (limits_.max_bytes == 0) {
    return Verdict::kWrite;
  }
  if (!closed_.load(std::memory_order_relaxed)) {
    if (normal_fits(len, fd)) {
      return Verdict::kWrite;
    }
    closed_.store(true, std::memory_order_relaxed);
  }
  {
    std::lock_guard lock(f.mu);
    count(f, true);
  }
  return said_.exchange(true) ? Verdict::kDropped : Verdict::kCapReached;
}

bool RecordLimiter::normal_fits(size_t len, int fd) {
  std::lock_guard lock(size_mu_);
  // Other writers move the end too, so the count is a lower bound: trusted only for a few KiB,
  // and never near the end.
  if (unseen_ >= kLookEvery || seen_size_ + len + kLookEvery > normal_end_) {
    seen_size_ = file_size(fd);
    unseen_ = 0;
  }
  if (seen_size_ + len > normal_end_) {
    return false;
  }
  seen_size_ += len;
  unseen_ += len;
  return true;
}

bool RecordLimiter::close_normal_part(ChainWriter& writer, int fd, std::string_view hit) {
  std::lock_guard lock(cap_mu_);
  // Writers that checked the size at the same time may all have written past the normal part's
  // end before any of them found it full; only a file ending kClosedMargin past it has its
  // limit.hit already.
  const uint64_t closed_at = normal_end_ + kClosedMargin;
  auto pad = [&](uint64_t size, size_t len) -> std::optional<size_t> {
    if (size >= closed_at) {
      return std::nullopt;
    }
    // Pad so that the file ends at the closed mark: from then on no writer's check passes, and
    // a writer that takes the lock after us sees it closed. The padding is JSON whitespace.
    return size + len < closed_at ? closed_at - size - len : 0;
  };
  auto wrote = writer.append(fd, hit, pad);
  return wrote.ok() && *wrote;  // EINTR/ENOLCK: no limit.hit rather than two
}

std::optional<RecordLimiter::Drops> RecordLimiter::report(size_t i, bool now_or_never) {
  Family& f = families_[i];
  std::lock_guard lock(f.mu);
  const int64_t now = now_ns();
  uint64_t total = f.rate_limited + f.over_cap;
  if (total == f.reported || (!now_or_never && now - f.reported_ns < kReportEveryNs)) {
    return std::nullopt;
  }
  f.reported = total;
  f.reported_ns = now;
  f.pending.store(false, std::memory_order_relaxed);
  return Drops{kFamilies[i], f.rate_limited, f.over_cap};
}

std::optional<RecordLimiter::Drops> RecordLimiter::due(std::string_view kind) {
  size_t i = family_of(kind);
  if (!families_[i].pending.load(std::memory_order_relaxed)) {
    return std::nullopt;
  }
  return report(i, false);
}

std::vector<RecordLimiter::Drops> RecordLimiter::unreported() {
  std::vector<Drops> out;
  for (size_t i = 0; i < kFamilyCount; ++i) {
    if (auto d = report(i, true)) {
      out.push_back(*d);
    }
  }
  return out;
}

uint64_t RecordLimiter::dropped_total() const {
  uint64_t n = 0;
  for (const Family& f : families_) {
    std::lock_guard lock(f.mu);
    n += f.rate_limited + f.over_cap;
  }
  return n;
}

}  // namespace cordon::record
