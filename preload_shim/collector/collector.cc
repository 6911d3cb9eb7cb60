// Collector: accepts one seqpacket connection per shimmed process image, decodes each message,
// appends it to the session's event log.
#include "preload_shim/collector/collector.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "preload_shim/collector/decode.h"
#include "preload_shim/collector/sender.h"
#include "preload_shim/collector/sender_identity.h"
#include "preload_shim/wire.h"

namespace cordon::preload_shim {

struct Collector::Connection {
  UniqueFd fd;
  Sender sender;
};

namespace {
constexpr uint64_t kListenTag = ~0ull;
constexpr uint64_t kStopTag = ~0ull - 1;
// Drops the collector's copy of a socket a record came with. A socket with a linger timeout would
// make that close wait for its peer if ours were the last reference; the shim never passes one,
// so such a socket is a sender's trick and loses its linger instead.
void release_passed(int fd) {
  linger l{};
  socklen_t len = sizeof l;
  if (::getsockopt(fd, SOL_SOCKET, SO_LINGER, &l, &len) == 0 && l.l_onoff != 0 && l.l_linger > 0) {
    linger off{};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
  }
  ::close(fd);
}

// How long the collector lets messages accumulate while busy. Each process's send buffer holds a
// few hundred messages, so 1 ms absorbs ~100k events/s per process before anything is dropped.
constexpr long kBatchPauseNs = 1'000'000;
constexpr uint64_t kBusyBatch = 64;
}  // namespace

Result<std::unique_ptr<Collector>> Collector::listen(const std::string& socket_path,
                                                     record::EventLog log) {
  std::unique_ptr<Collector> c(new Collector());
  c->batch_ = std::make_unique<RecvBatch>();
  c->pidns_depth_ = own_pidns_depth();
  c->path_ = socket_path;
  c->log_ = std::move(log);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path) {
    return make_error("shim socket path \"" + socket_path + "\" must be 1.." +
                      std::to_string(sizeof addr.sun_path - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);

  struct stat st;
  if (lstat(socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return make_error("shim socket path \"" + socket_path + "\" exists and is not a socket",
                        "remove it or choose another path");
    }
    if (unlink(socket_path.c_str()) != 0) {
      return sys_error("unlink(\"" + socket_path + "\") (stale shim socket)");
    }
  }
  c->listen_fd_.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!c->listen_fd_) {
    return sys_error("socket(AF_UNIX, SOCK_SEQPACKET)");
  }
  int one = 1;
  // Kernel-verified sender pid/uid on every message; accepted sockets inherit the flag.
  if (setsockopt(c->listen_fd_.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) {
    return sys_error("setsockopt(SO_PASSCRED) on the shim socket");
  }
  if (bind(c->listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return sys_error("bind(\"" + socket_path + "\")", "the directory must exist and be writable");
  }
  if (chmod(socket_path.c_str(), 0666) != 0) {
    return sys_error("chmod(\"" + socket_path + "\", 0666)");
  }
  if (::listen(c->listen_fd_.get(), SOMAXCONN) != 0) {
    return sys_error("listen(\"" + socket_path + "\")");
  }
  c->epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!c->epoll_) {
    return sys_error("epoll_create1");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  if (epoll_ctl(c->epoll_.get(), EPOLL_CTL_ADD, c->listen_fd_.get(), &ev) != 0) {
    return sys_error("epoll_ctl(ADD, shim listen socket)");
  }
  return c;
}

Collector::Collector() = default;

Collector::~Collector() {
  if (listen_fd_) {
    unlink(path_.c_str());
  }
}

void Collector::accept_all() {
  for (;;) {
    int fd = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      return;  // EAGAIN, or a transient error (EMFILE): the rest stay queued for the next round
    }
    if (conns_.size() >= kMaxConnections) {
      close(fd);  // the shim counts what it cannot send and tries again later
      stats_.refused.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(fd);
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      continue;
    }
    auto conn = std::make_unique<Connection>(Connection{UniqueFd(fd), Sender(pidns_depth_)});
    conns_.emplace(fd, std::move(conn));
    stats_.connections.fetch_add(1, std::memory_order_relaxed);
    // The hello is usually queued already, and its sender may be waiting for the identity byte
    // before it exits: read it now rather than on the next round.
    if (!read_all(fd)) {
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
      conns_.erase(fd);
    }
  }
}

bool Collector::read_all(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) {
    return false;
  }
  RecvBatch& b = *batch_;
  // Bounded per wake-up so one chatty process cannot starve the others.
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < RecvBatch::kSize; ++i) {
      // A buffer bigger than any valid message: with MSG_TRUNC an oversized one is detected.
      b.iov[i] = iovec{b.data[i], sizeof b.data[i]};
      b.msgs[i].msg_hdr = msghdr{};
      b.msgs[i].msg_hdr.msg_iov = &b.iov[i];
      b.msgs[i].msg_hdr.msg_iovlen = 1;
      b.msgs[i].msg_hdr.msg_control = b.control[i];
      b.msgs[i].msg_hdr.msg_controllen = sizeof b.control[i];
      b.msgs[i].msg_len = 0;
    }
    // One syscall for up to kSize messages: the collector's cost per event is what competes with
    // the traced program for the CPU.
    int n = recvmmsg(fd, b.msgs, RecvBatch::kSize, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, nullptr);
    if (n < 0 && errno == ECONNRESET) {
      // The sender closed with our identity byte unread: the kernel says so once, before the
      // messages still queued, which are read next.
      continue;
    }
    if (n < 0) {
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
    if (n == 0) {
      return false;
    }
    bool ended = false;
    for (int i = 0; i < n; ++i) {
      msghdr& msg = b.msgs[i].msg_hdr;
      size_t len = b.msgs[i].msg_len;
      const ucred* cred = nullptr;
      int passed = -1;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
            c->cmsg_len == CMSG_LEN(sizeof(ucred))) {
          cred = reinterpret_cast<const ucred*>(CMSG_DATA(c));
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          // Room for one fd: the kernel closed any others. Each is ours to close.
          for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++k) {
            int fd_in;
            std::memcpy(&fd_in, CMSG_DATA(c) + k * sizeof(int), sizeof fd_in);
            if (passed < 0) {
              passed = fd_in;
            } else {
              release_passed(fd_in);
            }
          }
        }
      }
      if (len == 0) {
        // End of stream (every holder of the connection exited or exec'd), or an empty message
        // a sender made to look like one: either way the connection is done, after every fd that
        // came in this batch is closed.
        ended = true;
      } else if ((msg.msg_flags & MSG_TRUNC) != 0 || len > wire::kMaxMessage) {
        stats_.malformed.fetch_add(1, std::memory_order_relaxed);
      } else if (!ended) {
        handle(*it->second, b.data[i], len, cred, passed);
      }
      if (passed >= 0) {
        release_passed(passed);
      }
    }
    if (ended) {
      return false;
    }
    if (n < RecvBatch::kSize) {
      return true;  // drained
    }
  }
  return true;
}

void Collector::handle(Connection& conn, const uint8_t* data, size_t len, const ucred* cred,
                       int passed) {
  if (cred == nullptr) {
    // SO_PASSCRED is set on every connection: a message without the kernel's word on its sender
    // has nothing to attribute it to.
    stats_.malformed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  PeerCredentials pc{true, cred->pid, cred->uid, cred->gid};
  try {
    auto ev = decode_message(data, len, pc);
    if (!ev.ok()) {
      stats_.malformed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if ((*ev)["kind"] == "shim.hello") {
      conn.sender.hello(*ev, *cred, passed);
      // Identity read: the sender may exit or exec now (it waits for this byte, briefly).
      char ack = 'A';
      (void)send(conn.fd.get(), &ack, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      return;
    }
    if ((*ev)["kind"] == "fs.canary" && !match_decoy(*ev)) {
      return;  // a file named like a decoy that is not one
    }
    conn.sender.apply(*ev, *cred, passed);
    if (auto it = ev->find("dropped_before"); it != ev->end()) {
      stats_.dropped.fetch_add(it->get<uint64_t>(), std::memory_order_relaxed);
    }
    pending_.push_back(std::move(*ev));
  } catch (const std::exception&) {
    // Exception firewall: json can throw on allocation failure; this loop must survive it.
    stats_.malformed.fetch_add(1, std::memory_order_relaxed);
  }
}

void Collector::set_decoys(std::vector<DecoyId> decoys) {
  std::lock_guard<std::mutex> lock(decoys_mu_);
  decoys_ = std::move(decoys);
}

bool Collector::match_decoy(nlohmann::json& ev) {
  const auto dev = ev.find("dev"), ino = ev.find("ino");
  if (dev == ev.end() || ino == ev.end() || !dev->is_number_unsigned() ||
      !ino->is_number_unsigned()) {
    return false;
  }
  const uint64_t d = dev->get<uint64_t>(), i = ino->get<uint64_t>();
  std::lock_guard<std::mutex> lock(decoys_mu_);
  for (const auto& decoy : decoys_) {
    if (decoy.dev == d && decoy.ino == i) {
      ev["canary"] = decoy.canary;
      ev.erase("dev");
      ev.erase("ino");
      return true;
    }
  }
  return false;
}

void Collector::flush_pending() {
  for (auto& ev : pending_) {
    try {
      // A failed append (disk full) cannot be reported to the shim; the count shows the gap.
      if (log_.write(std::move(ev)).ok()) {
        stats_.events.fetch_add(1, std::memory_order_relaxed);
      }
    } catch (const std::exception&) {
      stats_.malformed.fetch_add(1, std::memory_order_relaxed);  // the same firewall as handle()
    }
  }
  pending_.clear();
}

Status Collector::poll_once(int timeout_ms) {
  bool stop = false;
  return wait_and_dispatch(timeout_ms, &stop);
}

Status Collector::wait_and_dispatch(int timeout_ms, bool* stop, uint64_t* handled) {
  epoll_event events[64];
  int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) {
      return {};
    }
    return sys_error("epoll_wait(shim collector)");
  }
  for (int i = 0; i < n; ++i) {
    uint64_t tag = events[i].data.u64;
    if (tag == kStopTag) {
      *stop = true;
    } else if (tag == kListenTag) {
      accept_all();
    } else {
      int fd = static_cast<int>(tag);
      if (!read_all(fd)) {
        epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
        conns_.erase(fd);
      }
    }
  }
  flush_pending();
  if (handled != nullptr) {
    *handled = static_cast<uint64_t>(n);
  }
  return {};
}

Status Collector::run(int stop_fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kStopTag;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, stop_fd, &ev) != 0) {
    return sys_error("epoll_ctl(ADD, collector stop fd)");
  }
  // Batching: while messages keep coming, drain, then sleep a little *outside* epoll_wait. A
  // sender only pays for a wake-up when the collector is blocked waiting; a collector woken per
  // message costs the traced program a context switch per event (measured: +70% per loopback
  // connect on 2 cores). Idle, it blocks and the first message wakes it.
  bool stop = false;
  bool busy = false;
  while (!stop) {
    uint64_t handled = 0;
    uint64_t before = stats_.events.load(std::memory_order_relaxed) +
                      stats_.malformed.load(std::memory_order_relaxed);
    uint64_t connected = stats_.connections.load(std::memory_order_relaxed);
    Status st = wait_and_dispatch(busy ? 0 : -1, &stop, &handled);
    if (!st.ok()) {
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, stop_fd, nullptr);
      return st;
    }
    busy = handled > 0;
    uint64_t messages = stats_.events.load(std::memory_order_relaxed) +
                        stats_.malformed.load(std::memory_order_relaxed) - before;
    // A large batch means some sender's buffer is filling: go again at once instead of pausing.
    // So does a new connection: its process may be waiting to exit until it is identified.
    bool new_senders = stats_.connections.load(std::memory_order_relaxed) != connected;
    if (busy && !stop && messages < kBusyBatch && !new_senders) {
      timespec pause{0, kBatchPauseNs};
      nanosleep(&pause, nullptr);
    }
  }
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, stop_fd, nullptr);
  // Drain what is already queued (by exited processes too) before returning; bounded, because a
  // process that is still running could keep sending forever.
  accept_all();
  for (auto& [fd, owned] : conns_) {
    for (int round = 0; round < 64; ++round) {
      uint8_t probe;
      if (recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) <= 0 || !read_all(fd)) {
        break;
      }
    }
  }
  flush_pending();
  return log_.report_drops();  // the collector's last word in the record
}

}  // namespace cordon::preload_shim
