// The asker: the proxy's questions put to the person at cordon's terminal, one at a time.
#include "launcher/sidecars/asker.h"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "launcher/commands/policy_patch.h"
#include "netproxy/client_process.h"
#include "netproxy/decider_wire.h"

namespace cordon::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using netproxy::DeciderQuestion;
using netproxy::DeciderReply;

// Fixed fds in the asker once everything else of cordon's is closed.
constexpr int kChannelFd = 3, kTtyFd = 4, kHoldFd = 5, kSignalFd = 6;

struct Queued {
  DeciderQuestion q;
  Clock::time_point asked;
};

enum class Answer { Once, Session, Always, Deny, DenyAlways, None };

// What the program gave is shown on the person's terminal: no byte of it may be a control
// character (an escape sequence could redraw the prompt).
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s.substr(0, 253)) {
    out.push_back(c < 0x20 || c >= 0x7f ? '?' : static_cast<char>(c));
  }
  return out;
}

std::string key_of(const DeciderQuestion& q) {
  return q.kind + " " + q.host + " " + std::to_string(q.port);
}

std::string target(const DeciderQuestion& q) {
  std::string host = q.host.find(':') != std::string::npos ? "[" + q.host + "]" : q.host;
  return q.kind == "dns" ? host : host + ":" + std::to_string(q.port);
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string user_name() {
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  return "uid " + std::to_string(::getuid());
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  for (int tries = 0; off < s.size() && tries < 64; ++tries) {
    ssize_t k = ::write(fd, s.data() + off, s.size() - off);
    if (k > 0) {
      off += static_cast<size_t>(k);
    } else if (k < 0 && errno != EINTR && errno != EAGAIN) {
      return;
    }
  }
}

// The terminal may be in raw mode (cordon's pty relay) or cooked: "\r\n" is right in both.
void say_tty(const std::string& s) { write_all(kTtyFd, s + "\r\n"); }

// Written before a question: whatever the program left the terminal in cannot hide or move it.
// CAN aborts an escape sequence or string (OSC, DCS) left open, which would swallow the question
// into a window title; ST ends one that ignores CAN; DECSTR resets margins (a scroll region could
// keep the question's first line off screen under a fake one), origin and insert modes and the
// character sets; SGR 0 undoes concealed text and colours; SI and `ESC ( B` select ASCII. DECSTR
// may turn line wrapping off (as a VT510 does): `CSI ? 7 h` turns it back on, so no part of a
// long line is cut at the screen's edge, then or after the session.
constexpr const char* kSaneTerminal = "\x18\x1b\\\x1b[!p\x1b[?7h\x1b[0m\x0f\x1b(B";

// "pid N, EXE: ARGV", each part printable and bounded.
std::string describe(const netproxy::SandboxProcess& p) {
  std::string cmd;
  for (const auto& a : p.argv) {
    cmd += (cmd.empty() ? "" : " ") + a;
  }
  return "pid " + std::to_string(p.pid) + (p.exe.empty() ? "" : ", " + printable(p.exe)) + ": " +
         printable(cmd.substr(0, 200));
}

class AskLoop {
 public:
  AskLoop(const AskOptions& o, std::string user) : opts_(o), user_(std::move(user)) {}

  void run() {
    while (!channel_closed_) {
      if (closing_ && !acked_) {
        ack_closing();
        acked_ = true;
      }
      if (queue_.empty()) {
        if (!wait_for_questions(-1)) {
          return;
        }
        continue;
      }
      Queued next = std::move(queue_.front());
      queue_.pop_front();
      if (closing_) {
        reply(next.q, false, false);  // the session is ending: no one is asked any more
        continue;
      }
      if (auto it = remembered_.find(key_of(next.q)); it != remembered_.end()) {
        reply(next.q, it->second, true);  // covered by a session or always answer given since
        continue;
      }
      const auto deadline = next.asked + opts_.timeout;
      if (Clock::now() >= deadline) {
        // Waited in the queue past its time: the proxy has denied it already.
        say_tty("cordon: " + printable(target(next.q)) + ": no answer in time, denied");
        continue;
      }
      decide(next.q, deadline);
    }
  }

 private:
  // "pid N, EXE: ARGV" for the process whose connection is `client`, as the preload shim reported
  // it (the program could lie to its shim; the record's net.attribution is the same claim).
  // Waits a little for the shim's event, which is written as the connection is made.
  std::string process_of(const std::string& client) {
    if (client.empty() || opts_.events_path.empty()) {
      return {};
    }
    for (int i = 0; i < 6; ++i) {
      scan_events();
      if (auto it = procs_.find(client); it != procs_.end()) {
        return it->second;
      }
      ::usleep(50 * 1000);
    }
    return {};
  }

  // The process behind `q` from /proc, as cordon's user (root, or the owner of the sandbox's user
  // namespace), within the same 20 ms the proxy gives it.
  std::vector<netproxy::SandboxProcess> look_up_process(const DeciderQuestion& q) {
    if (sandbox_init_ == 0) {
      sandbox_init_ = netproxy::find_sandbox_init(::getppid());
    }
    const std::chrono::microseconds budget(20000);
    auto chain = netproxy::find_client_process(sandbox_init_, q.client, q.kind == "dns", budget);
    if (chain.empty() && q.kind == "dns") {
      chain = netproxy::find_client_process(sandbox_init_, q.client, false, budget / 2);
    }
    return chain;
  }

  // Reads what the proxy wrote, queueing each question; waits up to `timeout_ms` (-1: forever)
  // for something to happen. False once the channel is gone or the asker must stop.
  bool wait_for_questions(int timeout_ms) {
    pollfd fds[3] = {{kChannelFd, POLLIN, 0}, {kSignalFd, POLLIN, 0}, {kHoldFd, POLLIN, 0}};
    int r = ::poll(fds, hold_gone_ ? 2 : 3, timeout_ms);
    if (r < 0) {
      return errno == EINTR;
    }
    if (fds[1].revents != 0) {
      stop_ = true;
      channel_closed_ = true;
      return false;
    }
    if (!hold_gone_ && fds[2].revents != 0) {
      read_hold();
    }
    if (fds[0].revents != 0) {
      read_channel();
    }
    return !channel_closed_;
  }

  void read_channel() {
    char buf[8192];
    ssize_t k = ::read(kChannelFd, buf, sizeof buf);
    if (k <= 0) {
      if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
        channel_closed_ = true;
      }
      return;
    }
    in_.append(buf, static_cast<size_t>(k));
    for (size_t nl; (nl = in_.find('\n')) != std::string::npos;) {
      std::string line = in_.substr(0, nl);
      in_.erase(0, nl + 1);
      if (auto q = netproxy::parse_decider_question(line); q.ok()) {
        queue_.push_back({std::move(*q), Clock::now()});
      } else {
        say_tty("cordon: --ask: " + printable(q.error().message));
      }
    }
    if (in_.size() > netproxy::kMaxDeciderLine) {
      channel_closed_ = true;  // the proxy never writes such a line: stop listening to it
    }
  }

  // Cordon writes 'q' on the hold channel when the program has ended (and again before it puts
  // the terminal back): from then on nothing is asked (what comes is denied), and the 'k' written
  // back to each says the terminal is the asker's no more.
  void read_hold() {
    char buf[16];
    ssize_t k = ::read(kHoldFd, buf, sizeof buf);
    if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) {
      hold_gone_ = true;
      closing_ = true;
      return;
    }
    if (k > 0 && std::memchr(buf, 'q', static_cast<size_t>(k)) != nullptr) {
      closing_ = true;
      acked_ = false;
    }
  }

  void ack_closing() {
    if (!hold_gone_) {
      write_all(kHoldFd, "k");
    }
  }

  // Stops the terminal relay from reading the terminal and from writing the program's output to
  // it, and waits (bounded) until it has: from then on only the question is on the screen.
  void hold_terminal(bool held) {
    write_all(kHoldFd, held ? "h" : "r");
    if (!held) {
      return;
    }
    pollfd p{kHoldFd, POLLIN, 0};
    if (::poll(&p, 1, 1000) > 0) {
      read_hold();  // the 'k' back, or cordon's 'q'
    }
  }

  void decide(const DeciderQuestion& q, Clock::time_point deadline) {
    hold_terminal(true);
    termios saved{};
    const bool have_mode = ::tcgetattr(kTtyFd, &saved) == 0;
    if (have_mode) {
      termios t = saved;
      t.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      t.c_cc[VMIN] = 1;
      t.c_cc[VTIME] = 0;
      ::tcsetattr(kTtyFd, TCSANOW, &t);
      ::tcflush(kTtyFd, TCIFLUSH);  // keys typed before the question are not an answer to it
    }
    const auto secs =
        std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count();
    std::string what =
        q.kind == "dns" ? "look up " + printable(q.host) : "connect to " + printable(target(q));
    std::string how = q.kind == "dns" ? "DNS" : printable(q.mode);
    if (!q.sni.empty()) {
      how += ", SNI " + printable(q.sni);
    }
    if (!q.client.empty()) {
      how += ", from " + printable(q.client);
    }
    write_all(kTtyFd, kSaneTerminal);
    say_tty("");
    say_tty("cordon: the sandbox asks to " + what + " (" + how + "): not in network.allow");
    if (!q.method.empty()) {
      say_tty("  request " + printable(q.method) + " " + printable(q.path.substr(0, 200)));
    }
    std::vector<netproxy::SandboxProcess> chain = q.process;
    if (chain.empty() && !q.client.empty()) {
      chain = look_up_process(q);  // the proxy could not read it: cordon's user may
    }
    if (!chain.empty()) {
      say_tty("  by " + describe(chain.front()));
      for (size_t i = 1; i < chain.size(); ++i) {
        say_tty("  under " + describe(chain[i]));
      }
    } else if (std::string proc = process_of(q.client); !proc.empty()) {
      say_tty("  by " + printable(proc) + " (as its preload shim reports)");
    }
    say_tty(std::string("  o allow once, s allow for the rest of this run, a always (") +
            (opts_.policy_file.empty() ? "no --policy file: for this run"
                                       : "add to " + printable(opts_.policy_file)) +
            "), d deny, D deny always; " + std::to_string(std::max<long>(secs, 1)) +
            " s, then denied");
    Answer a = read_answer(deadline);
    if (have_mode) {
      ::tcsetattr(kTtyFd, TCSANOW, &saved);
    }
    apply(q, a);
    // Only now may the program's output reach the screen again: the question and what became of
    // it stay as written.
    hold_terminal(false);
  }

  Answer read_answer(Clock::time_point deadline) {
    for (int rounds = 0; rounds < 100000 && !stop_; ++rounds) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        return Answer::None;
      }
      pollfd fds[4] = {{kTtyFd, POLLIN, 0},
                       {kChannelFd, POLLIN, 0},
                       {kSignalFd, POLLIN, 0},
                       {kHoldFd, POLLIN, 0}};
      int r = ::poll(fds, 4, static_cast<int>(std::min<long>(left.count(), 1000)));
      if (r < 0 && errno != EINTR) {
        return Answer::None;
      }
      if (r <= 0) {
        continue;
      }
      if (fds[2].revents != 0) {
        stop_ = true;
        channel_closed_ = true;
        return Answer::None;
      }
      if (fds[3].revents != 0) {
        read_hold();
        if (closing_) {
          return Answer::None;
        }
      }
      if (fds[1].revents != 0 && !channel_closed_) {
        read_channel();  // more questions queue behind this one
      }
      if (fds[0].revents != 0) {
        char c = 0;
        ssize_t k = ::read(kTtyFd, &c, 1);
        if (k <= 0) {
          return Answer::None;  // the terminal went away: nobody can answer
        }
        switch (c) {
          case 'o':
            return Answer::Once;
          case 's':
            return Answer::Session;
          case 'a':
            return Answer::Always;
          case 'd':
            return Answer::Deny;
          case 'D':
            return Answer::DenyAlways;
          default:
            break;  // not an answer: keep waiting
        }
      }
    }
    return Answer::None;
  }

  // "always" and "deny always": one entry in the policy file. False (having said why) when it
  // was not written; the answer then holds for this session.
  bool append_to_policy(const DeciderQuestion& q, bool allow) {
    if (opts_.policy_file.empty()) {
      say_tty("cordon: no --policy file to add " + printable(target(q)) +
              " to: for this session only");
      return false;
    }
    if (allow && q.kind == "dns") {
      // A lookup has no port, and the name alone would allow every port: the connection that
      // follows is asked about with its port, and "always" there adds NAME:PORT.
      say_tty("cordon: a lookup has no port: " + printable(q.host) +
              " allowed for this session; answer \"always\" to the connection to add it");
      return false;
    }
    PolicyAddition add;
    add.field = allow ? "network.allow" : "network.deny";
    add.entry = q.kind == "dns" ? q.host : target(q);
    add.comment = "cordon run --ask, session " + opts_.session_id + ", " + utc_now() + ": " +
                  (allow ? "allowed" : "denied") + " by " + user_ + " at the terminal, asked by " +
                  (q.client.empty() ? std::string("the sandbox") : q.client) + " (" + q.kind +
                  (q.mode.empty() ? "" : ", " + q.mode) + ")";
    if (auto s = add_to_policy_file(opts_.policy_file, {add}); !s.ok()) {
      say_tty("cordon: " + printable(s.error().to_string()) + "; for this session only");
      return false;
    }
    say_tty("cordon: added " + printable(add.entry) + " to " + add.field + " in " +
            printable(opts_.policy_file));
    return true;
  }

  void apply(const DeciderQuestion& q, Answer a) {
    switch (a) {
      case Answer::Once:
        say_tty("cordon: " + printable(target(q)) + " allowed once");
        reply(q, true, false);
        return;
      case Answer::Always:
        append_to_policy(q, true);
        [[fallthrough]];
      case Answer::Session:
        say_tty("cordon: " + printable(target(q)) + " allowed for this session");
        remembered_[key_of(q)] = true;
        reply(q, true, true);
        return;
      case Answer::DenyAlways:
        append_to_policy(q, false);
        say_tty("cordon: " + printable(target(q)) + " denied for this session");
        remembered_[key_of(q)] = false;
        reply(q, false, true);
        return;
      case Answer::Deny:
        say_tty("cordon: " + printable(target(q)) + " denied");
        reply(q, false, false);
        return;
      case Answer::None:
        if (closing_) {
          say_tty("cordon: " + printable(target(q)) + ": the program has ended, denied");
          reply(q, false, false);
        } else {
          // No reply: the proxy's own timer, which started first, denies it (decided_by timeout).
          say_tty("cordon: " + printable(target(q)) + ": no answer in time, denied");
        }
        return;
    }
  }

  void reply(const DeciderQuestion& q, bool allow, bool session) {
    DeciderReply r;
    r.id = q.id;
    r.allow = allow;
    r.session = session;
    if (!allow) {
      r.reason = "denied at cordon's terminal";
    }
    write_all(kChannelFd, netproxy::reply_line(r));
  }

  // Reads what was added to the events file since the last scan (bounded), keeping the shim's
  // net.connect events by their local address.
  void scan_events() {
    UniqueFd fd(::open(opts_.events_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      return;
    }
    char buf[65536];
    for (int chunks = 0; chunks < 256; ++chunks) {
      ssize_t k = ::pread(fd.get(), buf, sizeof buf, static_cast<off_t>(events_off_));
      if (k <= 0) {
        return;
      }
      events_off_ += static_cast<size_t>(k);
      events_tail_.append(buf, static_cast<size_t>(k));
      for (size_t nl; (nl = events_tail_.find('\n')) != std::string::npos;) {
        std::string_view line(events_tail_.data(), nl);
        if (line.find("\"net.connect\"") != std::string_view::npos &&
            line.find("\"shim\"") != std::string_view::npos) {
          remember_process(line);
        }
        events_tail_.erase(0, nl + 1);
      }
      if (events_tail_.size() > netproxy::kMaxDeciderLine * 4) {
        events_tail_.clear();  // a line that long is no shim event
      }
    }
  }

  void remember_process(std::string_view line) {
    auto ev = nlohmann::json::parse(line, nullptr, false);
    if (!ev.is_object() || ev.value("kind", "") != "net.connect" ||
        ev.value("source", "") != "shim" || !ev.contains("local") || !ev["local"].is_string()) {
      return;
    }
    std::string desc;
    if (auto pid = ev.find("pid"); pid != ev.end() && pid->is_number_integer()) {
      desc = "pid " + std::to_string(pid->get<long long>());
    }
    if (auto exe = ev.find("exe"); exe != ev.end() && exe->is_string()) {
      desc += (desc.empty() ? "" : ", ") + exe->get<std::string>();
    }
    if (auto argv = ev.find("argv"); argv != ev.end() && argv->is_array()) {
      std::string cmd;
      for (const auto& a : *argv) {
        if (a.is_string()) {
          cmd += (cmd.empty() ? "" : " ") + a.get<std::string>();
        }
      }
      desc += ": " + cmd.substr(0, 200);
    }
    if (procs_.size() >= 4096) {
      procs_.clear();  // bounded: the ones still asked about are the newest
    }
    procs_[ev["local"].get<std::string>()] = desc;
  }

  const AskOptions& opts_;
  const std::string user_;
  std::string in_;
  std::deque<Queued> queue_;
  std::map<std::string, bool> remembered_;
  std::map<std::string, std::string> procs_;  // a connection's local address -> its process
  size_t events_off_ = 0;
  std::string events_tail_;  // key_of() -> allowed, for session/always answers
  bool channel_closed_ = false, stop_ = false, closing_ = false, acked_ = false;
  bool hold_gone_ = false;  // cordon's end of the hold channel is closed
  pid_t sandbox_init_ = 0;  // found at the first question (the sandbox starts after the asker)
};

[[noreturn]] void asker_main(const AskOptions& opts, std::string user) {
  AskLoop loop(opts, std::move(user));
  loop.run();
  ::_exit(0);
}

// Moves `fds` to the fixed numbers 3.. and closes every other fd of cordon's.
bool settle_fds(std::initializer_list<int> fds) {
  std::vector<int> high;
  for (int fd : fds) {
    int h = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
    if (h < 0) {
      return false;
    }
    high.push_back(h);
  }
  ::close_range(3, 99, 0);
  int to = 3;
  for (int h : high) {
    if (::dup2(h, to++) < 0) {
      return false;
    }
  }
  ::close_range(static_cast<unsigned>(to), ~0U, 0);
  return true;
}

}  // namespace

Result<UniqueFd> open_controlling_terminal() {
  UniqueFd tty(::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!tty) {
    return sys_error("--ask: cordon has no controlling terminal to ask on (open(\"/dev/tty\"))",
                     "run it from a terminal, or answer with a program: --decider CMD");
  }
  return tty;
}

Result<Asker> start_asker(UniqueFd tty, const AskOptions& opts) {
  int sv[2], hv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return sys_error("socketpair() for --ask");
  }
  UniqueFd proxy_end(sv[0]), ours(sv[1]);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, hv) != 0) {
    return sys_error("socketpair() for --ask's input hold");
  }
  UniqueFd hold(hv[0]), hold_theirs(hv[1]);
  sigset_t stop_on;
  sigemptyset(&stop_on);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) {
    sigaddset(&stop_on, s);
  }
  // Looked up before the fork: cordon has threads by now, and the child of a threaded process
  // should not take locks (NSS's) another thread might have held at the fork.
  std::string user = user_name();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    return sys_error("fork() for --ask");
  }
  if (pid == 0) {
    // SIGTERM (session end, cordon's death) ends the loop between reads, with the terminal's
    // mode restored; ^C at the terminal is the program's, not the asker's.
    ::sigprocmask(SIG_BLOCK, &stop_on, nullptr);
    // A proxy or a cordon that is gone is an end of file or an error to the asker, not a signal.
    ::signal(SIGPIPE, SIG_IGN);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) {
      ::_exit(0);
    }
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    UniqueFd sfd(::signalfd(-1, &term, SFD_CLOEXEC));
    if (!sfd || !settle_fds({ours.get(), tty.get(), hold_theirs.get(), sfd.get()})) {
      ::_exit(125);
    }
    asker_main(opts, std::move(user));
  }
  Asker out;
  out.channel.proxy_end = std::move(proxy_end);
  out.channel.child.emplace(pid);
  out.hold = std::move(hold);
  return out;
}

}  // namespace cordon::launcher
