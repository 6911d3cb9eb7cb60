// The sandbox -> cordon report channel (SOCK_SEQPACKET + SCM_RIGHTS).
#include "launcher/channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace cordon::launcher {
namespace {

struct Wire {
  uint32_t kind;
  int32_t value;
  char text[2048];
};

}  // namespace

Result<ChannelPair> make_channel() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return sys_error("socketpair(AF_UNIX, SOCK_SEQPACKET)");
  }
  return ChannelPair{UniqueFd(sv[0]), UniqueFd(sv[1])};
}

bool send_msg(int sock, MsgKind kind, int32_t value, const char* text, int fd) {
  return send_msg_fds(sock, kind, value, text, &fd, fd >= 0 ? 1 : 0);
}

bool send_msg_fds(int sock, MsgKind kind, int32_t value, const char* text, const int* fds,
                  size_t nfds) {
  if (nfds > kMaxMsgFds) {
    errno = EINVAL;
    return false;
  }
  Wire w{};
  w.kind = static_cast<uint32_t>(kind);
  w.value = value;
  size_t len = 0;
  if (text != nullptr) {
    len = std::min(std::strlen(text), sizeof w.text);
    std::memcpy(w.text, text, len);
  }
  iovec iov{&w, offsetof(Wire, text) + len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxMsgFds)];
  if (nfds > 0) {
    std::memset(cbuf, 0, sizeof cbuf);
    mh.msg_control = cbuf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &mh, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n >= 0;
}

Result<std::optional<Msg>> recv_msg(int sock) {
  Wire w{};
  iovec iov{&w, sizeof w};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxMsgFds)];
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return sys_error("recvmsg(report channel)");
  }
  if (n == 0) {
    return std::optional<Msg>{};
  }
  Msg m;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (!m.fd) {
          m.fd.reset(fd);
        } else {
          m.fds.emplace_back(fd);
        }
      }
    }
  }
  if (static_cast<size_t>(n) < offsetof(Wire, text)) {
    return make_error("report channel: short message from the sandbox");
  }
  m.kind = static_cast<MsgKind>(w.kind);
  m.value = w.value;
  m.text.assign(w.text, static_cast<size_t>(n) - offsetof(Wire, text));
  return std::optional<Msg>(std::move(m));
}

Result<Msg> recv_until(int sock, MsgKind kind, const std::string& if_ended) {
  for (;;) {
    auto m = recv_msg(sock);
    if (!m.ok()) {
      return std::move(m).error();
    }
    if (!m->has_value()) {
      return make_error(if_ended);
    }
    if ((*m)->kind == MsgKind::SetupError) {
      return make_error((*m)->text);
    }
    if ((*m)->kind == kind) {
      return std::move(**m);
    }
  }
}

Status release_child(int sock) {
  char go = 'g';
  if (::send(sock, &go, 1, MSG_NOSIGNAL) != 1) {
    return sys_error("send(release byte to the sandbox)");
  }
  return {};
}

bool wait_for_release(int sock) {
  char go = 0;
  ssize_t n;
  do {
    n = ::recv(sock, &go, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n == 1 && go == 'g';
}

}  // namespace cordon::launcher
