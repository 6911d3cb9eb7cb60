// events.jsonl.head: created under a temporary name and linked into place, mapped by every writer.
#include "record/chain_head.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "record/chain.h"

namespace cordon::record {

struct ChainHead::Shared {
  char magic[8];
  uint32_t version;
  uint32_t layout;  // sizeof(Shared): another build's layout is not this one's
  pthread_mutex_t mu;
  uint64_t end;
  char chain[kChainHexLen];
};

namespace {

constexpr char kMagic[8] = {'C', 'O', 'R', 'D', 'H', 'E', 'A', 'D'};
constexpr uint32_t kVersion = 1;
constexpr off_t kFileSize = 4096;
static_assert(sizeof(ChainHead::Shared) <= kFileSize);

Status init_head(int fd) {
  if (::ftruncate(fd, kFileSize) != 0) {
    return sys_error("ftruncate(events.jsonl.head, 4096)");
  }
  void* p = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return sys_error("mmap(events.jsonl.head)");
  }
  auto* s = static_cast<ChainHead::Shared*>(p);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(&s->mu, &attr);
  pthread_mutexattr_destroy(&attr);
  s->version = kVersion;
  s->layout = sizeof(ChainHead::Shared);
  s->end = ChainHead::kUnknown;
  std::memcpy(s->magic, kMagic, sizeof kMagic);
  ::munmap(p, kFileSize);
  if (rc != 0) {
    errno = rc;
    return sys_error("pthread_mutex_init(events.jsonl.head)");
  }
  return {};
}

}  // namespace

Result<UniqueFd> open_head_file(int dirfd, const std::string& name) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (fd || errno != ENOENT) {
    if (!fd) {
      return sys_error("open(\"" + name + "\")");
    }
    return fd;
  }
  static std::atomic<unsigned> seq{0};
  const std::string tmp = name + ".new." + std::to_string(::getpid()) + "." +
                          std::to_string(seq.fetch_add(1, std::memory_order_relaxed));
  UniqueFd made(
      ::openat(dirfd, tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!made) {
    return sys_error("open(\"" + tmp + "\", O_CREAT|O_EXCL)");
  }
  Status st = init_head(made.get());
  // link(2), not rename(2): a head another writer linked first is kept, never replaced under it.
  if (st.ok() && ::linkat(dirfd, tmp.c_str(), dirfd, name.c_str(), 0) != 0 && errno != EEXIST) {
    st = sys_error("link(\"" + tmp + "\", \"" + name + "\")");
  }
  ::unlinkat(dirfd, tmp.c_str(), 0);
  if (!st.ok()) {
    return std::move(st).error();
  }
  fd.reset(::openat(dirfd, name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return sys_error("open(\"" + name + "\")");
  }
  return fd;
}

Result<std::unique_ptr<ChainHead>> ChainHead::map(UniqueFd fd) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return sys_error("fstat(events.jsonl.head)");
  }
  if (!S_ISREG(st.st_mode) || st.st_size != kFileSize) {
    return make_error("events.jsonl.head is not a head (" + std::to_string(st.st_size) +
                      " bytes, not " + std::to_string(kFileSize) + ")");
  }
  void* p = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    return sys_error("mmap(events.jsonl.head)");
  }
  // A child cloned for the sandbox must not inherit the mapping, even until its exec.
  (void)::madvise(p, kFileSize, MADV_DONTFORK);
  auto* s = static_cast<Shared*>(p);
  if (std::memcmp(s->magic, kMagic, sizeof kMagic) != 0 || s->version != kVersion ||
      s->layout != sizeof(Shared)) {
    ::munmap(p, kFileSize);
    return make_error("events.jsonl.head is not a head of this version (magic, version or layout)");
  }
  return std::unique_ptr<ChainHead>(new ChainHead(std::move(fd), s));
}

ChainHead::~ChainHead() { ::munmap(s_, kFileSize); }

Status ChainHead::lock() {
  int rc = pthread_mutex_lock(&s_->mu);
  if (rc == EOWNERDEAD) {
    // The holder died between lock and unlock: whatever it wrote is in the file, not here.
    s_->end = kUnknown;
    rc = pthread_mutex_consistent(&s_->mu);
    if (rc != 0) {
      pthread_mutex_unlock(&s_->mu);
    }
  }
  if (rc != 0) {
    errno = rc;
    return sys_error("pthread_mutex_lock(events.jsonl.head)");
  }
  return {};
}

void ChainHead::unlock() { pthread_mutex_unlock(&s_->mu); }

uint64_t ChainHead::end() const { return s_->end; }

std::string_view ChainHead::chain() const { return {s_->chain, kChainHexLen}; }

void ChainHead::set(uint64_t end, std::string_view chain) {
  if (chain.size() != kChainHexLen) {
    end = kUnknown;
  } else {
    std::memmove(s_->chain, chain.data(), kChainHexLen);  // chain may be a view of it
  }
  s_->end = end;
}

}  // namespace cordon::record
