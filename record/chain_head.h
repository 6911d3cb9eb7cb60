// The record's head, events.jsonl.head: a small file every writer of the record maps MAP_SHARED,
// holding a process-shared robust mutex, the record's size after the last sealed line and that
// line's chain value, so a writer neither locks the file nor reads it back per line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::record {

// The head of a record at `path` is at `path` + kHeadSuffix.
inline constexpr std::string_view kHeadSuffix = ".head";

// Opens the head `name` in `dirfd` (AT_FDCWD: a path) O_RDWR|O_CLOEXEC, creating it (0600) when
// absent. A new head is initialised under a temporary name and linked into place, so no writer ever
// maps a half-made one; it starts with its size unknown, so the first writer reads the record's
// last line from the file (a record that already has lines keeps its chain).
Result<UniqueFd> open_head_file(int dirfd, const std::string& name);

class ChainHead {
 public:
  static constexpr uint64_t kUnknown = UINT64_MAX;

  // Maps `fd`, an open (O_RDWR) of a head file. An error when the file is not one (its size,
  // magic or version): the caller chains under flock(2) instead.
  static Result<std::unique_ptr<ChainHead>> map(UniqueFd fd);
  ~ChainHead();
  ChainHead(const ChainHead&) = delete;
  ChainHead& operator=(const ChainHead&) = delete;

  // Takes the mutex (threads and processes). A holder that died with it (EOWNERDEAD) may have
  // written part of a line, or a line without updating the head: the mutex is made consistent and
  // the head's size set to kUnknown, so the caller reads the file. An error (ENOTRECOVERABLE, a
  // corrupt mutex): the head is unusable.
  Status lock();
  void unlock();

  // Under the lock. The record's size after the last line sealed through the head (kUnknown:
  // read the file), and that line's chain value (64 hex).
  uint64_t end() const;
  std::string_view chain() const;
  void set(uint64_t end, std::string_view chain);
  void forget() { set(kUnknown, {}); }

  struct Shared;  // the file's layout (chain_head.cc)

 private:
  ChainHead(UniqueFd fd, Shared* s) : fd_(std::move(fd)), s_(s) {}

  UniqueFd fd_;
  Shared* s_;
};

}  // namespace cordon::record
