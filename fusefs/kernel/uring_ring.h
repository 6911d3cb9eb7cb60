// A minimal io_uring instance over the raw syscalls (no liburing: Debian 12's 2.3 predates the
// SQE128 command helpers), just what the FUSE ring transport needs: 128-byte SQEs, submit, wait,
// reap. One owner thread; move-only; unmapped and closed on destruction (closing the ring cancels
// every command still pending in it).
#pragma once

#include <linux/io_uring.h>

#include <cstddef>
#include <cstdint>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::fusefs {

class IoRing {
 public:
  // A ring of at least `entries` 128-byte SQEs. Tries SINGLE_ISSUER|DEFER_TASKRUN (completions
  // run only when the owner waits: no interrupting IPIs), then COOP_TASKRUN, then plain. Call it
  // from the thread that will submit.
  static Result<IoRing> create(unsigned entries);

  IoRing() = default;
  IoRing(IoRing&& o) noexcept;
  IoRing& operator=(IoRing&& o) noexcept;
  IoRing(const IoRing&) = delete;
  IoRing& operator=(const IoRing&) = delete;
  ~IoRing();

  // A zeroed SQE (128 bytes) to fill, or nullptr when the submission queue is full.
  io_uring_sqe* get_sqe();
  // Submits what get_sqe() handed out and waits for at least `wait_nr` completions.
  // The number submitted, or -errno (EINTR is retried).
  int submit_and_wait(unsigned wait_nr);
  // Copies the next completion into *out and consumes it; false when none is ready.
  bool pop_cqe(io_uring_cqe* out);

  int fd() const { return fd_.get(); }
  uint32_t setup_flags() const { return flags_; }

 private:
  void release();

  UniqueFd fd_;
  uint32_t flags_ = 0;
  void* sq_map_ = nullptr;
  size_t sq_map_len_ = 0;
  void* cq_map_ = nullptr;
  size_t cq_map_len_ = 0;
  void* sqes_ = nullptr;
  size_t sqes_len_ = 0;
  uint32_t* sq_head_ = nullptr;
  uint32_t* sq_tail_ = nullptr;
  uint32_t* sq_array_ = nullptr;
  uint32_t sq_mask_ = 0;
  uint32_t sq_entries_ = 0;
  uint32_t* cq_head_ = nullptr;
  uint32_t* cq_tail_ = nullptr;
  io_uring_cqe* cqes_ = nullptr;
  uint32_t cq_mask_ = 0;
  uint32_t local_tail_ = 0;  // SQEs handed out, published to *sq_tail_ at submit
  uint32_t to_submit_ = 0;
};

}  // namespace cordon::fusefs
