// The parent's poll loop: report channel, signalfd, pidfd, timerfd and the pty relay.
#include "launcher/supervise.h"

#include <poll.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "launcher/channel.h"
#include "launcher/diagnostics.h"
#include "launcher/sandbox/init.h"
#include "launcher/sandbox/pty.h"

namespace cordon::launcher {
namespace {

// After init exits every process of the sandbox is gone, so the pty hangs up at once; this only
// bounds the drain if something unforeseen keeps it open.
constexpr int kDrainMs = 2000;

void arm(int tfd, policy::Millis d) {
  itimerspec its{};
  auto ms = std::max<int64_t>(d.count(), 1);
  its.it_value.tv_sec = ms / 1000;
  its.it_value.tv_nsec = (ms % 1000) * 1000000;
  ::timerfd_settime(tfd, 0, &its, nullptr);
}

int pidfd_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace

sigset_t supervised_signals() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : kForwardedSignals) {
    sigaddset(&s, sig);
  }
  // Blocked, never read: a closed stdout shows up as EPIPE from write() instead of killing cordon
  // before it restored the terminal and wrote the session record.
  sigaddset(&s, SIGPIPE);
  return s;
}

Outcome supervise(const SuperviseSpec& spec) {
  Outcome out;
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : kForwardedSignals) {
    sigaddset(&handled, sig);
  }
  UniqueFd sfd(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  // The timeout's and a SIGTERM's clock: the first expiry (timeout) or the end of kill_grace.
  UniqueFd tfd(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (tfd && spec.timeout.count() > 0) {
    arm(tfd.get(), spec.timeout);
  }
  std::optional<PtyRelay> relay;
  int hold_fd = spec.input_hold;
  bool held = false;
  UniqueFd listener;  // the program's seccomp listener for user namespaces, once it arrives
  RawTerminal raw;
  bool init_exited = false, channel_eof = false, killed = false;
  bool in_grace = false;  // SIGTERM was sent (timeout or cordon's own SIGTERM), SIGKILL is next
  auto kill_sandbox = [&] {
    killed = true;
    pidfd_signal(spec.pidfd, SIGKILL);  // init: the kernel then kills the whole pid namespace
    if (spec.limits != nullptr) {
      spec.limits->kill_all();
    }
  };
  const size_t nwatch = std::min(spec.watches.size(), SuperviseSpec::kMaxWatches);
  std::vector<int> watch_fds;
  for (size_t i = 0; i < nwatch; ++i) {
    watch_fds.push_back(spec.watches[i].fd);
  }

  for (;;) {
    if (init_exited && channel_eof && (!relay || relay->done())) {
      break;
    }
    pollfd fds[10 + SuperviseSpec::kMaxWatches];
    int n = 0;
    fds[n++] = {channel_eof ? -1 : spec.channel, POLLIN, 0};  // 0
    fds[n++] = {sfd.get(), POLLIN, 0};                        // 1
    fds[n++] = {init_exited ? -1 : spec.pidfd, POLLIN, 0};    // 2
    fds[n++] = {tfd.get(), POLLIN, 0};                        // 3
    fds[n++] = {listener.get(), POLLIN, 0};                   // 4
    fds[n++] = {hold_fd, POLLIN, 0};                          // 5
    const int watches_at = n;
    for (size_t i = 0; i < nwatch; ++i) {
      fds[n++] = {watch_fds[i], POLLIN, 0};
    }
    int relay_at = n;
    if (relay) {
      n += relay->fill(&fds[n]);
    }
    int r = ::poll(fds, static_cast<nfds_t>(n), init_exited ? kDrainMs : -1);
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      say(std::string("poll: ") + std::strerror(errno));
      break;
    }
    if (r == 0) {
      break;  // drain bound reached after init's exit
    }
    if (fds[0].fd >= 0 && fds[0].revents != 0) {
      auto m = recv_msg(spec.channel);
      if (!m.ok() || !m->has_value()) {
        channel_eof = true;
      } else {
        Msg& msg = **m;
        switch (msg.kind) {
          case MsgKind::SetupError:
            out.setup_error = msg.text;
            break;
          case MsgKind::ExecError:
            out.exec_errno = msg.value;
            break;
          case MsgKind::ProgramExit:
            out.program_status = msg.value;
            break;
          case MsgKind::NetSockets:  // taken by run.cc before supervising; a late copy is dropped
          case MsgKind::Decoys:
            break;
          case MsgKind::UsernsListener:
            if (msg.fd && !listener) {
              listener = std::move(msg.fd);
            }
            break;
          case MsgKind::PtyMaster:
            if (msg.fd && !relay) {
              std::string typed_ahead;
              auto t = RawTerminal::enter(0, typed_ahead);
              if (t.ok()) {
                raw = std::move(*t);
              }
              relay.emplace(0, 1, std::move(msg.fd), std::move(typed_ahead));
              relay->hold(held);
              relay->copy_window_size(0);
            }
            break;
        }
      }
    }
    if (fds[1].revents != 0) {
      signalfd_siginfo si{};
      while (::read(sfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        int sig = static_cast<int>(si.ssi_signo);
        if (sig == SIGWINCH && relay) {
          relay->copy_window_size(0);  // the kernel signals the pty's foreground group itself
        } else if (init_exited || killed) {
          continue;
        } else if (sig == SIGTERM && in_grace) {
          // Asked again while the program had its grace: whoever sends it wants the end now.
          out.term_killed = !out.timed_out;
          kill_sandbox();
        } else {
          pidfd_signal(spec.pidfd, sig);  // init forwards it to the program
          if (sig == SIGTERM) {
            in_grace = true;
            if (tfd) {
              arm(tfd.get(), spec.kill_grace);
            }
          }
        }
      }
    }
    if (fds[2].fd >= 0 && fds[2].revents != 0) {
      int st = 0;
      if (::waitpid(spec.init_pid, &st, 0) == spec.init_pid) {
        out.init_status = st;
        init_exited = true;
        if (hold_fd >= 0) {
          // Nothing is left to ask for: the asker withdraws an open question and lets go of the
          // terminal ('r'), so that the program's held output is written out in the drain.
          (void)!::write(hold_fd, "q", 1);
        }
      }
    }
    if (tfd && fds[3].revents != 0) {
      uint64_t ticks;
      (void)!::read(tfd.get(), &ticks, sizeof ticks);
      if (!init_exited && !in_grace) {
        // The timeout. Phase 1: SIGTERM to every process of the sandbox, through init.
        out.timed_out = true;
        in_grace = true;
        sigval v{};
        v.sival_int = kTerminateTree;
        ::sigqueue(spec.init_pid, SIGTERM, v);
        arm(tfd.get(), spec.kill_grace);
      } else if (!init_exited && !killed) {
        // Phase 2, after the timeout or cordon's SIGTERM: the grace is over.
        out.term_killed = !out.timed_out;
        kill_sandbox();
      }
    }
    if (listener && fds[4].revents != 0) {
      // Each pending attempt is answered EPERM at once: the asking thread waits for us.
      if ((fds[4].revents & (POLLHUP | POLLERR)) != 0 && (fds[4].revents & POLLIN) == 0) {
        listener.reset();  // every filter user is gone
      } else if (auto r = answer_userns_notification(listener.get())) {
        ++out.userns_refused;
        if (spec.on_userns_refused) {
          spec.on_userns_refused(*r);
        }
      }
    }
    if (hold_fd >= 0 && fds[5].revents != 0) {
      char cmd[16];
      ssize_t k = ::read(hold_fd, cmd, sizeof cmd);
      if (k <= 0 && !(k < 0 && (errno == EINTR || errno == EAGAIN))) {
        hold_fd = -1;  // the asker is gone: nothing holds the terminal any more
        held = false;
      }
      for (ssize_t i = 0; i < k; ++i) {
        if (cmd[i] == 'h' || cmd[i] == 'r') {
          held = cmd[i] == 'h';
          if (held) {
            // The relay reads the terminal only between polls: from here on it does not.
            (void)!::write(hold_fd, "k", 1);
          }
        }
      }
      if (relay) {
        relay->hold(held);
      }
    }
    for (size_t i = 0; i < nwatch; ++i) {
      const pollfd& f = fds[watches_at + static_cast<int>(i)];
      if (f.fd < 0 || f.revents == 0) {
        continue;
      }
      if ((f.revents & POLLIN) == 0) {
        watch_fds[i] = -1;  // the writer is gone (a pipe's POLLHUP): it has nothing more to say
        continue;
      }
      if (spec.watches[i].ready() && !init_exited && !killed) {
        out.alarm = true;
        kill_sandbox();
      }
    }
    if (relay) {
      relay->handle(&fds[relay_at], n - relay_at);
    }
  }
  if ((out.timed_out || out.term_killed) && spec.limits != nullptr) {
    spec.limits->kill_all();
  }
  if (spec.before_terminal_restore) {
    spec.before_terminal_restore();
  }
  raw.restore();
  return out;
}

}  // namespace cordon::launcher
