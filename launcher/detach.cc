// Forking the supervisor of a detached session off the caller, and telling the caller its id.
#include "launcher/detach.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>

#include "policy/loader.h"

namespace cordon::launcher {
namespace {

// The setup of a session (cordon-fs, the proxy) takes well under a second; this bounds a hang.
constexpr auto kReadyWait = std::chrono::minutes(2);

[[noreturn]] void wait_for_announcement(int from_supervisor) {
  std::string got;
  const auto until = std::chrono::steady_clock::now() + kReadyWait;
  for (int i = 0; i < 1024 && got.size() < 256; ++i) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{from_supervisor, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      break;
    }
    char buf[128];
    ssize_t n = ::read(from_supervisor, buf, sizeof buf);
    if (n <= 0) {
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  if (got.empty() || got.back() != '\n') {
    ::_exit(kExitCordonFailed);  // the supervisor said why on stderr before it ended
  }
  std::fwrite(got.data(), 1, got.size(), stdout);
  std::fflush(stdout);
  ::_exit(0);
}

}  // namespace

std::string detach_option_error(const RunOptions& o) {
  if (!o.detach) {
    if (o.name) {
      return "--name: names a detached session; add --detach";
    }
    if (o.idle_timeout) {
      return "--idle-timeout: ends a detached session; add --detach";
    }
    return "";
  }
  if (!o.argv.empty()) {
    return "--detach starts a session without a program; run programs in it with `cordon exec "
           "ID -- COMMAND`";
  }
  if (o.ask) {
    return "--detach: not with --ask (there is no terminal to ask at in the background; use "
           "--decider or --decider-socket)";
  }
  if (o.no_namespaces) {
    return "--detach: not with --no-namespaces (the advisory mode has no sandbox to join)";
  }
  if (o.learn) {
    return "--detach: not with --learn (a learning run is one program's run)";
  }
  if (o.name) {
    const std::string& n = *o.name;
    bool ok = !n.empty() && n.size() <= 64;
    bool hex_only = true;
    for (char c : n) {
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
      hex_only = hex_only && (std::isxdigit(static_cast<unsigned char>(c)) || c == '-');
    }
    if (!ok || hex_only || n[0] == '.' || n == "last") {
      return "--name " + n +
             ": 1 to 64 letters, digits, '-', '_' or '.', not starting with '.', with at least "
             "one letter after f (so that it cannot be read as a session id), not \"last\"";
    }
  }
  if (o.idle_timeout && !policy::parse_duration(*o.idle_timeout)) {
    return "--idle-timeout " + *o.idle_timeout + ": not a duration; use e.g. 90s, 15m, 2h, 0";
  }
  return "";
}

Result<DetachedStart> DetachedStart::fork_supervisor() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return sys_error("pipe2() for --detach");
  }
  UniqueFd rd(fds[0]), wr(fds[1]);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    return sys_error("fork() of the detached supervisor");
  }
  if (pid > 0) {
    wr.reset();
    wait_for_announcement(rd.get());
  }
  rd.reset();
  if (::setsid() < 0) {
    return sys_error("setsid() of the detached supervisor");
  }
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || ::dup2(null, 0) != 0 || ::dup2(null, 1) != 1) {
    return sys_error("/dev/null as the detached supervisor's stdin and stdout");
  }
  ::close(null);
  DetachedStart d;
  d.to_caller_ = std::move(wr);
  return d;
}

void DetachedStart::announce(const std::string& id) {
  std::string line = id + "\n";
  (void)!::write(to_caller_.get(), line.data(), line.size());
  to_caller_.reset();
  int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 2);
    ::close(null);
  }
}

}  // namespace cordon::launcher

namespace cordon::launcher {

std::vector<std::string> detached_plan_argv(const RunOptions& opts) {
  if (opts.detach && opts.argv.empty()) {
    return {"/bin/sh"};
  }
  return opts.argv;
}

}  // namespace cordon::launcher
