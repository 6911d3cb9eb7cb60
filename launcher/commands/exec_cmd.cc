// `cordon exec` and `cordon stop`: the callers of a detached session's control socket.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/exec_wire.h"
#include "launcher/session/detached.h"
#include "launcher/session/session.h"
#include "launcher/session/session_store.h"

namespace cordon::launcher {
namespace {

// `cordon stop` returns once the record is complete: the supervisor closes the connection as it
// exits, then its lock on the session directory goes with its last fd.
constexpr auto kStopWait = std::chrono::seconds(60);

Result<UniqueFd> connect_to(const DetachedSession& s) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (s.socket.size() >= sizeof addr.sun_path) {
    return make_error("control socket " + s.socket + ": path too long");
  }
  std::memcpy(addr.sun_path, s.socket.c_str(), s.socket.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) {
    return sys_error("socket(AF_UNIX, SOCK_SEQPACKET)");
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int e = errno;
    if (e == ENOENT || e == ECONNREFUSED) {
      return make_error("session " + s.id +
                        " is not running: it has ended, or was not started with `cordon run "
                        "--detach`");
    }
    if (e == EACCES || e == EPERM) {
      return make_error("session " + s.id +
                        ": permission denied (a session belongs to the user "
                        "who started it)");
    }
    errno = e;
    return sys_error("connect(" + s.socket + ")");
  }
  return fd;
}

Result<UniqueFd> connect_session(const std::string& text) {
  ASSIGN_OR_RETURN(DetachedSession s, find_detached(sessions_root(), text));
  return connect_to(s);
}

// The caller's fd N, or /dev/null where it is closed (the program must not get another fd as N).
UniqueFd stdio_or_null(int n, int* out) {
  if (::fcntl(n, F_GETFD) >= 0) {
    *out = n;
    return UniqueFd();
  }
  UniqueFd null(::open("/dev/null", (n == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC));
  *out = null.get();
  return null;
}

// The signals `cordon exec` passes to its program, as `cordon run` does (SIGKILL cannot be
// caught: the closed connection then has the program killed).
constexpr int kPassed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

UniqueFd passed_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kPassed) {
    sigaddset(&set, sig);
  }
  sigaddset(&set, SIGPIPE);  // a closed connection is an EPIPE to handle, not our death
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  sigdelset(&set, SIGPIPE);
  return UniqueFd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
}

// The reply to our request; each signal that arrives meanwhile goes to the program.
Result<Packet> wait_for_reply(int conn, int sfd) {
  for (;;) {
    pollfd p[2] = {{conn, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(p, sfd >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) {
        continue;
      }
      return sys_error("poll()");
    }
    if (p[0].revents != 0) {
      return recv_packet(conn, 64 * 1024, 0);
    }
    signalfd_siginfo si{};
    while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      ExecRequest k;
      k.op = ControlOp::Signal;
      k.signal = static_cast<int>(si.ssi_signo);
      (void)send_packet(conn, encode_request(k));
    }
  }
}

int shell_status(int st) {
  if (WIFEXITED(st)) {
    return WEXITSTATUS(st);
  }
  if (WIFSIGNALED(st)) {
    return 128 + WTERMSIG(st);
  }
  return kExitCordonFailed;
}

}  // namespace

int exec_command(const ExecOptions& opts) {
  for (const auto& kv : opts.env) {
    if (kv.find('=') == std::string::npos || kv[0] == '=' || kv.find('\0') != std::string::npos) {
      return fail_in("exec", "--env " + kv + ": not NAME=VALUE");
    }
  }
  ExecRequest req;
  req.argv = opts.argv;
  req.env = opts.env;
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) != nullptr) {
    req.cwd = cwd;
  }
  std::string bytes = encode_request(req);
  if (bytes.size() > kMaxExecRequest) {
    return fail_in("exec", "the command, --env and directory take " + std::to_string(bytes.size()) +
                               " bytes; at most " + std::to_string(kMaxExecRequest) +
                               " go to a session");
  }
  auto conn = connect_session(opts.session);
  if (!conn.ok()) {
    return fail_in("exec", conn.error().to_string());
  }
  // Blocked before the request goes: a ^C or a harness's SIGTERM from here on reaches the program.
  UniqueFd signals = passed_signals();
  int fds[3];
  UniqueFd nulls[3];
  for (int i = 0; i < 3; ++i) {
    nulls[i] = stdio_or_null(i, &fds[i]);
  }
  if (auto s = send_packet(conn->get(), bytes, fds, 3); !s.ok() && s.error().code != EPIPE) {
    return fail_in("exec", "sending the request: " + s.error().to_string());
  }  // EPIPE: the session refused us at once; its reason is waiting to be read
  for (auto& n : nulls) {
    n.reset();
  }
  auto p = wait_for_reply(conn->get(), signals.get());
  if (!p.ok()) {
    return fail_in("exec", "reading the session's reply: " + p.error().to_string());
  }
  if (p->eof) {
    return fail_in("exec", "the session ended before " + opts.argv[0] + " did");
  }
  auto r = decode_report(p->bytes);
  if (!r.ok()) {
    return fail_in("exec", r.error().to_string());
  }
  const auto& [rep, text] = *r;
  if (rep.event == ExecEvent::Exited) {
    return shell_status(rep.value);
  }
  if (!text.empty()) {
    say_in("exec", text);
  }
  return rep.value != 0 ? rep.value : kExitCordonFailed;
}

int stop_command(const std::string& session) {
  auto s = find_detached(sessions_root(), session);
  if (!s.ok()) {
    return fail_in("stop", s.error().to_string());
  }
  auto conn = connect_to(*s);
  if (!conn.ok()) {
    return fail_in("stop", conn.error().to_string());
  }
  ExecRequest req;
  req.op = ControlOp::Stop;
  if (auto st = send_packet(conn->get(), encode_request(req)); !st.ok()) {
    return fail_in("stop", "sending the request: " + st.error().to_string());
  }
  const auto until = std::chrono::steady_clock::now() + kStopWait;
  auto left_ms = [&until] {
    auto d = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    return static_cast<int>(std::max<int64_t>(d.count(), 0));
  };
  for (int i = 0; i < 16; ++i) {  // the reply, then the end
    pollfd pfd{conn->get(), POLLIN, 0};
    if (::poll(&pfd, 1, left_ms()) <= 0) {
      return fail_in("stop", "session " + s->id + " did not end within 60 s");
    }
    auto p = recv_packet(conn->get(), 64 * 1024, 0);
    if (!p.ok()) {
      return fail_in("stop", p.error().to_string());
    }
    if (p->eof) {
      break;
    }
    auto r = decode_report(p->bytes);
    if (r.ok() && r->first.event == ExecEvent::Failed) {
      return fail_in("stop", r->second);
    }
  }
  // The connection closes as the supervisor lets its state go; its lock on the session directory
  // goes a moment later, with its last fd. Waiting for it keeps an immediate `cordon commit` from
  // taking the session for a running one.
  auto root = store::open_root(sessions_root());
  if (root.ok()) {
    auto dir = store::open_session_dir(root->get(), s->id);
    while (dir.ok() && left_ms() > 0) {
      if (store::try_lock_session(dir->get())) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return 0;
}

}  // namespace cordon::launcher
