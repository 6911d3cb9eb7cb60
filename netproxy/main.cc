// `cordon-netproxy`: the egress proxy daemon. Parses the command line, loads the policy, serves.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "base/fd_handoff.h"
#include "base/hardening.h"
#include "base/read_up_to.h"
#include "netproxy/proxy.h"
#include "policy/loader.h"

using namespace cordon;

namespace {

// A whole policy or CA PEM from an inherited fd (bounded: each is a few KiB), or nullopt with
// errno.
std::optional<std::string> read_handed_fd(int fd) {
  constexpr size_t kMax = 4u << 20;
  auto text = cordon::read_up_to(fd, kMax + 1);
  int saved = errno;
  ::close(fd);
  errno = saved;
  if (text && text->size() > kMax) {
    errno = EFBIG;
    return std::nullopt;
  }
  return text;
}

// --handoff-fd: the fds cordon hands over once we are undumpable (base/fd_handoff.h). The
// first becomes stdout; the rest take fds 4, 5, ... in order, which the other options name.
bool take_handed_fds(int handoff_fd, size_t count) {
  auto got = cordon::receive_handed_fds(handoff_fd, count, 10000);
  ::close(handoff_fd);
  if (!got.ok()) {
    std::fprintf(stderr, "cordon-netproxy: --handoff-fd %d: %s\n", handoff_fd,
                 got.error().to_string().c_str());
    return false;
  }
  // Each moved above every target first (the highest is 2 + count), so that placing one never
  // overwrites another. Not far above: F_DUPFD fails past RLIMIT_NOFILE, often 1024 soft.
  const int above = static_cast<int>(3 + count);
  std::vector<cordon::UniqueFd> high;
  for (auto& fd : *got) {
    high.emplace_back(::fcntl(fd.get(), F_DUPFD_CLOEXEC, above));
    if (!high.back()) {
      std::perror("cordon-netproxy: fcntl(F_DUPFD_CLOEXEC)");
      return false;
    }
    fd.reset();
  }
  for (size_t i = 0; i < high.size(); ++i) {
    int target = i == 0 ? STDOUT_FILENO : static_cast<int>(3 + i);
    if (::dup3(high[i].get(), target, O_CLOEXEC) != target) {
      std::perror("cordon-netproxy: dup3(handed fd)");
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // First: no other process of our uid may take our fds (pidfd_getfd) or memory from here on;
  // and nothing we hold reaches anything we might run.
  if (auto st = cordon::make_undumpable(); !st.ok()) {
    std::fprintf(stderr, "cordon-netproxy: %s\n", st.error().to_string().c_str());
    return 1;
  }
  if (auto st = cordon::cloexec_from(3); !st.ok()) {
    std::fprintf(stderr, "cordon-netproxy: %s\n", st.error().to_string().c_str());
    return 1;
  }
  CLI::App app{
      "cordon-netproxy " CORDON_VERSION
      " - cordon's egress proxy. Decides every TCP connection and\n"
      "DNS query of a sandbox by network policy (allow/deny host patterns, private-range and\n"
      "metadata blocking, caps and byte budgets) and logs each one to events.jsonl.\n\n"
      "Front ends: --listen serves an explicit HTTP proxy (absolute-form and CONNECT) and SOCKS5\n"
      "(no auth, CONNECT) on the same port; --transparent-fd serves connections netfilter\n"
      "REDIRECTed inside the sandbox's network namespace; --dns-fd / --dns-tcp-fd answer DNS.\n"
      "Exit status: 0 after SIGINT/SIGTERM, 2 for a bad policy or command line, 1 if a socket\n"
      "could not be set up."};
  std::string policy_file, events_file, session = "standalone", log_level = "warn", ca_dir;
  std::vector<std::string> listen;
  std::vector<int> listen_fds, transparent_fds, dns_fds, dns_tcp_fds;
  int events_fd = -1, ready_fd = -1, nflog_fd = -1, policy_fd = -1, handoff_fd = -1;
  int ca_cert_fd = -1, ca_key_fd = -1, credentials_fd = -1, exfil_alarm_fd = -1;
  int events_head_fd = -1;
  int decider_fd = -1;
  std::string decider_timeout = "60s";
  bool decider_is_person = false;
  int sandbox_pid = 0;
  size_t handoff_count = 0;
  auto* pol_file = app.add_option("--policy,-p", policy_file,
                                  "Policy file (JSON with comments); its network "
                                  "section is enforced");
  app.add_option("--policy-fd", policy_fd,
                 "Read the policy from this inherited fd instead of a file (the launcher opens "
                 "the session's policy before the proxy drops host root's ids)")
      ->excludes(pol_file);
  app.add_option("--listen,-l", listen,
                 "Explicit proxy listener ADDR:PORT (repeatable), e.g. 127.0.0.1:3128 or "
                 "[::1]:0; port 0 picks a free port, and each listener's address is printed on "
                 "stdout, one line each");
  app.add_option("--listen-fd", listen_fds,
                 "Already-listening TCP socket (inherited fd) for the explicit proxy, e.g. one "
                 "the launcher made inside the sandbox's namespace (repeatable)");
  app.add_option("--transparent-fd", transparent_fds,
                 "Already-listening TCP socket (inherited fd) for REDIRECTed connections "
                 "(repeatable)");
  app.add_option("--dns-fd", dns_fds, "Bound UDP socket (inherited fd) for DNS (repeatable)");
  app.add_option("--dns-tcp-fd", dns_tcp_fds,
                 "Listening TCP socket (inherited fd) for DNS over TCP (repeatable)");
  app.add_option("--nflog-fd", nflog_fd,
                 "NFLOG socket (inherited fd) opened inside the sandbox's network namespace by "
                 "netproxy::open_nflog_socket(): each packet the capture rules drop becomes a "
                 "net.refused event (rate-bounded, the excess summarised)");
  auto* ev_file = app.add_option("--events", events_file,
                                 "Append events (JSON Lines) to FILE, created mode 0600");
  auto* ev_fd =
      app.add_option("--events-fd", events_fd, "Append events to this inherited O_APPEND fd")
          ->excludes(ev_file);
  app.add_option("--events-head-fd", events_head_fd,
                 "The record's head (events.jsonl.head, inherited fd) that --events-fd's lines are "
                 "chained through with the other writers of the record")
      ->needs(ev_fd);
  app.add_option("--session", session, "Session id written in every event");
  app.add_option("--ca-dir", ca_dir,
                 "Directory of the session's TLS inspection CA (ca.pem, ca.key; made when "
                 "absent), for a policy that inspects TLS without its own network.ca");
  auto* ca_cert_opt = app.add_option(
      "--ca-cert-fd", ca_cert_fd,
      "Read the inspection CA's PEM certificate from this inherited fd (cordon run's session CA "
      "or network.ca, opened by cordon); wins over network.ca and --ca-dir");
  app.add_option("--ca-key-fd", ca_key_fd, "Read the inspection CA's PEM private key from this fd")
      ->needs(ca_cert_opt);
  ca_cert_opt->needs("--ca-key-fd");
  app.add_option("--credentials-fd", credentials_fd,
                 "Read network.credentials' values from this inherited fd (cordon run hands them "
                 "over; they are never in argv, the policy or a file)");
  app.add_option("--exfil-alarm-fd", exfil_alarm_fd,
                 "Write one byte to this inherited fd per net.exfil event (network.on_exfil: "
                 "kill; cordon run then ends the session)");
  app.add_option("--decider-fd", decider_fd,
                 "A connected stream socket (inherited fd) to a decider: connections the policy "
                 "refuses only for not being in network.allow are held and asked about there "
                 "(docs/decider.md)");
  app.add_option("--decider-timeout", decider_timeout,
                 "How long a question to the decider stays open before the connection is refused "
                 "(e.g. 500ms, 60s; default 60s)")
      ->needs("--decider-fd");
  app.add_flag("--decider-is-person", decider_is_person,
               "The decider is `cordon run --ask`: its answers are typed by a person, and events "
               "say decided_by \"person\"")
      ->needs("--decider-fd");
  app.add_option("--sandbox-pid", sandbox_pid,
                 "The sandbox's init, as this process's pid namespace numbers it: each question to "
                 "the decider names the process making the connection and its parents, read from "
                 "/proc")
      ->needs("--decider-fd");
  app.add_option("--ready-fd", ready_fd,
                 "Write one byte to this fd (then close it) once every socket is set up");
  app.add_option("--log-level", log_level, "Diagnostics on stderr: trace|debug|info|warn|error");
  app.add_option("--handoff-fd", handoff_fd,
                 "Ask on this inherited socket for --handoff-count fds, once this process is no "
                 "longer dumpable: the first becomes stdout, the others fds 4, 5, ... (how cordon "
                 "starts the proxy, so no fd of a session is exposed while it starts)");
  app.add_option("--handoff-count", handoff_count, "How many fds --handoff-fd brings")
      ->check(CLI::Range(1, 32));
  CLI11_PARSE(app, argc, argv);
  if (handoff_fd >= 0 && !take_handed_fds(handoff_fd, handoff_count)) {
    return 1;
  }
  if (policy_file.empty() && policy_fd < 0) {
    std::fprintf(stderr, "cordon-netproxy: --policy FILE (or --policy-fd N) is required\n");
    return 2;
  }

  auto logger = spdlog::stderr_color_mt("cordon-netproxy");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  ::signal(SIGPIPE, SIG_IGN);
  // Two sockets per connection, plus a pipe pair per chunk in flight (splice data path): use the
  // hard descriptor limit, not the (often 1024) soft one.
  if (rlimit nofile{};
      ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) {
      spdlog::warn("setrlimit(RLIMIT_NOFILE, {}): {}", nofile.rlim_max, std::strerror(errno));
    }
  }

  // Only the network section matters here: "~" in filesystem patterns must not need a home
  // (the proxy may run as an id with no passwd entry and no $HOME).
  static const std::string kNoHome = "/nonexistent";
  policy::Policy pol;
  try {
    if (policy_fd >= 0) {
      policy_file = "policy fd " + std::to_string(policy_fd);
      auto text = read_handed_fd(policy_fd);
      if (!text) {
        std::fprintf(stderr, "cordon-netproxy: --policy-fd %d: %s\n", policy_fd,
                     std::strerror(errno));
        return 2;
      }
      pol = policy::parse_policy(*text, {.home = kNoHome, .source_name = policy_file});
    } else {
      pol = policy::load_policy_file(policy_file, {.home = kNoHome, .source_name = policy_file});
    }
  } catch (const policy::PolicyError& e) {
    std::fprintf(stderr, "cordon-netproxy: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cordon-netproxy: %s: %s\n", policy_file.c_str(), e.what());
    return 2;
  }

  const auto record_limits = record::RecordLimits::from(pol.record);
  record::EventLog events;
  if (!events_file.empty()) {
    auto opened = record::EventLog::open(events_file, session, "netproxy", record_limits);
    if (!opened.ok()) {
      std::fprintf(stderr, "cordon-netproxy: --events: %s\n", opened.error().to_string().c_str());
      return 1;
    }
    events = std::move(opened).value();
  } else if (events_fd >= 0) {
    events = record::EventLog::adopt(UniqueFd(events_fd), session, "netproxy", record_limits,
                                     UniqueFd(events_head_fd));
  }

  netproxy::Proxy proxy(std::move(pol.network), std::move(events));
  netproxy::ProxyOptions opts;
  opts.listen = listen;
  opts.listen_fds = listen_fds;
  opts.transparent_fds = transparent_fds;
  opts.dns_udp_fds = dns_fds;
  opts.dns_tcp_fds = dns_tcp_fds;
  opts.nflog_fd = nflog_fd;
  opts.ca_dir = ca_dir;
  for (auto [fd, out] : {std::pair{ca_cert_fd, &opts.ca_cert_pem}, {ca_key_fd, &opts.ca_key_pem}}) {
    if (fd < 0) {
      continue;
    }
    auto text = read_handed_fd(fd);
    if (!text || text->empty()) {
      std::fprintf(stderr, "cordon-netproxy: CA fd %d: %s\n", fd,
                   text ? "empty" : std::strerror(errno));
      return 2;
    }
    *out = std::move(*text);
  }
  if (credentials_fd >= 0) {
    auto text = read_handed_fd(credentials_fd);
    if (!text) {
      std::fprintf(stderr, "cordon-netproxy: credentials fd %d: %s\n", credentials_fd,
                   std::strerror(errno));
      return 2;
    }
    opts.secrets = std::move(*text);
  }
  opts.exfil_alarm_fd = exfil_alarm_fd;
  opts.decider_fd = decider_fd;
  opts.decider_is_person = decider_is_person;
  opts.sandbox_pid = sandbox_pid;
  if (auto t = policy::parse_duration(decider_timeout); t && t->count() > 0) {
    opts.decider_timeout = *t;
  } else {
    std::fprintf(stderr, "cordon-netproxy: --decider-timeout %s: not a positive duration\n",
                 decider_timeout.c_str());
    return 2;
  }
  if (auto st = proxy.start(opts); !st.ok()) {
    std::fprintf(stderr, "cordon-netproxy: %s\n", st.error().to_string().c_str());
    return 1;
  }
  proxy.handle_signals();
  for (const auto& addr : proxy.listening()) {
    std::printf("%s\n", addr.c_str());
  }
  std::fflush(stdout);
  if (ready_fd >= 0) {
    char one = '1';
    if (::write(ready_fd, &one, 1) != 1) {
      spdlog::warn("write(--ready-fd {}): {}", ready_fd, std::strerror(errno));
    }
    ::close(ready_fd);
  }
  proxy.run();
  return 0;
}
