// cordon-netproxy as the session's sidecar: lookup, spawn with inherited fds, ready handshake,
// stop and reap.
#include "launcher/sidecars/net_sidecar.h"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "base/fd_handoff.h"
#include "launcher/channel.h"
#include "launcher/companion.h"
#include "launcher/sandbox/netns.h"
#include "launcher/session/session_text.h"
#include "record/chain_head.h"

namespace cordon::launcher {
namespace {

// `text` in a memfd sealed against change, at offset 0: the proxy reads it once; it never has a
// path anyone could open.
Result<UniqueFd> sealed_memfd(const char* name, const std::string& text) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) {
    return sys_error(std::string("memfd_create(\"") + name + "\")");
  }
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n <= 0) {
      return sys_error(std::string("write() to memfd ") + name);
    }
    done += static_cast<size_t>(n);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) !=
          0 ||
      ::lseek(fd.get(), 0, SEEK_SET) != 0) {
    return sys_error(std::string("sealing memfd ") + name);
  }
  return fd;
}

constexpr const char* kNetproxyFile = "cordon-netproxy";

// The last few lines of the proxy's log, quoted in errors (its own words for what went wrong).
std::string log_tail(const std::string& path) {
  if (path.empty()) {
    return {};
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return {};
  }
  off_t size = ::lseek(fd.get(), 0, SEEK_END);
  off_t from = size > 1024 ? size - 1024 : 0;
  char buf[1024];
  ssize_t n = ::pread(fd.get(), buf, sizeof buf, from);
  if (n <= 0) {
    return {};
  }
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
    s.pop_back();
  }
  return text::one_line(s, 600);
}

void add_fd_args(std::vector<std::string>& argv, const char* flag, const std::vector<int>& fds,
                 std::vector<int>& sources, int& next) {
  for (int fd : fds) {
    argv.push_back(flag);
    argv.push_back(std::to_string(next++));
    sources.push_back(fd);
  }
}

// The forked child: fds into place (sources first moved above every target, so a dup2 never
// clobbers a source still to be placed), nothing else inherited, its own session (a ^C at the
// terminal is for the program, forwarded by cordon, not for the proxy), death with cordon.
// Everything it needs was allocated before fork: cordon may have other threads by now.
[[noreturn]] void exec_proxy(char* const* argv, char* const* envp, const int* fds, size_t nfds,
                             pid_t parent, uid_t uid, gid_t gid) {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // cordon blocks the signals it supervises
  if (uid != static_cast<uid_t>(-1)) {
    // Before the death signal: a change of ids clears it. setresuid from root drops every
    // capability (no SECBIT_KEEP_CAPS), and no_new_privs keeps it that way across exec.
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
        ::setresuid(uid, uid, uid) != 0 || ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
      ::_exit(125);
    }
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::getppid() != parent) {
    ::_exit(125);  // cordon died before the death signal was armed
  }
  ::setsid();
  constexpr int kHigh = 512;
  constexpr size_t kMaxFds = 8;
  int moved[kMaxFds];
  if (nfds > kMaxFds) {
    ::_exit(125);
  }
  for (size_t i = 0; i < nfds; ++i) {
    moved[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, kHigh);
    if (moved[i] < 0) {
      ::_exit(125);
    }
  }
  for (size_t i = 0; i < nfds; ++i) {
    if (::dup2(moved[i], static_cast<int>(i)) < 0) {  // dup2 clears FD_CLOEXEC on the target
      ::_exit(125);
    }
  }
  ::close_range(static_cast<unsigned>(nfds), ~0U, 0);
  ::execve(argv[0], argv, envp);
  ::_exit(127);
}

}  // namespace

std::string describe_netproxy_exit(int st) {
  std::string how =
      WIFSIGNALED(st) ? text::signal_name(WTERMSIG(st)) : "exit " + std::to_string(WEXITSTATUS(st));
  return "cordon-netproxy died (" + how +
         ") during the session: the sandbox lost its network (connections refused from then on)";
}

Result<std::string> find_netproxy_binary() {
  if (const char* env = std::getenv("CORDON_NETPROXY_BIN"); env != nullptr && *env != '\0') {
    return std::string(env);  // tests and packagers; taken as given: a bad one fails at spawn
  }
  std::vector<std::string> tried;
  if (auto p = find_companion(kNetproxyFile, "netproxy",
                              std::string(CORDON_LIBEXECDIR) + "/" + kNetproxyFile, X_OK, &tried)) {
    return *p;
  }
  return make_error("cordon-netproxy not found (looked at " + join_tried(tried) + ")",
                    "install cordon completely, or drop network.allow / --allow-host to run "
                    "without network");
}

Result<NetproxyProcess> spawn_netproxy(const NetproxySpawn& spec) {
  std::string binary = spec.binary;
  if (binary.empty()) {
    ASSIGN_OR_RETURN(binary, find_netproxy_binary());
  }
  int ready[2], out[2], handoff[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    return sys_error("pipe2() for cordon-netproxy's ready byte");
  }
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return sys_error("pipe2() for cordon-netproxy's stdout");
  }
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, handoff) != 0) {
    return sys_error("socketpair() for cordon-netproxy's fd handoff");
  }
  UniqueFd handoff_mine(handoff[0]), handoff_theirs(handoff[1]);
  int one = 1;
  if (::setsockopt(handoff_mine.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) {
    return sys_error("setsockopt(SO_PASSCRED) on cordon-netproxy's handoff socket");
  }
  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) {
    return sys_error("open(\"/dev/null\")");
  }
  UniqueFd log;
  if (!spec.log_path.empty()) {
    log.reset(::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!log) {
      return sys_error("open(\"" + spec.log_path + "\") for cordon-netproxy's diagnostics");
    }
  }
  UniqueFd events, events_head;
  if (!spec.events_path.empty()) {
    events.reset(::open(spec.events_path.c_str(),
                        O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!events) {
      return sys_error("open(\"" + spec.events_path + "\", O_APPEND) for cordon-netproxy");
    }
    ASSIGN_OR_RETURN(
        events_head,
        record::open_head_file(AT_FDCWD, spec.events_path + std::string(record::kHeadSuffix)));
  }

  // Handed over once the proxy is undumpable: its stdout first, then each socket as fd 4, 5, ...
  // in argument order (cordon-netproxy --handoff-fd).
  const bool drop_ids = spec.run_uid != static_cast<uid_t>(-1);
  std::vector<std::string> argv = {binary, "--session", spec.session_id};
  std::vector<int> sources = {out_w.get()};
  int next = 4;
  UniqueFd policy_fd;
  if (drop_ids) {
    policy_fd.reset(::open(spec.policy_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!policy_fd) {
      return sys_error("open(\"" + spec.policy_path + "\") for cordon-netproxy");
    }
    add_fd_args(argv, "--policy-fd", {policy_fd.get()}, sources, next);
  } else {
    argv.insert(argv.end(), {"--policy", spec.policy_path});
  }
  if (events) {
    add_fd_args(argv, "--events-fd", {events.get()}, sources, next);
    add_fd_args(argv, "--events-head-fd", {events_head.get()}, sources, next);
  }
  UniqueFd ca_cert, ca_key;
  if (!spec.ca_cert_path.empty()) {
    for (auto [path, fd] :
         {std::pair{&spec.ca_cert_path, &ca_cert}, {&spec.ca_key_path, &ca_key}}) {
      fd->reset(::open(path->c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
      if (!*fd) {
        return sys_error("open(\"" + *path + "\") for cordon-netproxy");
      }
    }
    add_fd_args(argv, "--ca-cert-fd", {ca_cert.get()}, sources, next);
    add_fd_args(argv, "--ca-key-fd", {ca_key.get()}, sources, next);
  }
  UniqueFd secrets;
  if (!spec.secrets.empty()) {
    auto fd = sealed_memfd("cordon-credentials", spec.secrets);
    if (!fd.ok()) {
      return std::move(fd).error();
    }
    secrets = std::move(fd).value();
    add_fd_args(argv, "--credentials-fd", {secrets.get()}, sources, next);
  }
  if (spec.exfil_alarm_fd >= 0) {
    add_fd_args(argv, "--exfil-alarm-fd", {spec.exfil_alarm_fd}, sources, next);
  }
  if (spec.decider_fd >= 0) {
    add_fd_args(argv, "--decider-fd", {spec.decider_fd}, sources, next);
    if (!spec.decider_timeout.empty()) {
      argv.insert(argv.end(), {"--decider-timeout", spec.decider_timeout});
    }
    if (spec.sandbox_pid > 0) {
      argv.insert(argv.end(), {"--sandbox-pid", std::to_string(spec.sandbox_pid)});
    }
    if (spec.decider_is_person) {
      argv.push_back("--decider-is-person");
    }
  }
  add_fd_args(argv, "--transparent-fd", spec.transparent_fds, sources, next);
  add_fd_args(argv, "--dns-fd", spec.dns_fds, sources, next);
  add_fd_args(argv, "--dns-tcp-fd", spec.dns_tcp_fds, sources, next);
  add_fd_args(argv, "--listen-fd", spec.listen_fds, sources, next);
  if (spec.nflog_fd >= 0) {
    add_fd_args(argv, "--nflog-fd", {spec.nflog_fd}, sources, next);
  }
  add_fd_args(argv, "--ready-fd", {ready_w.get()}, sources, next);
  if (spec.listen_on_host) {
    argv.push_back("--listen");
    argv.push_back("127.0.0.1:0");
  }
  argv.insert(argv.end(), {"--handoff-fd", "3", "--handoff-count", std::to_string(sources.size())});
  // At exec: /dev/null, /dev/null, the log, the handoff socket. Nothing a thief could use.
  std::vector<int> fds = {devnull.get(), devnull.get(), log ? log.get() : STDERR_FILENO,
                          handoff_theirs.get()};
  std::vector<char*> args;
  for (auto& a : argv) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  // Only where OpenSSL finds the host's trust store, which checks inspected upstreams.
  std::vector<std::string> env_kv;
  for (const char* name : {"SSL_CERT_FILE", "SSL_CERT_DIR"}) {
    if (const char* v = std::getenv(name); v != nullptr) {
      env_kv.push_back(std::string(name) + "=" + v);
    }
  }
  std::vector<char*> envp;
  for (auto& kv : env_kv) {
    envp.push_back(kv.data());
  }
  envp.push_back(nullptr);

  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    return sys_error("fork() for cordon-netproxy");
  }
  if (pid == 0) {
    exec_proxy(args.data(), envp.data(), fds.data(), fds.size(), parent, spec.run_uid,
               spec.run_gid);
  }
  NetproxyProcess proc;
  proc.child = ChildProcess(pid);
  proc.log_path = spec.log_path;
  handoff_theirs.reset();

  auto fail = [&](const std::string& what) -> Error {
    proc.stop(std::chrono::milliseconds(200));
    std::string tail = log_tail(spec.log_path);
    return make_error("cordon-netproxy (" + binary + ") " + what +
                      (tail.empty() ? std::string() : ": " + tail));
  };
  auto exit_text = [](int st) {
    return WIFSIGNALED(st) ? text::signal_name(WTERMSIG(st))
                           : "status " + std::to_string(WEXITSTATUS(st));
  };
  if (auto st = hand_over_fds(handoff_mine.get(), pid, sources,
                              static_cast<int>(spec.ready_timeout.count()));
      !st.ok()) {
    proc.child.wait_for(std::chrono::seconds(1));  // its socket closes before its exit is reapable
    if (auto x = proc.exited(); x) {
      return fail("exited (" + exit_text(*x) + ") before it was ready");
    }
    return fail("did not take its sockets: " + st.error().to_string());
  }
  handoff_mine.reset();
  ready_w.reset();
  out_w.reset();
  events.reset();
  events_head.reset();

  // Ready byte, or the proxy's exit, or the deadline.
  auto deadline = std::chrono::steady_clock::now() + spec.ready_timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return fail("was not ready after " + text::duration(spec.ready_timeout));
    }
    pollfd p{ready_r.get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno != EINTR) {
      return sys_error("poll(cordon-netproxy's ready pipe)");
    }
    if (r > 0) {
      char b = 0;
      if (::read(ready_r.get(), &b, 1) == 1) {
        break;
      }
      // EOF without the byte: it is exiting (or closed the fd) before it was ready. The pipe
      // closes before the exit is reapable: give the exit a moment to complete.
      proc.child.wait_for(std::chrono::seconds(1));
      if (auto st = proc.exited(); st) {
        return fail("exited (" + exit_text(*st) + ") before it was ready");
      }
      return fail("closed its ready fd without being ready");
    }
  }

  if (spec.listen_on_host) {
    // It prints each listener's address ("127.0.0.1:PORT") on stdout before the ready byte.
    char buf[256];
    ssize_t n = ::read(out_r.get(), buf, sizeof buf - 1);
    std::string line = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    size_t colon = line.find(':');
    long port = colon == std::string::npos ? 0 : std::strtol(line.c_str() + colon + 1, nullptr, 10);
    if (port <= 0 || port > 65535) {
      return fail("did not say which port it listens on (stdout: \"" + text::one_line(line, 80) +
                  "\")");
    }
    proc.host_port = static_cast<uint16_t>(port);
  }
  return proc;
}

Result<NetproxyProcess> start_sandbox_netproxy(int channel, const SandboxNet& net) {
  auto msg = recv_until(channel, MsgKind::NetSockets,
                        "network: the sandbox ended before it handed over its network sockets");
  if (!msg.ok()) {
    return std::move(msg).error();
  }
  auto s = capture_sockets_from_msg(msg->text, std::move(msg->fd), std::move(msg->fds));
  if (!s.ok()) {
    return std::move(s).error().with_context("network");
  }
  CaptureSockets sockets = std::move(*s);
  NetproxySpawn spec;
  spec.policy_path = net.policy_path;
  spec.session_id = net.session_id;
  spec.events_path = net.events_path;
  spec.log_path = net.log_path;
  spec.binary = net.binary;
  spec.run_uid = net.run_uid;
  spec.run_gid = net.run_gid;
  spec.ca_cert_path = net.ca_cert_path;
  spec.ca_key_path = net.ca_key_path;
  spec.secrets = net.secrets;
  spec.exfil_alarm_fd = net.exfil_alarm_fd;
  spec.decider_fd = net.decider_fd;
  spec.decider_timeout = net.decider_timeout;
  spec.decider_is_person = net.decider_is_person;
  spec.sandbox_pid = net.sandbox_pid;
  spec.transparent_fds = {sockets.transparent.get()};
  spec.dns_fds = {sockets.dns_udp.get()};
  spec.dns_tcp_fds = {sockets.dns_tcp.get()};
  if (sockets.explicit_proxy) {
    spec.listen_fds = {sockets.explicit_proxy.get()};
  }
  spec.nflog_fd = sockets.nflog ? sockets.nflog.get() : -1;
  auto proxy = spawn_netproxy(spec);
  if (!proxy.ok()) {
    return std::move(proxy).error().with_context("network");
  }
  // `sockets` goes out of scope here: the proxy holds the only copies from now on.
  return proxy;
}

}  // namespace cordon::launcher
