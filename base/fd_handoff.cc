// hand_over_fds / receive_handed_fds over SOCK_SEQPACKET with SCM_RIGHTS and SCM_CREDENTIALS.
#include "base/fd_handoff.h"

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <string>

namespace cordon {

namespace {

// More than any daemon of cordon is handed; a message with more is not ours.
constexpr size_t kMaxFds = 32;

// One poll for readability within what is left of `deadline`; false on timeout.
Result<bool> wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return false;
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) {
      return true;
    }
    if (r < 0 && errno != EINTR) {
      return sys_error("poll(fd handoff socket)");
    }
  }
}

// Every message of the handoff: one byte, with room for credentials and the fds.
struct Message {
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr msg{};
  Message() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  Message(const Message&) = delete;  // msg points into it
  Message& operator=(const Message&) = delete;
};

// The fds of an SCM_RIGHTS message (received with MSG_CMSG_CLOEXEC), owned.
std::vector<UniqueFd> fds_of(msghdr& msg, const ucred** cred) {
  std::vector<UniqueFd> out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET) {
      continue;
    }
    if (c->cmsg_type == SCM_RIGHTS) {
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        out.emplace_back(fd);
      }
    } else if (c->cmsg_type == SCM_CREDENTIALS && cred != nullptr &&
               c->cmsg_len == CMSG_LEN(sizeof(ucred))) {
      *cred = reinterpret_cast<const ucred*>(CMSG_DATA(c));
    }
  }
  return out;
}

bool is_seqpacket_unix(int fd) {
  int type = 0, domain = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return false;
  }
  len = sizeof domain;
  return ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX &&
         type == SOCK_SEQPACKET;
}

Status send_fds(int sock, const int* fds, size_t n) {
  Message m;
  m.msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * n);
  std::memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
  if (::sendmsg(sock, &m.msg, MSG_NOSIGNAL) != 1) {
    return sys_error("sendmsg(SCM_RIGHTS, " + std::to_string(n) + " fds) on the handoff socket");
  }
  return {};
}

}  // namespace

Status hand_over_fds(int sock, pid_t pid, const std::vector<int>& fds, int timeout_ms) {
  if (fds.size() > kMaxFds) {
    return make_error("hand_over_fds: " + std::to_string(fds.size()) + " fds, at most " +
                      std::to_string(kMaxFds));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  // Bounded: whoever else holds the daemon's end (taken before it was undumpable) can only make
  // us read and drop its messages until the deadline.
  for (int round = 0; round < 1000; ++round) {
    ASSIGN_OR_RETURN(bool ready, wait_readable(sock, deadline));
    if (!ready) {
      return make_error("the daemon (pid " + std::to_string(pid) +
                        ") did not ask for its fds within " + std::to_string(timeout_ms) + " ms");
    }
    Message m;
    ssize_t n = ::recvmsg(sock, &m.msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        continue;
      }
      return sys_error("recvmsg(fd handoff socket)");
    }
    if (n == 0) {
      return make_error("the daemon (pid " + std::to_string(pid) +
                        ") closed its handoff socket before asking for its fds");
    }
    const ucred* cred = nullptr;
    std::vector<UniqueFd> got = fds_of(m.msg, &cred);
    // The kernel's credentials, not a claim: only the daemon itself can send with its pid.
    if (cred == nullptr || cred->pid != pid || got.size() != 1 ||
        (m.msg.msg_flags & MSG_CTRUNC) != 0 || !is_seqpacket_unix(got[0].get())) {
      continue;
    }
    return send_fds(got[0].get(), fds.data(), fds.size());
  }
  return make_error("too many stray messages on the daemon's (pid " + std::to_string(pid) +
                    ") handoff socket");
}

Result<std::vector<UniqueFd>> receive_handed_fds(int sock, size_t count, int timeout_ms) {
  if (count > kMaxFds) {
    return make_error("receive_handed_fds: " + std::to_string(count) + " fds, at most " +
                      std::to_string(kMaxFds));
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return sys_error("socketpair(AF_UNIX, SOCK_SEQPACKET) for the fd handoff");
  }
  UniqueFd mine(sv[0]), theirs(sv[1]);
  TRY(send_fds(sock, &sv[1], 1));
  theirs.reset();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  ASSIGN_OR_RETURN(bool ready, wait_readable(mine.get(), deadline));
  if (!ready) {
    return make_error("no fds from cordon within " + std::to_string(timeout_ms) + " ms");
  }
  Message m;
  ssize_t n = ::recvmsg(mine.get(), &m.msg, MSG_CMSG_CLOEXEC);
  if (n < 0) {
    return sys_error("recvmsg(fd handoff socket)");
  }
  std::vector<UniqueFd> got = fds_of(m.msg, nullptr);
  if (n != 1 || (m.msg.msg_flags & MSG_CTRUNC) != 0 || got.size() != count) {
    return make_error("the fd handoff brought " + std::to_string(got.size()) + " fds, expected " +
                      std::to_string(count));
  }
  return got;
}

}  // namespace cordon
