// SyscallGate: runs a program under a seccomp user-notification filter on the rename family, so
// a test holds the program at an exact rename and decides whether it goes on or is killed there.
// For crash tests that must kill a process at a chosen point however fast or loaded the machine
// is: a signal sent when a file changes can arrive after the process has finished.
//
// The filter is installed with no_new_privs (so it works rootless) just before execve and is
// inherited by every thread and child of the program. Its listener comes back over the launcher's
// report channel, the way the sandbox hands cordon its own seccomp listener.
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/channel.h"
#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {

class SyscallGate {
 public:
  // Verdict for one held rename: let it run, or kill the whole process group where it stands.
  enum class Verdict { Continue, Kill };

  SyscallGate(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              const std::string& cwd) {
    auto channel = launcher::make_channel();
    if (!channel.ok()) {
      return;
    }
    const int child_end = channel->child.get();
    proc_.emplace(argv, env, cwd, false, [child_end] {
      int listener = install_rename_listener();
      if (listener < 0 ||
          !launcher::send_msg(child_end, launcher::MsgKind::UsernsListener, 0, nullptr, listener)) {
        ::_exit(121);
      }
      ::close(listener);
    });
    channel->child.reset();  // EOF for recv_msg once the child has exec'd or died
    auto msg = launcher::recv_msg(channel->parent.get());
    if (msg.ok() && msg->has_value()) {
      listener_ = std::move((*msg)->fd);
    }
  }
  ~SyscallGate() {
    if (proc_ && proc_->pid() > 0) {
      ::kill(-proc_->pid(), SIGKILL);  // the group: the program and anything it started
    }
  }
  SyscallGate(const SyscallGate&) = delete;
  SyscallGate& operator=(const SyscallGate&) = delete;

  bool ok() const { return proc_ && proc_->pid() > 0 && listener_; }

  // Answers every rename the program makes with `decide` until it says Kill (then the process
  // group is killed with the rename not done; returns true) or the program exits (false).
  // Bounded by `limit_s` seconds.
  bool gate(const std::function<Verdict()>& decide, int limit_s = 120) {
    for (int waited_ms = 0; waited_ms < limit_s * 1000;) {
      pollfd p{listener_.get(), POLLIN, 0};
      int n = ::poll(&p, 1, 100);
      if (n == 0) {
        waited_ms += 100;
        continue;
      }
      if (n < 0 || (p.revents & POLLIN) == 0) {
        return false;  // POLLHUP: every process holding the filter is gone
      }
      seccomp_notif req;
      std::memset(&req, 0, sizeof req);
      if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
        if (errno == EINTR || errno == ENOENT) continue;
        return false;
      }
      if (decide() == Verdict::Kill) {
        ::kill(-proc_->pid(), SIGKILL);
        return true;
      }
      seccomp_notif_resp resp;
      std::memset(&resp, 0, sizeof resp);
      resp.id = req.id;
      resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
      (void)::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
    return false;
  }

  // Waits for the program to end (its output drained); its exit code, or -1 (killed).
  int wait() { return proc_->wait(std::chrono::seconds(120)); }

 private:
  // In the child: a filter that sends rename, renameat and renameat2 to a new listener.
  static int install_rename_listener() {
#if defined(__x86_64__)
    constexpr unsigned kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
    constexpr unsigned kArch = AUDIT_ARCH_AARCH64;
#endif
    std::vector<sock_filter> f = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
    };
    std::vector<unsigned> nrs = {SYS_renameat, SYS_renameat2};
#ifdef SYS_rename
    nrs.push_back(SYS_rename);
#endif
    for (unsigned nr : nrs) {
      f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
      f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF));
    }
    f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return static_cast<int>(
        ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog));
  }

  std::optional<Background> proc_;
  UniqueFd listener_;
};

}  // namespace cordon::testing
