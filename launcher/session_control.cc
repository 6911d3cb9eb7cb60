// The control socket, the forwarding of exec requests to the sandbox and of reports back.
#include "launcher/session_control.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "launcher/exec_wire.h"
#include "launcher/run_options.h"

namespace cordon::launcher {
namespace {

// A caller that connected but sends nothing must not hold the supervisor (and every other
// caller) for long: its request is due at once.
constexpr int kRequestWaitMs = 2000;

// SO_PEERPIDFD (Linux 6.5): a pidfd of the process that connected, taken at connect time.
constexpr int kSoPeerPidfd = 77;

// The process behind `pidfd` as a pid of our namespace, or 0 when it has exited (or the kernel
// does not say: /proc/self/fdinfo's "Pid:" line).
pid_t pid_of_pidfd(int pidfd) {
  std::ifstream f("/proc/self/fdinfo/" + std::to_string(pidfd));
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("Pid:", 0) == 0) {
      const long v = std::strtol(line.c_str() + 4, nullptr, 10);
      return v > 0 ? static_cast<pid_t>(v) : 0;
    }
  }
  return 0;
}

std::string pid_namespace_of(const std::string& proc_dir) {
  char buf[64] = {};
  const ssize_t n = ::readlink((proc_dir + "/ns/pid").c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Only the session's owner (or root), and only from cordon's own pid namespace. Every program of
// every sandbox runs in a pid namespace of its own (--detach refuses --no-namespaces), so this
// refuses them all, this session's and another's, however deep their process tree or however
// soon the caller exits; the session directory (0700) keeps other users out already, and this
// holds even where a policy shows that directory inside a sandbox. Anything that cannot be
// established is a refusal.
std::optional<std::string> refuse_peer(int conn, uid_t* uid) {
  ucred cr{};
  socklen_t len = sizeof cr;
  if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
    return "the caller's credentials cannot be read: " + std::string(std::strerror(errno));
  }
  *uid = cr.uid;
  if (cr.uid != ::geteuid() && cr.uid != 0) {
    return "uid " + std::to_string(cr.uid) + " does not own this session";
  }
  int raw = -1;
  len = sizeof raw;
  if (::getsockopt(conn, SOL_SOCKET, kSoPeerPidfd, &raw, &len) != 0) {
    // An older kernel: a pidfd of the pid the credentials name (checked alive below).
    raw = cr.pid > 0 ? static_cast<int>(::syscall(SYS_pidfd_open, cr.pid, 0)) : -1;
  }
  UniqueFd pidfd(raw);
  if (!pidfd) {
    return "the caller's process cannot be identified";
  }
  const pid_t pid = pid_of_pidfd(pidfd.get());
  if (pid <= 0) {
    return "the caller's process has ended or is not visible to the session's cordon";
  }
  const std::string mine = pid_namespace_of("/proc/self");
  const std::string theirs = pid_namespace_of("/proc/" + std::to_string(pid));
  // Alive after the read: the pid was still that process's, not a reused one's.
  if (mine.empty() || theirs.empty() ||
      ::syscall(SYS_pidfd_send_signal, pidfd.get(), 0, nullptr, 0) != 0) {
    return "the caller's process cannot be checked (it ended, or its /proc is not readable)";
  }
  if (theirs != mine) {
    return "a program inside a sandbox cannot control a session";
  }
  return std::nullopt;
}

void reply(int conn, ExecEvent ev, int32_t value, std::string_view text = {}) {
  (void)send_packet(conn, encode_report({0, ev, value, 0}, text));
}

nlohmann::json exit_fields(int st) {
  nlohmann::json f;
  if (WIFSIGNALED(st)) {
    f["signal"] = WTERMSIG(st);
    f["exit_code"] = 128 + WTERMSIG(st);
  } else {
    f["exit_code"] = WEXITSTATUS(st);
  }
  return f;
}

}  // namespace

Result<std::unique_ptr<SessionControl>> SessionControl::open(const SessionControlOptions& o,
                                                             const record::EventLog& events) {
  std::unique_ptr<SessionControl> c(new SessionControl(events));
  c->idle_timeout_ = o.idle_timeout;
  c->socket_path_ = o.session_dir + "/" + kExecSocketName;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (c->socket_path_.size() >= sizeof addr.sun_path) {
    return make_error("control socket " + c->socket_path_ + ": path longer than " +
                          std::to_string(sizeof addr.sun_path - 1) + " bytes",
                      "set CORDON_STATE_DIR to a shorter directory");
  }
  std::memcpy(addr.sun_path, c->socket_path_.c_str(), c->socket_path_.size());
  c->listen_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!c->listen_) {
    return sys_error("socket(AF_UNIX, SOCK_SEQPACKET) for the control socket");
  }
  // 0600 from the start: no instant in which another uid could connect.
  mode_t old = ::umask(0177);
  int b = ::bind(c->listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::umask(old);
  if (b != 0) {
    return sys_error("bind(" + c->socket_path_ + ")");
  }
  if (::listen(c->listen_.get(), 64) != 0) {
    return sys_error("listen(" + c->socket_path_ + ")");
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return sys_error("socketpair() for the exec server");
  }
  c->supervisor_end_.reset(sv[0]);
  c->sandbox_end_.reset(sv[1]);
  c->idle_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!c->idle_) {
    return sys_error("timerfd_create() for --idle-timeout");
  }
  c->callers_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!c->callers_) {
    return sys_error("epoll_create1() for cordon exec's callers");
  }
  if (!o.name.empty()) {
    UniqueFd nf(::open((o.session_dir + "/" + kSessionNameFile).c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    std::string line = o.name + "\n";
    if (!nf || ::write(nf.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return sys_error("writing the session's name");
    }
  }
  return c;
}

SessionControl::~SessionControl() {
  if (!socket_path_.empty() && listen_) {
    ::unlink(socket_path_.c_str());
  }
}

void SessionControl::started(pid_t init_pid) {
  init_pid_ = init_pid;
  sandbox_end_.reset();
  arm_idle();
}

void SessionControl::arm_idle() {
  itimerspec its{};
  if (pending_.empty() && idle_timeout_.count() > 0) {
    its.it_value.tv_sec = idle_timeout_.count() / 1000;
    its.it_value.tv_nsec = (idle_timeout_.count() % 1000) * 1000000;
  }
  ::timerfd_settime(idle_.get(), 0, &its, nullptr);  // all zero: disarmed while one runs
}

std::vector<SuperviseSpec::Watch> SessionControl::watches() {
  return {{listen_.get(), [this] { return on_connection(); }},
          {supervisor_end_.get(), [this] { return on_reports(); }},
          {idle_.get(), [this] { return on_idle(); }},
          {callers_.get(), [this] { return on_callers(); }}};
}

bool SessionControl::on_connection() {
  UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!conn) {
    return false;  // EAGAIN (another accept took it), or the caller already left
  }
  // The caller is judged before anything is read from it: a refused one holds nothing. What it
  // already sent is taken first, without waiting (a socket closed with a message still unread
  // resets the connection, and the caller would lose the reason).
  uid_t uid = 0;
  if (auto why = refuse_peer(conn.get(), &uid)) {
    (void)recv_packet(conn.get(), kMaxExecRequest, MSG_DONTWAIT);
    reply(conn.get(), ExecEvent::Failed, kExitCordonFailed, "refused: " + *why);
    (void)events_.emit("exec.refused", {{"uid", uid}, {"reason", *why}});
    return false;
  }
  timeval tv{kRequestWaitMs / 1000, 0};
  ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto p = recv_packet(conn.get(), kMaxExecRequest, 0);
  if (!p.ok() || p->eof) {
    return false;
  }
  auto req = decode_request(p->bytes);
  if (!req.ok()) {
    reply(conn.get(), ExecEvent::Failed, kExitCordonFailed, req.error().to_string());
    return false;
  }
  if (req->op == ControlOp::Stop) {
    reply(conn.get(), ExecEvent::Stopping, 0);
    stoppers_.push_back(std::move(conn));
    end_ = End::Stopped;
    (void)events_.emit("session.stop", {{"reason", "cordon stop"}, {"uid", uid}});
    return true;
  }
  if (p->fds.size() != 3) {
    reply(conn.get(), ExecEvent::Failed, kExitCordonFailed, "exec request without fds 0-2");
    return false;
  }
  if (::isatty(p->fds[0].get())) {
    // No pty yet: the terminal itself would be handed over, and a process the program leaves
    // behind could read what is typed at it after cordon exec has returned.
    const std::string why =
        "refused: standard input is a terminal, which cordon exec does not hand to the "
        "sandbox; give it a file or a pipe (e.g. </dev/null)";
    reply(conn.get(), ExecEvent::Failed, kExitCordonFailed, why);
    (void)events_.emit("exec.refused", {{"uid", uid}, {"reason", why}});
    return false;
  }
  uint64_t id = ++next_id_;
  std::string fwd(reinterpret_cast<const char*>(&id), sizeof id);
  fwd += p->bytes;
  int fds[3] = {p->fds[0].get(), p->fds[1].get(), p->fds[2].get()};
  if (auto s = send_packet(supervisor_end_.get(), fwd, fds, 3); !s.ok()) {
    reply(conn.get(), ExecEvent::Failed, kExitCordonFailed,
          "the session's exec server: " + s.error().to_string());
    return false;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = id;
  (void)::epoll_ctl(callers_.get(), EPOLL_CTL_ADD, conn.get(), &ev);
  pending_[id] = Pending{std::move(conn), uid, req->argv};
  arm_idle();
  return false;
}

bool SessionControl::on_reports() {
  for (int i = 0; i < 256; ++i) {
    auto p = recv_packet(supervisor_end_.get(), 4096, MSG_DONTWAIT);
    if (!p.ok() || p->eof) {
      return false;  // EAGAIN: all read; the end: init is gone, which supervise sees itself
    }
    auto r = decode_report(p->bytes);
    if (!r.ok()) {
      continue;
    }
    const ExecReport& rep = r->first;
    auto it = pending_.find(rep.id);
    if (it == pending_.end()) {
      continue;
    }
    if (rep.event == ExecEvent::Started) {
      const Pending& pe = it->second;
      (void)events_.emit(
          "exec.start",
          {{"exec_id", rep.id}, {"argv", pe.argv}, {"pid", rep.pid}, {"uid", pe.uid}});
      continue;
    }
    nlohmann::json f = rep.event == ExecEvent::Exited
                           ? exit_fields(rep.value)
                           : nlohmann::json{{"exit_code", rep.value}, {"error", r->second}};
    f["exec_id"] = rep.id;
    if (rep.event == ExecEvent::Exited) {
      f["pid"] = rep.pid;
    } else {
      f["argv"] = it->second.argv;
    }
    (void)events_.emit("exec.end", std::move(f));
    if (it->second.conn) {
      reply(it->second.conn.get(), rep.event, rep.value, r->second);
    }
    pending_.erase(it);
    arm_idle();
  }
  return false;
}

void SessionControl::signal_program(uint64_t id, int sig) {
  ExecRequest k;
  k.op = ControlOp::Signal;
  k.signal = sig;
  std::string fwd(reinterpret_cast<const char*>(&id), sizeof id);
  fwd += encode_request(k);
  (void)send_packet(supervisor_end_.get(), fwd);
}

bool SessionControl::on_callers() {
  epoll_event evs[16];
  int n = ::epoll_wait(callers_.get(), evs, 16, 0);
  for (int i = 0; i < n; ++i) {
    uint64_t id = evs[i].data.u64;
    auto it = pending_.find(id);
    if (it == pending_.end() || !it->second.conn) {
      continue;
    }
    int fd = it->second.conn.get();
    auto p = recv_packet(fd, 256, MSG_DONTWAIT);
    if (p.ok() && !p->eof) {
      auto req = decode_request(p->bytes);
      if (req.ok() && req->op == ControlOp::Signal) {
        signal_program(id, req->signal);
      }
      continue;
    }
    if (!p.ok() && p.error().code == EAGAIN) {
      continue;
    }
    // The caller is gone (killed, or its harness gave up): nobody waits for the program, which
    // must not go on in the session unseen. Its end is still recorded when the server reports it.
    signal_program(id, SIGKILL);
    (void)::epoll_ctl(callers_.get(), EPOLL_CTL_DEL, fd, nullptr);
    it->second.conn.reset();
  }
  return false;
}

bool SessionControl::on_idle() {
  uint64_t ticks;
  (void)!::read(idle_.get(), &ticks, sizeof ticks);
  if (!pending_.empty() || end_ != End::None) {
    return false;
  }
  end_ = End::Idle;
  (void)events_.emit("session.stop",
                     {{"reason", "idle timeout"}, {"idle_ms", idle_timeout_.count()}});
  return true;
}

}  // namespace cordon::launcher
