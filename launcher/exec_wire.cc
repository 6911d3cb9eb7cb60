// Encoding and one-message transfer for `cordon exec`'s requests and reports.
#include "launcher/exec_wire.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace cordon::launcher {
namespace {

constexpr size_t kMaxFds = 3;

// Each field: a one-byte tag, the text, a NUL.
void put(std::string& out, char tag, std::string_view text) {
  out.push_back(tag);
  out.append(text);
  out.push_back('\0');
}

}  // namespace

std::string encode_request(const ExecRequest& r) {
  std::string out;
  put(out, 'o', std::string_view(reinterpret_cast<const char*>(&r.op), 1));
  for (const auto& a : r.argv) {
    put(out, 'a', a);
  }
  for (const auto& e : r.env) {
    put(out, 'e', e);
  }
  put(out, 'c', r.cwd);
  if (r.op == ControlOp::Signal) {
    put(out, 'n', std::to_string(r.signal));
  }
  return out;
}

Result<ExecRequest> decode_request(std::string_view bytes) {
  ExecRequest r;
  bool has_op = false;
  while (!bytes.empty()) {
    size_t end = bytes.find('\0');
    if (end == std::string_view::npos) {
      return make_error("exec request: a field without its terminator");
    }
    char tag = bytes[0];
    std::string text(bytes.substr(1, end - 1));
    bytes.remove_prefix(end + 1);
    switch (tag) {
      case 'o':
        if (text != "x" && text != "s" && text != "k") {
          return make_error("exec request: unknown operation");
        }
        r.op = static_cast<ControlOp>(text[0]);
        has_op = true;
        break;
      case 'a':
        r.argv.push_back(std::move(text));
        break;
      case 'e':
        if (text.find('=') == std::string::npos || text[0] == '=') {
          return make_error("exec request: environment entry without NAME=");
        }
        r.env.push_back(std::move(text));
        break;
      case 'c':
        r.cwd = std::move(text);
        break;
      case 'n':
        if (text.empty() || text.size() > 2 ||
            text.find_first_not_of("0123456789") != std::string::npos) {
          return make_error("exec request: bad signal number");
        }
        r.signal = std::stoi(text);
        break;
      default:
        return make_error("exec request: unknown field");
    }
  }
  if (!has_op) {
    return make_error("exec request: no operation");
  }
  if (r.op == ControlOp::Exec && (r.argv.empty() || r.argv[0].empty())) {
    return make_error("exec request: no command");
  }
  if (r.op == ControlOp::Signal && (r.signal < 1 || r.signal > 64)) {
    return make_error("exec request: bad signal number");
  }
  return r;
}

std::string encode_report(const ExecReport& r, std::string_view text) {
  std::string out(reinterpret_cast<const char*>(&r), sizeof r);
  out.append(text);
  return out;
}

Result<std::pair<ExecReport, std::string>> decode_report(std::string_view bytes) {
  if (bytes.size() < sizeof(ExecReport)) {
    return make_error("exec report: " + std::to_string(bytes.size()) + " bytes, too short");
  }
  ExecReport r;
  std::memcpy(&r, bytes.data(), sizeof r);
  return std::make_pair(r, std::string(bytes.substr(sizeof r)));
}

Status send_packet(int sock, std::string_view bytes, const int* fds, size_t nfds) {
  if (nfds > kMaxFds) {
    return make_error("send_packet: more than 3 fds");
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (nfds > 0) {
    mh.msg_control = cbuf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  for (int tries = 0; tries < 8; ++tries) {
    ssize_t n = ::sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes.size())) {
      return {};
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return sys_error("sendmsg(" + std::to_string(bytes.size()) + " bytes)");
    }
    return make_error("sendmsg: message cut short");
  }
  return make_error("sendmsg: interrupted too often");
}

Result<Packet> recv_packet(int sock, size_t max_bytes, int flags) {
  Packet p;
  p.bytes.resize(max_bytes + 1);
  iovec iov{p.bytes.data(), p.bytes.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return sys_error("recvmsg()");
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        p.fds.emplace_back(fd);  // owned at once, so an error below closes them
      }
    }
  }
  if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || static_cast<size_t>(n) > max_bytes) {
    return make_error("recvmsg: message larger than " + std::to_string(max_bytes) +
                      " bytes or with more than 3 fds");
  }
  if (n == 0 && p.fds.empty()) {
    p.eof = true;
  }
  p.bytes.resize(static_cast<size_t>(n));
  return p;
}

}  // namespace cordon::launcher
