// ChainWriter: exclude the other writers (the head's mutex, or flock), find the previous line's
// chain value, seal, one write(2), unlock.
#include "record/chain_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "record/chain.h"
#include "record/chain_head.h"

namespace cordon::record {

namespace {

// How far back a writer looks for the last sealed line: past any torn fragments and the padding
// of the cap's limit.hit (which is inside its line, so one line is enough in practice).
constexpr uint64_t kMaxLookBack = 16 << 20;

class FileLock {
 public:
  explicit FileLock(int fd) : fd_(fd) {
    while ((rc_ = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() {
    if (rc_ == 0) {
      ::flock(fd_, LOCK_UN);
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool ok() const { return rc_ == 0; }

 private:
  int fd_;
  int rc_ = -1;
};

class HeadLock {
 public:
  explicit HeadLock(ChainHead& head) : head_(head), st_(head.lock()) {}
  ~HeadLock() {
    if (st_.ok()) {
      head_.unlock();
    }
  }
  HeadLock(const HeadLock&) = delete;
  HeadLock& operator=(const HeadLock&) = delete;
  const Status& status() const { return st_; }

 private:
  ChainHead& head_;
  Status st_;
};

}  // namespace

ChainWriter::ChainWriter() = default;
ChainWriter::ChainWriter(std::unique_ptr<ChainHead> head) : head_(std::move(head)) {}
ChainWriter::~ChainWriter() = default;

int ChainWriter::read_fd(int fd) {
  if (reader_) {
    return reader_.get();
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_ACCMODE) != O_WRONLY) {
    return fd;
  }
  // A write-only fd handed over by another piece: a read-only open of the same file.
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  reader_.reset(::open(self.c_str(), O_RDONLY | O_CLOEXEC));
  return reader_ ? reader_.get() : -1;
}

Result<std::string> ChainWriter::last_chain(int fd, uint64_t size, bool* torn) {
  *torn = false;
  if (size == 0) {
    return std::string(kChainStart);
  }
  if (size == end_) {
    return chain_;  // nobody wrote since this writer's last line
  }
  int rfd = read_fd(fd);
  if (rfd < 0) {
    return sys_error("open(/proc/self/fd/" + std::to_string(fd) + ", O_RDONLY) for events.jsonl");
  }
  std::string buf;
  // Small first: the last line is nearly always whole within the last few KiB.
  for (uint64_t window = 8 << 10;; window *= 4) {
    uint64_t from = size > window ? size - window : 0;
    buf.resize(size - from);
    ssize_t n = ::pread(rfd, buf.data(), buf.size(), static_cast<off_t>(from));
    if (n < 0) {
      return sys_error("pread(events.jsonl)");
    }
    buf.resize(static_cast<size_t>(n));
    *torn = !buf.empty() && buf.back() != '\n';
    // Complete lines only, last first: a torn fragment at the end has no chain of its own.
    size_t end = buf.rfind('\n');
    while (end != std::string::npos) {
      size_t start = end == 0 ? std::string::npos : buf.rfind('\n', end - 1);
      if (start == std::string::npos && from > 0) {
        break;  // the line may begin before the window
      }
      size_t b = start == std::string::npos ? 0 : start + 1;
      if (auto hex = chain_field(std::string_view(buf).substr(b, end - b))) {
        return std::string(*hex);
      }
      if (start == std::string::npos) {
        break;
      }
      end = start;
    }
    if (from == 0 || window >= kMaxLookBack) {
      // No sealed line at all: a file of other lines only. Chained from the start, which the
      // verifier then reports at the first line that does not follow.
      return std::string(kChainStart);
    }
  }
}

Result<bool> ChainWriter::append(int fd, std::string_view object, const Pad& pad) {
  std::lock_guard guard(mu_);
  if (head_) {
    return append_head(fd, object, pad);
  }
  return append_flock(fd, object, pad);
}

Result<bool> ChainWriter::append_head(int fd, std::string_view object, const Pad& pad) {
  HeadLock lock(*head_);
  if (!lock.status().ok()) {
    std::fprintf(stderr, "cordon: %s: chaining events.jsonl under flock(2) from here on\n",
                 lock.status().error().to_string().c_str());
    head_.reset();
    return append_flock(fd, object, pad);
  }
  // The file's size, not the head's word for it: a line appended without the head (or a torn one
  // a writer left when it died) moved the end, and the head's chain value is then not the last
  // line's. lseek(SEEK_END) reads the size at half an fstat's cost; the fd is O_APPEND, so its
  // offset means nothing to the writes.
  off_t at = ::lseek(fd, 0, SEEK_END);
  if (at < 0) {
    return sys_error("lseek(events.jsonl, 0, SEEK_END)");
  }
  const uint64_t size = static_cast<uint64_t>(at);
  bool torn = false;
  std::string read_back;
  std::string_view prev;  // into the head's mapping, or read_back
  if (size == 0) {
    prev = kChainStart;
  } else if (size == head_->end()) {
    prev = head_->chain();
  } else {
    end_ = UINT64_MAX;  // this writer's own memory of the end is no better than the head's
    auto last = last_chain(fd, size, &torn);
    if (!last.ok()) {
      return std::move(last).error();
    }
    read_back = std::move(last).value();
    prev = read_back;
  }
  head_->forget();  // until the line is written and the head says where it ends
  auto wrote = append_locked(fd, size, prev, torn, object, pad);
  if (wrote.ok() && *wrote) {
    head_->set(end_, chain_);
  } else if (wrote.ok() && !torn) {
    head_->set(size, prev);  // nothing written: the head stands as it was
  }
  return wrote;
}

Result<bool> ChainWriter::append_flock(int fd, std::string_view object, const Pad& pad) {
  FileLock lock(fd);
  if (!lock.ok()) {
    return sys_error("flock(events.jsonl, LOCK_EX)");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return sys_error("fstat(events.jsonl)");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  bool torn = false;
  auto prev = last_chain(fd, size, &torn);
  if (!prev.ok()) {
    return std::move(prev).error();
  }
  return append_locked(fd, size, *prev, torn, object, pad);
}

Result<bool> ChainWriter::append_locked(int fd, uint64_t size, std::string_view prev, bool torn,
                                        std::string_view object, const Pad& pad) {
  size_t spaces = 0;
  if (pad) {
    auto p = pad(size, object.size() + kSealOverhead + (torn ? 1 : 0));
    if (!p) {
      return false;
    }
    spaces = *p;
  }
  std::string line = seal(object, prev, spaces);
  if (torn) {
    // A writer stopped mid-line: end its fragment, or it would swallow this line.
    line.insert(line.begin(), '\n');
  }
  ssize_t n = ::write(fd, line.data(), line.size());
  if (n < 0) {
    end_ = UINT64_MAX;
    return sys_error("write(events.jsonl)");
  }
  if (static_cast<size_t>(n) != line.size()) {
    end_ = UINT64_MAX;
    return make_error("short write to events.jsonl (disk full?)");
  }
  end_ = size + line.size();
  chain_.assign(line, line.size() - kChainHexLen - 3, kChainHexLen);
  return true;
}

}  // namespace cordon::record
