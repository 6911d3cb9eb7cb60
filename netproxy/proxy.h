// cordon-netproxy as a library: the launcher (or main.cc, or a test) builds a Proxy from a network
// policy and the sockets to serve, then runs it on one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"
#include "record/events.h"

namespace cordon::netproxy {

struct ProxyOptions {
  // Explicit proxy listeners (HTTP proxy + SOCKS5 on each): "127.0.0.1:3128", "[::1]:0".
  std::vector<std::string> listen;
  // Already-listening TCP sockets for the explicit proxy (e.g. 127.0.0.1:E inside the sandbox's
  // namespace, announced there through HTTP_PROXY / ALL_PROXY).
  std::vector<int> listen_fds;
  // Already-listening TCP sockets for netfilter-redirected connections (transparent mode); a
  // dual-stack [::]:P socket serves both the IPv4 and IPv6 redirects.
  std::vector<int> transparent_fds;
  // Bound UDP sockets and listening TCP sockets for the DNS responder.
  std::vector<int> dns_udp_fds;
  std::vector<int> dns_tcp_fds;
  // An NFLOG socket from open_nflog_socket() (nflog.h), made inside the sandbox's namespace:
  // every packet the capture ruleset drops becomes a net.refused event. -1 = none.
  int nflog_fd = -1;
  // Per-packet drop events per second before they are only counted and summarised.
  uint32_t nflog_events_per_second = 20;
  // Where the session's inspection CA lives (ca.pem, ca.key: made when absent), for a policy
  // that inspects TLS without naming its own network.ca. Empty: such a policy is an error.
  std::string ca_dir;
  // The inspection CA as PEM text (cordon run hands it over as fds: the proxy may run as an id
  // that cannot open the session directory). Set: it wins over network.ca and ca_dir.
  std::string ca_cert_pem, ca_key_pem;
  // network.credentials' values as cordon run hands them over (credentials.h, load_secrets);
  // required when the policy has credentials. The canaries' values come the same way.
  std::string secrets;
  // network.on_exfil: kill: one byte written here per net.exfil (cordon run reads it); -1 = none.
  int exfil_alarm_fd = -1;
  // A connected stream socket to the decider (decider.h, docs/decider.md), taken over; -1 = none.
  // With one, a connection the policy refuses only for not being in network.allow is held until
  // the decider answers or `decider_timeout` passes (then refused).
  int decider_fd = -1;
  std::chrono::milliseconds decider_timeout{std::chrono::seconds(60)};
  // The decider is `cordon run --ask`: its answers are recorded as decided_by "person".
  bool decider_is_person = false;
  // The sandbox's init (this pid namespace's number): a question to the decider names the process
  // behind the connection (client_process.h). 0 = not named.
  pid_t sandbox_pid = 0;
};

class Proxy {
 public:
  // `policy` is copied; `events` receives net.* and limit.hit events.
  Proxy(policy::NetworkPolicy policy, record::EventLog events);
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Binds the listeners and adopts the fds (taking ownership). Errors name the address or fd,
  // the syscall and the fix. Nothing is served until run().
  Status start(const ProxyOptions& opts);
  // "127.0.0.1:41234" for each explicit listener, in the order given.
  std::vector<std::string> listening() const;
  // Serves until stop() (or SIGINT/SIGTERM when handle_signals was called).
  void run();
  void stop();
  void handle_signals();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cordon::netproxy
