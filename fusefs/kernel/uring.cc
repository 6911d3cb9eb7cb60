// FUSE over io_uring: per-CPU rings and threads, request assembly, reply capture, teardown.
#include "fusefs/kernel/uring.h"

#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "fusefs/kernel/kernel_init.h"
#include "fusefs/kernel/uring_abi.h"
#include "fusefs/kernel/uring_ring.h"

namespace cordon::fusefs {

namespace abi = uring_abi;

namespace {

constexpr uint64_t kStopTag = ~0ull;
constexpr uint64_t kEntryTag = 0;
// Room before each payload for the fuse_in_header and the per-op struct, so that a request is
// one contiguous buffer (as libfuse reads it from /dev/fuse) without copying the payload.
constexpr size_t kPrefix = 4096;
static_assert(kPrefix >= sizeof(fuse_in_header) + abi::kOpInOutSize);

std::atomic<uint64_t> g_ring_requests{0};
std::atomic<uint64_t> g_register_errors{0};
std::atomic<unsigned> g_queues_registered{0};
std::atomic<unsigned> g_queues_total{0};
std::mutex g_reason_mu;
std::string g_fallback_reason;

void set_fallback_reason(const std::string& why) {
  std::lock_guard lk(g_reason_mu);
  if (g_fallback_reason.empty()) {
    g_fallback_reason = why;
    std::fprintf(stderr, "cordon-fs: io_uring transport: %s\n", why.c_str());
  }
}

}  // namespace

struct Entry {
  abi::ReqHeader* hdr = nullptr;
  char* payload = nullptr;
  size_t cap = 0;
  iovec iov[2]{};
  uint64_t commit_id = 0;
  uint64_t unique = 0;
  bool replied = false;
  int eagain = 0;
};

namespace {
thread_local Entry* t_entry = nullptr;
}  // namespace

struct UringTransport::Queue {
  UringTransport* owner = nullptr;
  uint16_t qid = 0;
  unsigned index = 0;  // of this thread among its CPU's
  IoRing ring;
  // One entry per thread (and ring): no request ever waits behind another one.
  abi::ReqHeader header{};
  void* region = nullptr;
  size_t region_len = 0;
  Entry entry;
  std::thread thread;
  // Creation result, published under owner->mu_.
  bool created = false;
  std::string create_error;

  ~Queue() {
    if (region != nullptr) {
      ::munmap(region, region_len);
    }
  }

  void run();
  bool create_ring();
  bool allocate(size_t max_payload);
  void prep_register();
  void prep_commit();
  void poll_stop();
  void force_fallback();
  void serve(Entry& e);
};

unsigned possible_cpus() {
  // "0-1", "0-3,6-7", "0": count the ids.
  std::ifstream f("/sys/devices/system/cpu/possible");
  std::string s;
  std::getline(f, s);
  unsigned n = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = part.find('-');
    try {
      if (dash == std::string::npos) {
        n += 1;
      } else {
        n += static_cast<unsigned>(std::stoul(part.substr(dash + 1)) - std::stoul(part) + 1);
      }
    } catch (...) {
      break;
    }
    if (comma == std::string::npos) {
      break;
    }
    pos = comma + 1;
  }
  if (n == 0) {
    long c = ::sysconf(_SC_NPROCESSORS_CONF);
    n = c > 0 ? static_cast<unsigned>(c) : 1;
  }
  return n;
}

bool UringTransport::Queue::create_ring() {
  auto r = IoRing::create(8);
  if (!r.ok()) {
    create_error = r.error().to_string();
    return false;
  }
  ring = std::move(r).value();
  poll_stop();
  if (ring.submit_and_wait(0) < 0) {
    create_error = "io_uring_enter (first submit) failed";
    return false;
  }
  return true;
}

void UringTransport::Queue::poll_stop() {
  io_uring_sqe* sqe = ring.get_sqe();
  sqe->opcode = IORING_OP_POLL_ADD;
  sqe->fd = owner->stop_fd_.get();
  sqe->poll32_events = POLLIN;
  sqe->user_data = kStopTag;
}

bool UringTransport::Queue::allocate(size_t max_payload) {
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t cap = (max_payload + page - 1) / page * page;
  region_len = kPrefix + cap;
  void* p = ::mmap(nullptr, region_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    region = nullptr;
    return false;
  }
  region = p;
  entry.hdr = &header;
  entry.payload = static_cast<char*>(region) + kPrefix;
  entry.cap = cap;
  entry.iov[0] = {entry.hdr, sizeof(abi::ReqHeader)};
  entry.iov[1] = {entry.payload, cap};
  return true;
}

void UringTransport::Queue::prep_register() {
  io_uring_sqe* sqe = ring.get_sqe();
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_session_fd(owner->se_);
  sqe->cmd_op = abi::kCmdRegister;
  sqe->addr = reinterpret_cast<uint64_t>(entry.iov);
  sqe->len = 2;  // header, payload
  sqe->user_data = kEntryTag;
  abi::CmdReq req{};
  req.qid = qid;
  std::memcpy(sqe->cmd, &req, sizeof(req));
}

void UringTransport::Queue::prep_commit() {
  io_uring_sqe* sqe = ring.get_sqe();
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_session_fd(owner->se_);
  sqe->cmd_op = abi::kCmdCommitAndFetch;
  sqe->user_data = kEntryTag;
  abi::CmdReq req{};
  req.qid = qid;
  req.commit_id = entry.commit_id;
  std::memcpy(sqe->cmd, &req, sizeof(req));
}

// The kernel holds every request back from INIT until all queues have entries; a REGISTER that
// fails makes it give the ring up for this connection and use /dev/fuse. A malformed one (no
// iovecs) is how a queue that cannot serve says so, rather than leaving the mount stuck.
void UringTransport::Queue::force_fallback() {
  if (ring.fd() < 0) {
    return;
  }
  io_uring_sqe* sqe = ring.get_sqe();
  if (sqe == nullptr) {
    return;
  }
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_session_fd(owner->se_);
  sqe->cmd_op = abi::kCmdRegister;
  sqe->len = 0;
  sqe->user_data = kStopTag - 1;
  abi::CmdReq req{};
  req.qid = qid;
  std::memcpy(sqe->cmd, &req, sizeof(req));
  if (ring.submit_and_wait(1) >= 0) {
    io_uring_cqe cqe;
    while (ring.pop_cqe(&cqe)) {
    }
  }
}

void UringTransport::Queue::serve(Entry& e) {
  fuse_in_header in;
  std::memcpy(&in, e.hdr->in_out, sizeof(in));
  const abi::EntInOut& io = e.hdr->ring_ent_in_out;
  e.commit_id = io.commit_id;
  e.unique = in.unique;
  e.replied = false;
  size_t payload = io.payload_sz;
  // in.len is what /dev/fuse would have delivered: header + first argument + the rest. The first
  // argument sits in op_in, the rest in the payload; laid out back to back before the payload.
  size_t head = sizeof(fuse_in_header);
  bool sane =
      payload <= e.cap && in.len >= head + payload && in.len - head - payload <= abi::kOpInOutSize;
  if (sane) {
    size_t arg0 = in.len - head - payload;
    char* start = e.payload - head - arg0;
    std::memcpy(start, &in, head);
    std::memcpy(start + head, e.hdr->op_in, arg0);
    t_entry = &e;
    if (!dispatch_hooks(fuse_session_fd(owner->se_), start, in.len, owner->userdata_)) {
      fuse_buf buf{};
      buf.size = in.len;
      buf.mem = start;
      fuse_session_process_buf(owner->se_, &buf);
    }
    t_entry = nullptr;
    g_ring_requests.fetch_add(1, std::memory_order_relaxed);
  }
  if (!e.replied) {
    // Every op of cordon-fs replies before it returns; a request without a reply (or a malformed
    // one) is answered EIO so the entry comes back to the ring rather than leaking.
    static std::atomic<bool> once{false};
    if (!once.exchange(true)) {
      std::fprintf(stderr,
                   "cordon-fs: io_uring: request opcode %u (len %u, payload %zu) got no "
                   "synchronous reply; answered EIO\n",
                   in.opcode, in.len, payload);
    }
    fuse_out_header out{};
    out.len = sizeof(out);
    out.error = -EIO;
    out.unique = in.unique;
    std::memcpy(e.hdr->in_out, &out, sizeof(out));
    e.hdr->ring_ent_in_out.payload_sz = 0;
  }
}

void UringTransport::Queue::run() {
  // "cordon-ring3.1" (at most 15 characters).
  std::string name = "cordon-ring" + std::to_string(qid % 100) + "." + std::to_string(index % 10);
  ::pthread_setname_np(::pthread_self(), name.c_str());
  // Pinned to its CPU: the kernel queues a request here because its caller runs on this CPU.
  // A CPU outside the daemon's allowed set (taskset) leaves the thread unpinned.
  if (qid < CPU_SETSIZE) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(qid, &set);
    (void)::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);
  }

  bool ok = create_ring();
  size_t max_payload = 0;
  {
    std::unique_lock lk(owner->mu_);
    created = ok;
    owner->cv_.notify_all();
    if (!ok) {
      return;
    }
    owner->cv_.wait(lk, [&] { return owner->state_ != State::kPrepared; });
    if (owner->state_ != State::kStarted) {
      return;
    }
    max_payload = owner->max_payload_;
  }
  if (!allocate(max_payload)) {
    set_fallback_reason("queue " + std::to_string(qid) + ": mmap of " + std::to_string(region_len) +
                        " bytes of ring buffers failed: " + std::strerror(errno) +
                        "; serving through /dev/fuse");
    force_fallback();
    return;
  }
  prep_register();
  bool live = true;
  bool counted = false;
  unsigned wait_nr = 0;  // the first pass only submits: REGISTER errors complete at once
  for (;;) {
    int rc = ring.submit_and_wait(wait_nr);
    if (rc < 0) {
      set_fallback_reason("queue " + std::to_string(qid) +
                          ": io_uring_enter: " + std::strerror(-rc));
      return;
    }
    io_uring_cqe cqe;
    bool stopping = false;
    bool retried = false;
    while (ring.pop_cqe(&cqe)) {
      if (cqe.user_data == kStopTag) {
        stopping = true;
        continue;
      }
      if (cqe.user_data != kEntryTag) {
        continue;
      }
      Entry& e = entry;
      if (cqe.res == 0) {
        serve(e);
        prep_commit();
        continue;
      }
      if (cqe.res == -EAGAIN && e.eagain < 5000) {
        // The kernel has not finished processing INIT yet: register again shortly.
        e.eagain++;
        ::usleep(1000);
        prep_register();
        retried = true;
        continue;
      }
      if (cqe.res == -ENOENT) {
        // The kernel no longer knew the request we committed (aborted): the entry left the
        // queue; register it again.
        prep_register();
        retried = true;
        continue;
      }
      live = false;
      if (cqe.res != -ENOTCONN && cqe.res != -ECANCELED && cqe.res != -ECONNABORTED) {
        g_register_errors.fetch_add(1, std::memory_order_relaxed);
        set_fallback_reason("queue " + std::to_string(qid) + ": FUSE io_uring command failed: " +
                            std::strerror(-cqe.res) + "; the kernel serves through /dev/fuse");
      }
    }
    // A REGISTER stays pending until a request arrives, so success shows as no error once the
    // SQEs were consumed.
    if (!counted && !retried && live) {
      counted = true;
      g_queues_registered.fetch_add(1);
    }
    if (stopping || !live) {
      // Commits prepared in this pass still carry replies: hand them to the kernel before the
      // ring closes (their next fetch is then cancelled with the ring).
      (void)ring.submit_and_wait(0);
      return;
    }
    wait_nr = retried ? 0 : 1;
  }
}

Result<std::unique_ptr<UringTransport>> UringTransport::prepare(fuse_session* se, void* userdata,
                                                                const UringOptions& opts) {
  std::unique_ptr<UringTransport> t(new UringTransport());
  t->se_ = se;
  t->userdata_ = userdata;
  t->opts_ = opts;
  t->stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!t->stop_fd_) {
    return sys_error("eventfd for the io_uring threads");
  }
  unsigned n = possible_cpus();
  if (n > 0xffff) {
    return make_error("too many possible CPUs for FUSE io_uring queues: " + std::to_string(n));
  }
  t->cpus_ = n;
  g_queues_total = n * opts.entries_per_queue;
  for (unsigned q = 0; q < n; q++) {
    for (unsigned k = 0; k < opts.entries_per_queue; k++) {
      auto queue = std::make_unique<Queue>();
      queue->owner = t.get();
      queue->qid = static_cast<uint16_t>(q);
      queue->index = k;
      t->queues_.push_back(std::move(queue));
    }
  }
  for (auto& q : t->queues_) {
    Queue* raw = q.get();
    q->thread = std::thread([raw] {
      // Exceptions never leave a thread entry (bad_alloc is the only one possible here).
      // A queue that dies unregistered would leave the kernel waiting for it: a failed REGISTER
      // makes it fall back to /dev/fuse.
      try {
        raw->run();
      } catch (const std::exception& e) {
        raw->force_fallback();
        set_fallback_reason("queue " + std::to_string(raw->qid) + ": " + e.what());
      } catch (...) {
        raw->force_fallback();
      }
    });
  }
  std::string error;
  {
    std::unique_lock lk(t->mu_);
    bool all = t->cv_.wait_for(lk, std::chrono::seconds(10), [&] {
      return std::all_of(t->queues_.begin(), t->queues_.end(),
                         [](const auto& q) { return q->created || !q->create_error.empty(); });
    });
    for (auto& q : t->queues_) {
      if (!q->create_error.empty() && error.empty()) {
        error = "queue " + std::to_string(q->qid) + ": " + q->create_error;
      }
    }
    if (!all && error.empty()) {
      error = "the io_uring threads did not start within 10 s";
    }
  }
  if (!error.empty()) {
    t->stop();
    return make_error(error);
  }
  return t;
}

void UringTransport::start(size_t max_payload) {
  std::lock_guard lk(mu_);
  if (state_ == State::kPrepared) {
    state_ = State::kStarted;
    max_payload_ = max_payload;
    cv_.notify_all();
  }
}

void UringTransport::stop() {
  {
    std::lock_guard lk(mu_);
    state_ = State::kStopping;
    cv_.notify_all();
  }
  if (stop_fd_) {
    uint64_t one = 1;
    (void)!::write(stop_fd_.get(), &one, sizeof(one));
  }
  for (auto& q : queues_) {
    if (q->thread.joinable()) {
      q->thread.join();
    }
  }
  // Closing each ring cancels its pending commands (the kernel drops their entries).
  queues_.clear();
}

UringTransport::~UringTransport() { stop(); }

bool uring_take_reply(const iovec* iov, int count, ssize_t* written) {
  Entry* e = t_entry;
  if (e == nullptr || e->replied || count < 1 || iov[0].iov_len < sizeof(fuse_out_header)) {
    return false;
  }
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof(out));
  if (out.unique != e->unique) {
    return false;  // a notification (unique 0) or not this request's reply: /dev/fuse
  }
  size_t total = 0;
  for (int i = 0; i < count; i++) {
    total += iov[i].iov_len;
  }
  size_t body = total - sizeof(out);
  if (body > e->cap) {
    out.error = -EIO;
    body = 0;
  } else {
    size_t at = 0;
    for (int i = 0; i < count; i++) {
      const char* src = static_cast<const char*>(iov[i].iov_base);
      size_t len = iov[i].iov_len;
      if (i == 0) {
        src += sizeof(out);
        len -= sizeof(out);
      }
      std::memmove(e->payload + at, src, len);  // a reply may point into the request's bytes
      at += len;
    }
  }
  std::memcpy(e->hdr->in_out, &out, sizeof(out));
  e->hdr->ring_ent_in_out.payload_sz = static_cast<uint32_t>(body);
  e->replied = true;
  *written = static_cast<ssize_t>(total);
  return true;
}

namespace {

// Reads exactly `len` bytes from the pipe libfuse just filled.
bool read_pipe(int fd, char* dst, size_t len) {
  while (len > 0) {
    ssize_t n = ::read(fd, dst, len);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    dst += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool uring_take_spliced_reply(int pipe_fd, size_t len, ssize_t* written) {
  Entry* e = t_entry;
  if (e == nullptr || e->replied || len < sizeof(fuse_out_header)) {
    return false;
  }
  fuse_out_header out;
  if (!read_pipe(pipe_fd, reinterpret_cast<char*>(&out), sizeof(out))) {
    *written = -1;
    errno = EIO;
    return true;
  }
  size_t body = len - sizeof(out);
  if (out.unique != e->unique || body > e->cap) {
    // Not this request's reply after all (libfuse splices only replies, never notifications
    // here): drain it so the pipe is clean, and fail the request.
    std::vector<char> sink(body);
    (void)read_pipe(pipe_fd, sink.data(), body);
    out.unique = e->unique;
    out.error = -EIO;
    body = 0;
  } else if (!read_pipe(pipe_fd, e->payload, body)) {
    out.error = -EIO;
    body = 0;
  }
  std::memcpy(e->hdr->in_out, &out, sizeof(out));
  e->hdr->ring_ent_in_out.payload_sz = static_cast<uint32_t>(body);
  e->replied = true;
  *written = static_cast<ssize_t>(len);
  return true;
}

UringStats uring_stats() {
  UringStats s;
  unsigned total = g_queues_total.load();
  s.registered = total > 0 && g_queues_registered.load() == total && g_register_errors.load() == 0;
  s.ring_requests = g_ring_requests.load();
  s.register_errors = g_register_errors.load();
  std::lock_guard lk(g_reason_mu);
  s.fallback_reason = g_fallback_reason;
  return s;
}

}  // namespace cordon::fusefs
