// The terminal: a pty in the sandbox's own devpts, raw mode on the host, the relay between them.
#include "launcher/sandbox/pty.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

namespace cordon::launcher {
namespace {
constexpr size_t kMaxBuffered = 64 * 1024;  // per direction; reading pauses beyond it
}

Result<PtyPair> open_pty_in_child(const std::optional<winsize>& window) {
  PtyPair p;
  p.master.reset(::open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.master) {
    return sys_error("open(\"/dev/pts/ptmx\") in the sandbox");
  }
  int unlock = 0;
  if (::ioctl(p.master.get(), TIOCSPTLCK, &unlock) != 0) {
    return sys_error("ioctl(ptmx, TIOCSPTLCK, 0)");
  }
  int s = ::ioctl(p.master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (s < 0) {
    return sys_error("ioctl(ptmx, TIOCGPTPEER)", "needs Linux >= 4.13");
  }
  p.slave.reset(s);
  if (window && ::ioctl(p.master.get(), TIOCSWINSZ, &*window) != 0) {
    return sys_error("ioctl(ptmx, TIOCSWINSZ)");
  }
  return p;
}

Status attach_terminal_in_program(int slave) {
  if (::ioctl(slave, TIOCSCTTY, 0) != 0) {
    return sys_error("ioctl(pty slave, TIOCSCTTY)");
  }
  for (int fd = 0; fd <= 2; ++fd) {
    if (::dup2(slave, fd) < 0) {
      return sys_error("dup2(pty slave, " + std::to_string(fd) + ")");
    }
  }
  if (slave > 2) {
    ::close(slave);
  }
  return {};
}

namespace {

// Reads what a canonical-mode terminal holds complete, without blocking: poll(2) reports it
// readable only for a whole line or an end-of-file mark. An end-of-file mark reads as 0 bytes and
// is passed on as the terminal's own EOF character, the byte a ^D typed in raw mode would be,
// which the program's pty (canonical from the start) turns back into end-of-file. Bounded: a
// terminal that keeps answering (hung up) is left to the relay.
std::string read_typed_ahead(int fd, const termios& mode) {
  std::string typed;
  if ((mode.c_lflag & ICANON) == 0) {
    return typed;  // raw already: nothing is held back as lines
  }
  char buf[4096];
  for (int i = 0; i < 64 && typed.size() < kMaxBuffered; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) != 1 || p.revents != POLLIN) {
      break;
    }
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      typed.append(buf, static_cast<size_t>(n));
    } else if (n == 0 && mode.c_cc[VEOF] != _POSIX_VDISABLE) {
      typed.push_back(static_cast<char>(mode.c_cc[VEOF]));
    } else {
      break;
    }
  }
  return typed;
}

}  // namespace

Result<RawTerminal> RawTerminal::enter(int fd, std::string& typed_ahead) {
  RawTerminal t;
  if (::tcgetattr(fd, &t.saved_) != 0) {
    return sys_error("tcgetattr(" + std::to_string(fd) + ")");
  }
  typed_ahead = read_typed_ahead(fd, t.saved_);
  termios raw = t.saved_;
  ::cfmakeraw(&raw);
  if (::tcsetattr(fd, TCSADRAIN, &raw) != 0) {
    return sys_error("tcsetattr(" + std::to_string(fd) + ", raw)");
  }
  t.fd_ = fd;
  return t;
}

RawTerminal& RawTerminal::operator=(RawTerminal&& o) noexcept {
  if (this != &o) {
    restore();
    fd_ = o.fd_;
    saved_ = o.saved_;
    o.fd_ = -1;
  }
  return *this;
}

void RawTerminal::restore() {
  if (fd_ >= 0) {
    ::tcsetattr(fd_, TCSADRAIN, &saved_);
    fd_ = -1;
  }
}

PtyRelay::PtyRelay(int in_fd, int out_fd, UniqueFd master, std::string typed_ahead)
    : in_(in_fd), out_(out_fd), master_(std::move(master)), to_master_(std::move(typed_ahead)) {
  int fl = ::fcntl(master_.get(), F_GETFL);
  ::fcntl(master_.get(), F_SETFL, fl | O_NONBLOCK);
}

void PtyRelay::copy_window_size(int from) const {
  winsize ws{};
  if (::ioctl(from, TIOCGWINSZ, &ws) == 0) {
    ::ioctl(master_.get(), TIOCSWINSZ, &ws);
  }
}

int PtyRelay::fill(pollfd* fds) {
  int n = 0;
  // Index layout is fixed: 0 stdin, 1 master, 2 stdout (fd -1 = ignored by poll).
  fds[0] = {(!in_closed_ && !held_ && to_master_.size() < kMaxBuffered) ? in_ : -1, POLLIN, 0};
  short mev = 0;
  if (!master_closed_ && to_out_.size() < kMaxBuffered) mev |= POLLIN;
  if (!master_closed_ && !to_master_.empty()) mev |= POLLOUT;
  fds[1] = {mev != 0 ? master_.get() : -1, mev, 0};
  fds[2] = {(!to_out_.empty() && !held_) ? out_ : -1, POLLOUT, 0};
  n = 3;
  return n;
}

void PtyRelay::handle(const pollfd* fds, int n) {
  if (n < 3) {
    return;
  }
  char buf[8192];
  if (fds[0].fd >= 0 && fds[0].revents != 0) {
    ssize_t k = ::read(in_, buf, sizeof buf);
    if (k > 0) {
      to_master_.append(buf, static_cast<size_t>(k));
    } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
      in_closed_ = true;  // the program keeps running; it just gets no more input
    }
  }
  if (fds[1].fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    ssize_t k = ::read(master_.get(), buf, sizeof buf);
    if (k > 0) {
      to_out_.append(buf, static_cast<size_t>(k));
    } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
      master_closed_ = true;  // EIO: every slave fd in the sandbox is closed
    }
  }
  if (fds[1].fd >= 0 && (fds[1].revents & POLLOUT) != 0 && !to_master_.empty()) {
    ssize_t k = ::write(master_.get(), to_master_.data(), to_master_.size());
    if (k > 0) {
      to_master_.erase(0, static_cast<size_t>(k));
    }
  }
  if (fds[2].fd >= 0 && fds[2].revents != 0) {
    ssize_t k = ::write(out_, to_out_.data(), to_out_.size());
    if (k > 0) {
      to_out_.erase(0, static_cast<size_t>(k));
    } else if (k < 0 && errno != EINTR && errno != EAGAIN) {
      to_out_.clear();  // our stdout is gone; keep draining the pty so the program never blocks
    }
  }
}

}  // namespace cordon::launcher
