// A minimal io_uring instance over the raw syscalls: setup, mmap of the rings, submit, reap.
#include "fusefs/kernel/uring_ring.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace cordon::fusefs {

namespace {

constexpr size_t kSqe128 = 128;  // IORING_SETUP_SQE128: the FUSE command area needs 80 bytes

int sys_setup(unsigned entries, io_uring_params* p) {
  return static_cast<int>(::syscall(__NR_io_uring_setup, entries, p));
}

int sys_enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags) {
  return static_cast<int>(
      ::syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, nullptr, 0));
}

void* map_ring(int fd, size_t len, off_t off) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, off);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

Result<IoRing> IoRing::create(unsigned entries) {
  const uint32_t attempts[] = {
      IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
      IORING_SETUP_SQE128 | IORING_SETUP_COOP_TASKRUN,
      IORING_SETUP_SQE128,
  };
  io_uring_params p{};
  int fd = -1;
  for (uint32_t flags : attempts) {
    p = io_uring_params{};
    p.flags = flags;
    fd = sys_setup(entries, &p);
    if (fd >= 0 || errno != EINVAL) {
      break;
    }
  }
  if (fd < 0) {
    return sys_error(
        "io_uring_setup(" + std::to_string(entries) + ", IORING_SETUP_SQE128)",
        errno == EPERM ? "io_uring may be disabled: sysctl kernel.io_uring_disabled=0" : "");
  }
  IoRing r;
  r.fd_ = UniqueFd(fd);
  r.flags_ = p.flags;
  r.sq_map_len_ = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
  r.cq_map_len_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
  r.sqes_len_ = p.sq_entries * kSqe128;
  r.sq_map_ = map_ring(fd, r.sq_map_len_, IORING_OFF_SQ_RING);
  r.cq_map_ = map_ring(fd, r.cq_map_len_, IORING_OFF_CQ_RING);
  r.sqes_ = map_ring(fd, r.sqes_len_, IORING_OFF_SQES);
  if (r.sq_map_ == nullptr || r.cq_map_ == nullptr || r.sqes_ == nullptr) {
    return sys_error("mmap of an io_uring's rings");
  }
  auto* sq = static_cast<char*>(r.sq_map_);
  auto* cq = static_cast<char*>(r.cq_map_);
  r.sq_head_ = reinterpret_cast<uint32_t*>(sq + p.sq_off.head);
  r.sq_tail_ = reinterpret_cast<uint32_t*>(sq + p.sq_off.tail);
  r.sq_mask_ = *reinterpret_cast<uint32_t*>(sq + p.sq_off.ring_mask);
  r.sq_entries_ = *reinterpret_cast<uint32_t*>(sq + p.sq_off.ring_entries);
  r.sq_array_ = reinterpret_cast<uint32_t*>(sq + p.sq_off.array);
  r.cq_head_ = reinterpret_cast<uint32_t*>(cq + p.cq_off.head);
  r.cq_tail_ = reinterpret_cast<uint32_t*>(cq + p.cq_off.tail);
  r.cq_mask_ = *reinterpret_cast<uint32_t*>(cq + p.cq_off.ring_mask);
  r.cqes_ = reinterpret_cast<io_uring_cqe*>(cq + p.cq_off.cqes);
  r.local_tail_ = *r.sq_tail_;
  return r;
}

IoRing::IoRing(IoRing&& o) noexcept { *this = std::move(o); }

IoRing& IoRing::operator=(IoRing&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::move(o.fd_);
    flags_ = o.flags_;
    sq_map_ = std::exchange(o.sq_map_, nullptr);
    sq_map_len_ = o.sq_map_len_;
    cq_map_ = std::exchange(o.cq_map_, nullptr);
    cq_map_len_ = o.cq_map_len_;
    sqes_ = std::exchange(o.sqes_, nullptr);
    sqes_len_ = o.sqes_len_;
    sq_head_ = o.sq_head_;
    sq_tail_ = o.sq_tail_;
    sq_array_ = o.sq_array_;
    sq_mask_ = o.sq_mask_;
    sq_entries_ = o.sq_entries_;
    cq_head_ = o.cq_head_;
    cq_tail_ = o.cq_tail_;
    cqes_ = o.cqes_;
    cq_mask_ = o.cq_mask_;
    local_tail_ = o.local_tail_;
    to_submit_ = o.to_submit_;
  }
  return *this;
}

IoRing::~IoRing() { release(); }

void IoRing::release() {
  if (sqes_ != nullptr) {
    ::munmap(sqes_, sqes_len_);
    sqes_ = nullptr;
  }
  if (cq_map_ != nullptr) {
    ::munmap(cq_map_, cq_map_len_);
    cq_map_ = nullptr;
  }
  if (sq_map_ != nullptr) {
    ::munmap(sq_map_, sq_map_len_);
    sq_map_ = nullptr;
  }
  fd_.reset();
}

io_uring_sqe* IoRing::get_sqe() {
  uint32_t head = __atomic_load_n(sq_head_, __ATOMIC_ACQUIRE);
  if (local_tail_ - head >= sq_entries_) {
    return nullptr;
  }
  uint32_t idx = local_tail_ & sq_mask_;
  auto* sqe = reinterpret_cast<io_uring_sqe*>(static_cast<char*>(sqes_) + idx * kSqe128);
  std::memset(sqe, 0, kSqe128);
  sq_array_[idx] = idx;
  local_tail_++;
  to_submit_++;
  return sqe;
}

int IoRing::submit_and_wait(unsigned wait_nr) {
  // Publish the SQEs before the kernel reads the tail.
  __atomic_store_n(sq_tail_, local_tail_, __ATOMIC_RELEASE);
  unsigned n = to_submit_;
  for (;;) {
    int rc = sys_enter(fd_.get(), n, wait_nr, wait_nr > 0 ? IORING_ENTER_GETEVENTS : 0);
    if (rc >= 0) {
      to_submit_ -= static_cast<unsigned>(rc) < to_submit_ ? static_cast<unsigned>(rc) : to_submit_;
      return rc;
    }
    if (errno != EINTR) {
      return -errno;
    }
    // Interrupted before consuming: nothing was submitted twice (the kernel tracks the head).
    n = to_submit_;
  }
}

bool IoRing::pop_cqe(io_uring_cqe* out) {
  uint32_t head = *cq_head_;
  if (head == __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE)) {
    return false;
  }
  *out = cqes_[head & cq_mask_];
  __atomic_store_n(cq_head_, head + 1, __ATOMIC_RELEASE);
  return true;
}

}  // namespace cordon::fusefs
