// The event channel: one non-blocking SOCK_SEQPACKET connection per process image to the collector.
//
// Why SEQPACKET and not SOCK_DGRAM: an unconnected unix datagram receiver accepts at most
// net.unix.max_dgram_qlen (default 10) queued messages from all senders together, so a burst from
// a few processes would drop events while the collector is being woken. A connected seqpacket keeps
// message boundaries and gives each process its own send buffer (~200 KiB). A full buffer still
// drops (counted), never blocks.
//
// The program owns the fd table: it may close our fd or reuse its number. Before every send we
// check that the fd is still the socket we opened (fstat: inode), and otherwise forget it without
// touching it and reconnect.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload_shim/shim.h"

namespace cordon::preload_shim {
namespace {

// fd (low 32 bits) and socket inode (high 32 bits) in one word so threads see them together.
// sockfs inode numbers come from get_next_ino() and are 32-bit.
constexpr uint64_t kNoChannel = ~0ull;
std::atomic<uint64_t> g_channel{kNoChannel};
std::atomic<uint32_t> g_dropped{0};
// After a failed connect, skip this many events (counted as drops) before trying again, so a
// missing collector costs one failed syscall per 256 events rather than two per event.
std::atomic<uint32_t> g_backoff{0};
constexpr uint32_t kBackoffEvents = 256;

uint64_t pack(int fd, uint64_t ino) { return (ino << 32) | static_cast<uint32_t>(fd); }
int unpack_fd(uint64_t v) { return static_cast<int>(v & 0xffffffffu); }
uint32_t unpack_ino(uint64_t v) { return static_cast<uint32_t>(v >> 32); }

bool still_ours(uint64_t v) {
  struct stat st;
  return fstat(unpack_fd(v), &st) == 0 && S_ISSOCK(st.st_mode) &&
         static_cast<uint32_t>(st.st_ino) == unpack_ino(v);
}

// The connection's first message, sent before the fd is published to other threads so it is
// always first: who this image is (the collector stamps it on every later record).
bool send_hello(int fd) {
  Event hello(wire::kHello);
  hello.add_identity();
  return hello.send_on(fd);
}

// Opens and connects a new channel; -1 when the collector is unreachable.
int open_channel(uint64_t* packed) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return -1;
  }
  if (g_config.fd_floor > fd) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, g_config.fd_floor);
    if (high >= 0) {
      close(fd);
      fd = high;
    }
  }
  // The raw syscall: our own connect() interposer must not see (or refuse) the shim's socket.
  if (syscall(SYS_connect, fd, &g_config.sock_addr, g_config.sock_len) != 0) {
    close(fd);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !send_hello(fd)) {
    close(fd);
    return -1;
  }
  *packed = pack(fd, static_cast<uint32_t>(st.st_ino));
  return fd;
}

// Returns a connected fd that is still ours, or -1.
int channel_fd(uint64_t* packed) {
  uint64_t cur = g_channel.load(std::memory_order_acquire);
  if (cur != kNoChannel) {
    if (still_ours(cur)) {
      *packed = cur;
      return unpack_fd(cur);
    }
    // Closed or reused by the program: forget it, never close or write it.
    g_channel.compare_exchange_strong(cur, kNoChannel, std::memory_order_acq_rel);
  }
  uint32_t skip = g_backoff.load(std::memory_order_relaxed);
  if (skip > 0) {
    g_backoff.compare_exchange_strong(skip, skip - 1, std::memory_order_relaxed);
    return -1;
  }
  uint64_t fresh = kNoChannel;
  int fd = open_channel(&fresh);
  if (fd < 0) {
    g_backoff.store(kBackoffEvents, std::memory_order_relaxed);
    return -1;
  }
  uint64_t expected = kNoChannel;
  if (!g_channel.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) {
    close(fd);  // another thread connected first; use theirs
    if (still_ours(expected)) {
      *packed = expected;
      return unpack_fd(expected);
    }
    return -1;
  }
  *packed = fresh;
  return fd;
}

}  // namespace

bool channel_send_raw(int fd, const uint8_t* msg, size_t len) {
  long n = syscall(SYS_sendto, fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL, nullptr, 0);
  return n == static_cast<long>(len);
}

uint32_t channel_take_drops() { return g_dropped.exchange(0, std::memory_order_relaxed); }
void channel_count_drops(uint32_t n) { g_dropped.fetch_add(n, std::memory_order_relaxed); }

void channel_after_fork_in_child() { g_dropped.store(0, std::memory_order_relaxed); }

bool channel_send(uint8_t* msg, size_t len) {
  int saved = errno;
  uint64_t packed = kNoChannel;
  int fd = channel_fd(&packed);
  bool sent = false;
  if (fd >= 0) {
    stamp_sender(msg);  // not before: a backed-off or missing channel costs no getpid/getppid
    uint32_t dropped = channel_take_drops();
    memcpy(msg + wire::kOffDropped, &dropped, 4);
    // MSG_NOSIGNAL: a dead collector must not SIGPIPE the program.
    long n = syscall(SYS_sendto, fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL, nullptr, 0);
    if (n == static_cast<long>(len)) {
      sent = true;
    } else {
      channel_count_drops(dropped);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) {
        // The collector went away (EPIPE/ECONNRESET): drop the connection we verified as ours.
        if (g_channel.compare_exchange_strong(packed, kNoChannel, std::memory_order_acq_rel)) {
          close(fd);
        }
      }
    }
  }
  if (!sent) {
    channel_count_drops(1);
  }
  errno = saved;
  return sent;
}

}  // namespace cordon::preload_shim
