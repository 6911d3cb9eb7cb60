// Starting the decider command on a socketpair, or connecting to a decider's socket.
#include "launcher/sidecars/decider_sidecar.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cordon::launcher {

Result<DeciderChannel> start_decider_command(const std::string& command) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return sys_error("socketpair() for --decider");
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  const pid_t parent = ::getpid();
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  const pid_t pid = ::fork();
  if (pid < 0) {
    return sys_error("fork() for --decider \"" + command + "\"");
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) {
      ::_exit(125);  // cordon is already gone
    }
    if (::dup2(theirs.get(), 0) < 0 || ::dup2(theirs.get(), 1) < 0) {
      ::_exit(125);
    }
    // Nothing else of cordon's (the session's record, the proxy's sockets) reaches the decider.
    ::close_range(3, ~0U, 0);
    ::execv(argv[0], const_cast<char* const*>(argv));
    ::_exit(127);
  }
  DeciderChannel out;
  out.proxy_end = std::move(ours);
  out.child.emplace(pid);
  return out;
}

Result<DeciderChannel> connect_decider_socket(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa.sun_path) {
    return make_error("--decider-socket \"" + path + "\": not a usable socket path",
                      "give a path shorter than " + std::to_string(sizeof sa.sun_path) + " bytes");
  }
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return sys_error("socket(AF_UNIX) for --decider-socket");
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    return sys_error("connect(\"" + path + "\") for --decider-socket",
                     "start the decider first, listening on that path");
  }
  DeciderChannel out;
  out.proxy_end = std::move(fd);
  return out;
}

}  // namespace cordon::launcher
