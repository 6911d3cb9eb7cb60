// FUSE over io_uring (Linux 6.14+, fs/fuse/dev_uring.c) for libfuse 3.14, which knows nothing of
// it: per possible CPU a few entries, each with its own ring and thread pinned to that CPU. The
// kernel queues a request on the ring of the CPU its caller runs on, so it is served there, without
// a cross-CPU wakeup and without a read(2) and writev(2) on /dev/fuse per request. Requests are
// handed to libfuse with fuse_session_process_buf(); the reply libfuse then writes through the
// session's I/O hooks (kernel_init.cc) is caught here by the serving thread and committed to the
// ring instead.
//
// FORGET and INTERRUPT, and everything before the rings are registered, still arrive on /dev/fuse
// (libfuse's own loop keeps serving it); notifications and passthrough ioctls stay on /dev/fuse.
#pragma once

#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::fusefs {

struct UringOptions {
  // Entries registered per CPU queue, each served by its own thread (and ring): a slow op (a big
  // copy-up, an fsync) holds one entry while the others keep serving that CPU. The kernel hands a
  // request to the entry committed last, so one hot thread does the work while requests come one
  // at a time.
  unsigned entries_per_queue = 4;
};

class UringTransport {
 public:
  // Starts one thread per possible CPU; each creates its ring now (so a failure is known before
  // INIT is answered, when falling back is still free) and then waits for start(). `userdata` is
  // the session's (handed to the request hooks).
  static Result<std::unique_ptr<UringTransport>> prepare(fuse_session* se, void* userdata,
                                                         const UringOptions& opts);
  ~UringTransport();  // stop()

  // Once the INIT reply carrying FUSE_OVER_IO_URING was accepted by the kernel: every queue
  // registers its entries with payload buffers of `max_payload` bytes. Called from the thread that
  // answered INIT; returns at once.
  void start(size_t max_payload);
  // Wakes and joins every thread, then closes the rings (which cancels what is still registered).
  // Without start() the threads just exit.
  void stop();

  size_t queues() const { return cpus_; }
  unsigned entries_per_queue() const { return opts_.entries_per_queue; }

  struct Queue;

 private:
  UringTransport() = default;

  fuse_session* se_ = nullptr;
  void* userdata_ = nullptr;
  UringOptions opts_;
  UniqueFd stop_fd_;  // eventfd every ring polls: written once by stop()
  std::mutex mu_;
  std::condition_variable cv_;
  enum class State { kPrepared, kStarted, kStopping } state_ = State::kPrepared;
  size_t max_payload_ = 0;
  size_t cpus_ = 0;
  std::vector<std::unique_ptr<Queue>> queues_;
};

// Possible CPUs (/sys/devices/system/cpu/possible): the kernel makes one queue per possible CPU
// and switches to the ring only once every one of them has entries.
unsigned possible_cpus();

// For the /dev/fuse I/O hooks: when the calling thread is serving a ring request and `iov` is its
// reply (same unique), the reply goes into the ring entry; *written is what writev would return.
// False for anything else (notifications, /dev/fuse requests): write it to /dev/fuse.
bool uring_take_reply(const struct iovec* iov, int count, ssize_t* written);
// The same for a reply libfuse spliced into `pipe_fd` (READ data): `len` bytes, header first.
bool uring_take_spliced_reply(int pipe_fd, size_t len, ssize_t* written);

struct UringStats {
  bool registered = false;     // every queue registered its entries
  uint64_t ring_requests = 0;  // requests served from a ring
  uint64_t register_errors = 0;
  std::string fallback_reason;  // why the ring was given up, if it was
};
UringStats uring_stats();

}  // namespace cordon::fusefs
