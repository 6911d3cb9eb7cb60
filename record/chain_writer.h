// Appends sealed lines to events.jsonl: one writer at a time, across processes, each line chained
// to the line before it in the file whoever wrote that one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::record {

class ChainHead;

// Two ways to exclude the other writers and to learn the chain value of the file's last line:
//  - with the record's head (record/chain_head.h, events.jsonl.head, mapped by every writer): its
//    process-shared robust mutex, and the size and chain value it keeps after each line. The file
//    is read back only when its size is not the head's: a writer died holding the mutex (torn
//    line), or a line was appended without the head.
//  - without one: an exclusive flock(2) of the fd, and the chain value read back from the file
//    whenever another writer wrote last.
// The head's mutex does not exclude a flock(2) writer, nor the other way round: the writers of one
// record use its head, all of them. A writer whose head turns out unusable (a mutex left
// unrecoverable) says so once on stderr and continues under flock(2); it never writes an unchained
// line.
class ChainWriter {
 public:
  ChainWriter();                                          // the flock(2) path
  explicit ChainWriter(std::unique_ptr<ChainHead> head);  // null: the flock(2) path
  ~ChainWriter();
  ChainWriter(const ChainWriter&) = delete;
  ChainWriter& operator=(const ChainWriter&) = delete;

  // Spaces to add to a line of `len` bytes when the file is `size` bytes long; nullopt: write
  // nothing. Runs while the other writers are excluded.
  using Pad = std::function<std::optional<size_t>(uint64_t size, size_t len)>;

  // Seals `object` (one JSON object, no newline) to the file's last line and appends it with one
  // write(2), with every other writer excluded (the head's mutex, or an exclusive flock(2) of
  // `fd`) so that no line lands in between. `fd` is events.jsonl opened O_APPEND with its own open
  // file description (flock excludes distinct opens only); readable too, or a read-only open of it
  // is made through /proc when the file must be read back. Returns false (and writes nothing) when
  // `pad` said so.
  Result<bool> append(int fd, std::string_view object, const Pad& pad = {});

  // Whether lines go through the head (false: flock(2)).
  bool has_head() const { return head_ != nullptr; }

 private:
  Result<bool> append_locked(int fd, uint64_t size, std::string_view prev, bool torn,
                             std::string_view object, const Pad& pad);
  Result<bool> append_flock(int fd, std::string_view object, const Pad& pad);
  Result<bool> append_head(int fd, std::string_view object, const Pad& pad);
  Result<std::string> last_chain(int fd, uint64_t size, bool* torn);
  int read_fd(int fd);

  std::mutex mu_;  // threads of this writer: flock is per open file description, not per thread
  std::unique_ptr<ChainHead> head_;  // null: flock(2)
  uint64_t end_ = UINT64_MAX;        // the file's size after this writer's last line
  std::string chain_;                // ... and that line's chain value
  UniqueFd reader_;                  // when the writer's fd is write-only
};

}  // namespace cordon::record
