// SyscallGate: runs a program under a seccomp user-notification filter on the rename family, so
// a test holds the program at an exact rename and decides whether it goes on or is killed there.
// For crash tests that must kill a process at a chosen point however fast or loaded the machine
// is: a signal sent when a file changes can arrive after the process has finished.
//
// The filter is installed with no_new_privs (so it works rootless) just before execve and is
// inherited by every thread and child of the program.
#pragma once

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace cordon::testing {

class SyscallGate {
 public:
  // Verdict for one held rename: let it run, or kill the whole process group where it stands.
  enum class Verdict { Continue, Kill };

  SyscallGate(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              const std::string& cwd) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
      return;
    }
    std::vector<char*> a, e;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(sv[0]);
      ::setpgid(0, 0);
      int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      if (::chdir(cwd.c_str()) != 0) ::_exit(120);
      int listener = install_filter();
      if (listener < 0 || !send_fd(sv[1], listener)) ::_exit(121);
      ::close(listener);
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
    ::close(sv[1]);
    listener_ = recv_fd(sv[0]);
    ::close(sv[0]);
  }
  ~SyscallGate() {
    if (listener_ >= 0) ::close(listener_);
    if (pid_ > 0 && !reaped_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  SyscallGate(const SyscallGate&) = delete;
  SyscallGate& operator=(const SyscallGate&) = delete;

  bool ok() const { return pid_ > 0 && listener_ >= 0; }

  // Answers every rename the program makes with `decide` until it says Kill (then the process
  // group is killed with the rename not done; returns true) or the program exits (false).
  // Bounded by `limit_s` seconds.
  bool gate(const std::function<Verdict()>& decide, int limit_s = 120) {
    for (int waited_ms = 0; waited_ms < limit_s * 1000;) {
      pollfd p{listener_, POLLIN, 0};
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
      if (::ioctl(listener_, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
        if (errno == EINTR || errno == ENOENT) continue;
        return false;  // every process holding the filter is gone
      }
      if (decide() == Verdict::Kill) {
        ::kill(-pid_, SIGKILL);
        return true;
      }
      seccomp_notif_resp resp;
      std::memset(&resp, 0, sizeof resp);
      resp.id = req.id;
      resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
      (void)::ioctl(listener_, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
    return false;
  }

  // The program's wait status.
  int wait() {
    int st = -1;
    ::waitpid(pid_, &st, 0);
    reaped_ = true;
    return st;
  }

 private:
  static int install_filter() {
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
  static bool send_fd(int sock, int fd) {
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return ::sendmsg(sock, &m, 0) == 1;
  }
  static int recv_fd(int sock) {
    char byte;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    if (::recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != 1) return -1;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return -1;
    int fd;
    std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
  }

  pid_t pid_ = -1;
  int listener_ = -1;
  bool reaped_ = false;
};

}  // namespace cordon::testing
