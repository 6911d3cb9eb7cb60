// Appends sealed lines to events.jsonl: one writer at a time, across processes, each line chained
// to the line before it in the file whoever wrote that one.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::record {

class ChainWriter {
 public:
  // Spaces to add to a line of `len` bytes when the file is `size` bytes long; nullopt: write
  // nothing. Runs under the file's lock.
  using Pad = std::function<std::optional<size_t>(uint64_t size, size_t len)>;

  // Seals `object` (one JSON object, no newline) to the file's last line and appends it with one
  // write(2), under an exclusive flock(2) of `fd` so that no other writer appends in between.
  // `fd` is events.jsonl opened O_APPEND with its own open file description (flock excludes
  // distinct opens only); readable too, or a read-only open of it is made through /proc.
  // Returns false (and writes nothing) when `pad` said so.
  Result<bool> append(int fd, std::string_view object, const Pad& pad = {});

 private:
  Result<std::string> last_chain(int fd, uint64_t size, bool* torn);
  int read_fd(int fd);

  std::mutex mu_;  // threads of this writer: the lock is per open file description, not per thread
  uint64_t end_ = UINT64_MAX;  // the file's size after this writer's last line
  std::string chain_;          // ... and that line's chain value
  UniqueFd reader_;            // when the writer's fd is write-only
};

}  // namespace cordon::record
