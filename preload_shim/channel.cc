// The event channel: one non-blocking SOCK_SEQPACKET connection per process image to the collector.
//
// Why SEQPACKET and not SOCK_DGRAM: an unconnected unix datagram receiver accepts at most
// net.unix.max_dgram_qlen (default 10) queued messages from all senders together, so a burst from
// a few processes would drop events while the collector is being woken. A connected seqpacket keeps
// message boundaries and gives each process its own send buffer (~200 KiB). A full buffer makes
// the event wait up to 20 ms for room (channel_send), then drops it (counted).
//
// The program owns the fd table: it may close our fd or reuse its number. Before every send we
// check that the fd is still the socket we opened (fstat: inode), and otherwise forget it without
// touching it and reconnect.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
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
// The collector reads who we are from /proc (preload_shim/collector/sender.h) and then sends one
// byte back. The process that opened the channel waits for that byte, briefly, before it exits or
// execs: a short-lived program would otherwise be gone (or another program) before cordon could
// read it. The byte usually comes within a fraction of a millisecond; the bound only matters when
// the collector lags, and then it is what keeps the record attributed: with 10 ms, 20 concurrent
// python3 clients on a loaded machine (load ~9) lost a pid in 1 of 30 runs, with 100 ms in 0 of
// 40. A hung collector costs each program image at most this once, at its exit or exec.
std::atomic<int> g_opener{0};
std::atomic<bool> g_acked{true};
constexpr int kAckWaitMs = 100;

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
  // Our end of the connection goes along, with its number here: the collector checks that we
  // still hold it, close-on-exec, once it has read who we are (so what it read is this image).
  hello.add_u32(wire::kChannelFd, static_cast<uint32_t>(fd));
  return hello.send_on(fd);
}

// sendmsg with one fd in SCM_RIGHTS, through the raw syscall (our own sendmsg interposer must not
// see the shim's traffic).
long send_with_fd(int fd, const uint8_t* msg, size_t len, int attach_fd) {
  iovec iov{const_cast<uint8_t*>(msg), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  memset(control, 0, sizeof control);
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &attach_fd, sizeof(int));
  return syscall(SYS_sendmsg, fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
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
  g_acked.store(false, std::memory_order_relaxed);
  g_opener.store(static_cast<int>(getpid()), std::memory_order_relaxed);
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
  long n = send_with_fd(fd, msg, len, fd);  // the hello: with our own end
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    // Too many fds in flight (ETOOMANYREFS), or passing refused: unverifiable, but reported.
    n = syscall(SYS_sendto, fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL, nullptr, 0);
  }
  return n == static_cast<long>(len);
}

uint32_t channel_take_drops() { return g_dropped.exchange(0, std::memory_order_relaxed); }
void channel_count_drops(uint32_t n) { g_dropped.fetch_add(n, std::memory_order_relaxed); }

void channel_after_fork_in_child() { g_dropped.store(0, std::memory_order_relaxed); }

void channel_await_identity() {
  // Only the opener: a forked child shares the opener's image, which the collector checks once.
  // (The pid first: a vfork child shares our memory and must not mark the wait done for us.)
  if (g_opener.load(std::memory_order_relaxed) != static_cast<int>(getpid()) ||
      g_acked.exchange(true, std::memory_order_relaxed)) {
    return;
  }
  int saved = errno;
  uint64_t cur = g_channel.load(std::memory_order_acquire);
  if (cur != kNoChannel && still_ours(cur)) {
    pollfd p{unpack_fd(cur), POLLIN, 0};
    if (poll(&p, 1, kAckWaitMs) > 0) {
      char b;
      (void)syscall(SYS_recvfrom, unpack_fd(cur), &b, 1, MSG_DONTWAIT, nullptr, nullptr);
    }
  }
  errno = saved;
}

namespace {

// A full send buffer means the collector lags (a burst from many threads, a loaded machine): the
// event waits a little for room rather than being lost. A collector that stays full for the whole
// wait (hung) costs one wait per kFullSkipEvents events, the others dropped (counted) at once.
constexpr int kFullWaitMs = 20;
constexpr uint32_t kFullSkipEvents = 256;
std::atomic<uint32_t> g_full_skip{0};

bool wait_for_room(int fd) {
  uint32_t skip = g_full_skip.load(std::memory_order_relaxed);
  if (skip > 0) {
    g_full_skip.compare_exchange_strong(skip, skip - 1, std::memory_order_relaxed);
    return false;
  }
  pollfd p{fd, POLLOUT, 0};
  if (poll(&p, 1, kFullWaitMs) > 0 && (p.revents & POLLOUT) != 0) {
    return true;
  }
  g_full_skip.store(kFullSkipEvents, std::memory_order_relaxed);
  return false;
}

}  // namespace

bool channel_send(uint8_t* msg, size_t len, int attach_fd) {
  int saved = errno;
  uint64_t packed = kNoChannel;
  int fd = channel_fd(&packed);
  bool sent = false;
  if (fd >= 0) {
    stamp_sender(msg);  // not before: a backed-off or missing channel costs no getpid/getppid
    uint32_t dropped = channel_take_drops();
    memcpy(msg + wire::kOffDropped, &dropped, 4);
    // MSG_NOSIGNAL: a dead collector must not SIGPIPE the program.
    auto attempt = [&]() -> long {
      long r = -1;
      if (attach_fd >= 0) {
        r = send_with_fd(fd, msg, len, attach_fd);
        // ETOOMANYREFS (too many fds in flight for this user) or an fd that cannot be passed:
        // the event goes without it (its addresses then stay the process's claim).
        if (r < 0 && (errno == ETOOMANYREFS || errno == EBADF || errno == EINVAL)) {
          attach_fd = -1;
        }
      }
      if (attach_fd < 0) {
        r = syscall(SYS_sendto, fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL, nullptr, 0);
      }
      return r;
    };
    long n = attempt();
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for_room(fd)) {
      n = attempt();
    }
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
