// Answering (EPERM) and naming user-namespace attempts reported by the seccomp listener.
#include "launcher/sandbox/userns_listener.h"

#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace cordon::launcher {
namespace {

constexpr int kProbeTimeoutMs = 5000;

// The kernel may grow its notification structs: receive into buffers as large as it says.
struct Sizes {
  size_t notif = sizeof(seccomp_notif);
  size_t resp = sizeof(seccomp_notif_resp);
};
Sizes notif_sizes() {
  seccomp_notif_sizes s{};
  Sizes out;
  if (::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &s) == 0) {
    out.notif = std::max<size_t>(out.notif, s.seccomp_notif);
    out.resp = std::max<size_t>(out.resp, s.seccomp_notif_resp);
  }
  return out;
}

// The program's executable, read while its syscall is still held: once answered, a short-lived
// caller (bubblewrap giving up) is gone before anyone could look. The id is checked again after the
// read, so a pid reused meanwhile is never named.
std::string held_exe(int listener, const seccomp_notif& req) {
  char link[64], exe[4096];
  std::snprintf(link, sizeof link, "/proc/%u/exe", req.pid);
  ssize_t n = ::readlink(link, exe, sizeof exe - 1);
  uint64_t id = req.id;
  if (n <= 0 || ::ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) != 0) {
    return {};
  }
  return std::string(exe, static_cast<size_t>(n));
}

// Receives one notification, names its program and answers it EPERM. 0, or -errno (EAGAIN: none
// pending).
int answer_one(int listener, seccomp_notif* req, seccomp_notif_resp* resp, size_t notif_size,
               size_t resp_size, std::string& exe) {
  std::memset(req, 0, notif_size);
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, req) != 0) {
    return -errno;
  }
  exe = held_exe(listener, *req);
  std::memset(resp, 0, resp_size);
  resp->id = req->id;
  resp->error = -EPERM;
  // ENOENT: the thread was killed or its syscall interrupted meanwhile; nothing to answer.
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp) != 0) {
    return -errno;
  }
  return 0;
}

}  // namespace

std::optional<RefusedNamespace> answer_userns_notification(int listener) {
  static const Sizes sizes = notif_sizes();
  std::vector<unsigned char> req_buf(sizes.notif), resp_buf(sizes.resp);
  auto* req = reinterpret_cast<seccomp_notif*>(req_buf.data());
  auto* resp = reinterpret_cast<seccomp_notif_resp*>(resp_buf.data());
  RefusedNamespace r;
  if (answer_one(listener, req, resp, sizes.notif, sizes.resp, r.exe) != 0) {
    return std::nullopt;
  }
  r.pid = static_cast<pid_t>(req->pid);
  r.syscall = req->data.nr == __NR_clone     ? "clone"
              : req->data.nr == __NR_unshare ? "unshare"
                                             : "syscall " + std::to_string(req->data.nr);
  r.flags = req->data.args[0];
  return r;
}

std::string namespace_flags_text(uint64_t flags) {
  static constexpr struct {
    uint64_t bit;
    const char* name;
  } kBits[] = {{CLONE_NEWUSER, "CLONE_NEWUSER"},     {CLONE_NEWNS, "CLONE_NEWNS"},
               {CLONE_NEWPID, "CLONE_NEWPID"},       {CLONE_NEWNET, "CLONE_NEWNET"},
               {CLONE_NEWIPC, "CLONE_NEWIPC"},       {CLONE_NEWUTS, "CLONE_NEWUTS"},
               {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}, {0x80 /* CLONE_NEWTIME */, "CLONE_NEWTIME"}};
  std::string out;
  for (const auto& b : kBits) {
    if ((flags & b.bit) != 0) {
      out += (out.empty() ? "" : "|") + std::string(b.name);
    }
  }
  return out;
}

Status probe_userns_listener(int listener) {
  pid_t child = ::fork();
  if (child < 0) {
    return sys_error("fork() for the user-namespace probe");
  }
  if (child == 0) {
    long rc = ::syscall(SYS_unshare, CLONE_NEWUSER);
    ::_exit(rc == 0 ? 2 : errno == EPERM ? 0 : 3);
  }
  pollfd p{listener, POLLIN, 0};
  std::optional<RefusedNamespace> got;
  if (::poll(&p, 1, kProbeTimeoutMs) > 0) {
    got = answer_userns_notification(listener);
  }
  if (!got) {
    ::kill(child, SIGKILL);
  }
  int st = 0;
  ::waitpid(child, &st, 0);
  if (!got || got->syscall != "unshare" || (got->flags & CLONE_NEWUSER) == 0) {
    return make_error(
        "sandbox check: the seccomp listener did not receive the probe's unshare(CLONE_NEWUSER)");
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return make_error("sandbox check: unshare(CLONE_NEWUSER) through the seccomp listener " +
                      std::string(WIFEXITED(st) && WEXITSTATUS(st) == 2
                                      ? "succeeded; a new user namespace could be created"
                                      : "did not fail with EPERM"));
  }
  return {};
}

}  // namespace cordon::launcher
