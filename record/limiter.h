// The bounds one writer of events.jsonl enforces: a token bucket per kind family, and the file's
// size cap, which every writer of the file (launcher, netproxy, cordon-fs, the shim's collector:
// several processes) respects through the size of the file itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy.h"
#include "record/chain_writer.h"

namespace cordon::record {

struct RecordLimits {
  uint64_t max_bytes = 0;          // the file's cap; 0 = none (tools, benchmarks)
  uint32_t events_per_second = 0;  // per kind family, with a burst of 10 s; 0 = none
  static RecordLimits from(const policy::RecordPolicy& p) {
    return {p.max_bytes, p.events_per_second};
  }
  // The end of the file kept for what closes a session: limit.hit, record.dropped, session.end,
  // and the lines other writers had in flight when the normal part filled up.
  uint64_t reserve() const;
  // The part of the reserve that only the session's last line may use.
  static constexpr uint64_t kEndRoom = 16 << 10;
};

// What part of the cap an event may use.
enum class Tier : uint8_t {
  kNormal,     // rate-limited; written while the file stays within max_bytes - reserve()
  kAlert,      // net.exfil, fs.canary (EventLog picks it by kind): rate-limited in a bucket of
               // their own, which a flood of other events cannot spend, and written within
               // max_bytes - reserve() / 2: a program that fills the record first cannot hide
               // the alerts that follow, and half the kept part stays for the end
  kEssential,  // never rate-limited; within max_bytes - kEndRoom (limit.hit, record.dropped)
  kLast,       // session.end: within max_bytes, and written even past it (it is one line);
               // the writer writes nothing after it
};

// Which bucket a kind falls in: its text up to the first dot ("net.http" -> "net"), "other" for
// the rest. The alert kinds (is_alert) have the bucket "alert" whatever their text.
inline constexpr std::string_view kFamilies[] = {"net",  "fs",    "proc", "limit",
                                                 "shim", "alert", "other"};
inline constexpr size_t kFamilyCount = std::size(kFamilies);
size_t family_of(std::string_view kind);
// The kinds written in Tier::kAlert: a secret leaving (net.exfil), a decoy read (fs.canary).
inline bool is_alert(std::string_view kind) { return kind == "net.exfil" || kind == "fs.canary"; }

class RecordLimiter {
 public:
  explicit RecordLimiter(RecordLimits limits);
  RecordLimiter(const RecordLimiter&) = delete;
  RecordLimiter& operator=(const RecordLimiter&) = delete;

  enum class Verdict : uint8_t {
    kWrite,
    kDropped,     // rate-limited, or the normal part is full: counted for the family
    kCapReached,  // the normal part is full and this writer has not yet said so: counted, and the
                  // caller offers the cap's limit.hit line to close_normal_part()
  };
  // Thread-safe. For an event of `len` bytes about to be appended to `fd` (O_APPEND).
  Verdict admit(std::string_view kind, size_t len, Tier tier, int fd);

  // Appends `hit` (the cap's limit.hit, one JSON object) through `writer` unless another writer
  // already did: while the writer excludes every other (the record head's mutex, or its flock of
  // its own open file description), and padded with spaces so that the file then ends
  // kClosedMargin past the normal part, which every writer's next admit() sees. Returns true if
  // written.
  bool close_normal_part(ChainWriter& writer, int fd, std::string_view hit);
  // How far past the normal part the closing limit.hit makes the file end: more than the lines
  // other writers can have in flight when they all pass the check at once, plus what each of
  // them writes before its next look at the file (kLookEvery), within the reserve.
  static constexpr uint64_t kClosedMargin = 32 << 10;
  // A writer looks at the file's size (fstat) once it has admitted this many bytes since its
  // last look, and at every event within this distance of the normal part's end; in between it
  // counts its own bytes. So past the end each writer writes less than this plus one line, and
  // the normal path costs one fstat per few KiB instead of one per event.
  static constexpr uint64_t kLookEvery = 4 << 10;

  // Drops of one family by this writer, in total.
  struct Drops {
    std::string_view family;
    uint64_t rate_limited = 0;
    uint64_t over_cap = 0;
  };
  // The drops of `kind`'s family when some are not reported yet and the last report is a second
  // old (checked without a lock while there are none); marks them reported.
  std::optional<Drops> due(std::string_view kind);
  // Every family with drops not reported yet: the writer's last word. Marks them reported.
  std::vector<Drops> unreported();
  uint64_t dropped_total() const;

  const RecordLimits& limits() const { return limits_; }

 private:
  struct Family {
    mutable std::mutex mu;
    double tokens = 0;
    int64_t refilled_ns = 0;
    uint64_t rate_limited = 0, over_cap = 0;
    uint64_t reported = 0;  // rate_limited + over_cap at the last report
    int64_t reported_ns = 0;
    std::atomic<bool> pending{false};  // drops since the last report
  };
  std::optional<Drops> report(size_t i, bool now_or_never);
  bool take_token(Family& f, int64_t now_ns);
  bool normal_fits(size_t len, int fd);
  void count(Family& f, bool cap);

  RecordLimits limits_;
  uint64_t normal_end_ = 0;          // max_bytes - reserve()
  std::atomic<bool> closed_{false};  // this writer has seen the normal part full
  std::atomic<bool> said_{false};    // ... and has offered limit.hit once
  std::atomic<bool> ended_{false};   // a kLast line was written: nothing may follow it
  std::mutex cap_mu_;                // threads of this writer: one in close_normal_part
  std::mutex size_mu_;               // guards the two below
  uint64_t seen_size_ = 0;           // the file's size at the last look, plus what was admitted
  uint64_t unseen_ = kLookEvery;     // bytes admitted since the last look (the first admit looks)
  Family families_[kFamilyCount];
};

}  // namespace cordon::record
