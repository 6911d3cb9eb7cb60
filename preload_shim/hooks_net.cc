// Network interposers: connect, sendto, sendmsg, bind, listen, getaddrinfo.
#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <unistd.h>

#include "preload_shim/shim.h"

using namespace cordon::preload_shim;

namespace {

// Distinct key spaces in the first-sight table.
constexpr uint32_t kSaltSend = 0x73656e64;
constexpr uint32_t kSaltConnect = 0x636f6e6e;

wire::Decision decision_for(bool refused) {
  if (!g_config.deny_net) {
    return wire::kNoDecision;
  }
  return refused ? wire::kDeny : wire::kAllow;
}

// Whether closing `fd` could block in close(2) (SO_LINGER with a timeout): such a socket is not
// passed to the collector, whose close of its copy might then be the last one.
bool lingers(int fd) {
  linger l{};
  socklen_t len = sizeof l;
  return getsockopt(fd, SOL_SOCKET, SO_LINGER, &l, &len) != 0 || (l.l_onoff != 0 && l.l_linger > 0);
}

void send_net_event(wire::Kind kind, wire::Decision d, int fd, const sockaddr* remote,
                    socklen_t remote_len, int err, const char* via, bool attach = false) {
  if (!g_config.have_socket) {
    return;  // nothing would be sent: spare the getsockname
  }
  Event ev(kind, d);
  if (fd >= 0) {
    sockaddr_storage local;
    socklen_t local_len = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
      ev.add_sockaddr(wire::kLocal, reinterpret_cast<sockaddr*>(&local), local_len);
    }
  }
  ev.add_sockaddr(wire::kRemote, remote, remote_len);
  ev.add_u32(wire::kErrno, static_cast<uint32_t>(err));
  if (via != nullptr) {
    ev.add_str(wire::kVia, via, 32);
  }
  ev.send(attach && fd >= 0 && !lingers(fd) ? fd : -1);
}

// The destination check shared by sendto/sendmsg: refuse in deny mode, report first sight.
bool send_allowed(int fd, const sockaddr* to, socklen_t to_len, const char* via) {
  if (to == nullptr || !is_inet(to, to_len)) {
    return true;
  }
  bool refused = net_refused(to, to_len);
  if (refused) {
    report_refusal("send", to, to_len);
  }
  if (refused || first_sight(to, to_len, kSaltSend)) {
    send_net_event(wire::kNetSend, decision_for(refused), fd, to, to_len, refused ? EACCES : 0,
                   via);
  }
  return !refused;
}

}  // namespace

CORDON_EXPORT int connect(int fd, const sockaddr* addr, socklen_t len) {
  auto real = CORDON_REAL(connect);
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (addr == nullptr || !g_config.loaded || !is_inet(addr, len)) {
    return real(fd, addr, len);
  }
  if (net_refused(addr, len)) {
    // Before the syscall: nothing leaves, and the agent reads why.
    ErrnoGuard guard;
    report_refusal("connect", addr, len);
    send_net_event(wire::kNetConnect, wire::kDeny, -1, addr, len, EACCES, nullptr);
    guard.set(EACCES);
    return -1;
  }
  int rc = real(fd, addr, len);
  ErrnoGuard guard;  // errno exactly as the real call left it
  // A loopback destination never reaches the proxy, so the join needs no record of each connect:
  // the first per destination and process is reported. (In deny mode the proxy itself listens on
  // loopback and every connect to it must be joinable: all are reported.) The pid in the key keeps
  // a forked child's first connect reported although it inherited its parent's table.
  if (!g_config.deny_net && !g_config.connect_events_all && is_loopback(addr, len) &&
      !first_sight(addr, len, kSaltConnect ^ static_cast<uint32_t>(getpid()))) {
    return rc;
  }
  // After connect (also EINPROGRESS) the local port is bound: it is what the proxy sees as the
  // peer, so (pid, local address) joins the two records. The socket goes along: the collector
  // takes the local address from it, so no process can claim another's connection.
  const bool connected = rc == 0 || guard.saved() == EINPROGRESS;
  send_net_event(wire::kNetConnect, decision_for(false), fd, addr, len, rc == 0 ? 0 : guard.saved(),
                 nullptr, connected);
  return rc;
}

CORDON_EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to,
                             socklen_t to_len) {
  auto real = CORDON_REAL(sendto);
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (to != nullptr && g_config.loaded) {
    ErrnoGuard guard;
    if (!send_allowed(fd, to, to_len, "sendto")) {
      guard.set(EACCES);
      return -1;
    }
  }
  return real(fd, buf, n, flags, to, to_len);
}

CORDON_EXPORT ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  auto real = CORDON_REAL(sendmsg);
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (msg != nullptr && msg->msg_name != nullptr && g_config.loaded) {
    ErrnoGuard guard;
    if (!send_allowed(fd, static_cast<const sockaddr*>(msg->msg_name), msg->msg_namelen,
                      "sendmsg")) {
      guard.set(EACCES);
      return -1;
    }
  }
  return real(fd, msg, flags);
}

CORDON_EXPORT int bind(int fd, const sockaddr* addr, socklen_t len) {
  auto real = CORDON_REAL(bind);
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  int rc = real(fd, addr, len);
  if (g_config.loaded && addr != nullptr && is_inet(addr, len)) {
    ErrnoGuard guard;
    send_net_event(wire::kNetBind, wire::kNoDecision, rc == 0 ? fd : -1, nullptr, 0,
                   rc == 0 ? 0 : guard.saved(), nullptr);
  }
  return rc;
}

CORDON_EXPORT int listen(int fd, int backlog) {
  auto real = CORDON_REAL(listen);
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  int rc = real(fd, backlog);
  if (g_config.loaded && g_config.have_socket && rc == 0) {
    ErrnoGuard guard;
    sockaddr_storage local;
    socklen_t local_len = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0 &&
        is_inet(reinterpret_cast<sockaddr*>(&local), local_len)) {
      Event ev(wire::kNetListen);
      ev.add_sockaddr(wire::kLocal, reinterpret_cast<sockaddr*>(&local), local_len);
      ev.add_u32(wire::kBacklog, static_cast<uint32_t>(backlog));
      ev.send();
    }
  }
  return rc;
}

CORDON_EXPORT int getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                              addrinfo** res) {
  auto real = CORDON_REAL(getaddrinfo);
  if (real == nullptr) {
    return EAI_SYSTEM;
  }
  int rc = real(node, service, hints, res);
  if (g_config.loaded && node != nullptr) {
    ErrnoGuard guard;
    Event ev(wire::kNetDns);
    ev.add_str(wire::kName, node, 253);
    ev.add_str(wire::kService, service, 32);
    ev.add_u32(wire::kGaiResult, static_cast<uint32_t>(rc));
    if (rc == 0 && res != nullptr) {
      int shown = 0;
      for (const addrinfo* ai = *res; ai != nullptr && shown < 4; ai = ai->ai_next) {
        // getaddrinfo lists each address once per socket type; report each address once.
        if (ai->ai_socktype == SOCK_STREAM || ai->ai_socktype == 0) {
          ev.add_sockaddr(wire::kResolved, ai->ai_addr, ai->ai_addrlen);
          ++shown;
        }
      }
    }
    ev.send();
  }
  return rc;
}
