// cordon-netproxy as the session's sidecar, host side: found, started in the host network
// namespace with the sockets the sandbox made (or a host listener for --no-namespaces), waited for
// until ready, and killed and reaped when the session ends.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/child_process.h"

namespace cordon::launcher {

struct NetproxySpawn {
  std::string policy_path;  // the session's policy.json (the effective policy)
  std::string session_id;
  // The session's events.jsonl: the proxy gets an open of its own (O_APPEND), so that the record's
  // cap can tell writers apart (record/limiter.h). "" = no events.
  std::string events_path;
  std::vector<int> transparent_fds, dns_fds, dns_tcp_fds;
  std::vector<int> listen_fds;  // explicit HTTP proxy + SOCKS5 listeners
  int nflog_fd = -1;            // NFLOG socket of the sandbox's namespace (--nflog-fd), or -1
  // --no-namespaces: the proxy listens on the host's 127.0.0.1:0 itself; the port it chose is
  // returned in NetproxyProcess::host_port.
  bool listen_on_host = false;
  std::string log_path;  // the proxy's diagnostics (stderr), appended; "" = cordon's stderr
  std::string binary;    // "" = find_netproxy_binary()
  // The inspection CA's PEM files (session_ca.h), opened here and handed over as fds, since the
  // proxy may run as an id that cannot read them. "" = none.
  std::string ca_cert_path, ca_key_path;
  // network.credentials' values (plant_placeholders, credentials.h), handed over in a sealed
  // memfd as --credentials-fd, never in argv or a file. "" = none.
  std::string secrets;
  // network.on_exfil: kill: the write end of the pipe cordon-netproxy signals an exfiltration
  // attempt on (--exfil-alarm-fd); -1 = none.
  int exfil_alarm_fd = -1;
  // The decider channel's proxy end (decider_sidecar.h), handed over as --decider-fd; -1 = none.
  // `decider_timeout` ("" = the proxy's default) goes with it as --decider-timeout.
  int decider_fd = -1;
  std::string decider_timeout;
  bool decider_is_person = false;  // --ask: --decider-is-person
  pid_t sandbox_pid = 0;           // with a decider: --sandbox-pid (the sandbox's init)
  std::chrono::milliseconds ready_timeout{10000};
  // As host root: the ids the proxy switches to before it runs (the sandbox's user), so a proxy
  // compromised by hostile traffic holds no privilege. The policy is then opened by cordon and
  // passed as --policy-fd (the session directory is root's). -1 = keep cordon's ids.
  uid_t run_uid = static_cast<uid_t>(-1);
  gid_t run_gid = static_cast<gid_t>(-1);
};

// The running proxy. Move-only; destruction stops it (SIGTERM, then SIGKILL after a grace period)
// and reaps it, so no session outlives cordon's hold on its proxy.
struct NetproxyProcess {
  ChildProcess child;
  uint16_t host_port = 0;  // listen_on_host only
  std::string log_path;

  // The raw wait status if it has ended (reaped here), std::nullopt while it runs.
  std::optional<int> exited() { return child.exited(); }
  // SIGTERM, up to `grace` for it to exit, then SIGKILL; reaps. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000)) {
    child.stop(grace);
  }
};

// Where cordon-netproxy is: $CORDON_NETPROXY_BIN (as given), else beside the running cordon, in
// the build tree's netproxy/ next to launcher/, then CORDON_LIBEXECDIR. An error names every place
// looked at.
Result<std::string> find_netproxy_binary();

// Starts cordon-netproxy and waits for its ready byte. Its environment holds only cordon's
// SSL_CERT_FILE / SSL_CERT_DIR (where OpenSSL finds the host's trust store). The proxy execs with
// nothing but /dev/null, its log and a handoff socket; every other fd reaches it only once it is no
// longer dumpable (base/fd_handoff.h). The fds in `spec` stay the caller's: close them
// afterwards, so that the proxy holds the only copies (its death then refuses connections). An
// error names the failure and quotes the proxy's last diagnostics.
Result<NetproxyProcess> spawn_netproxy(const NetproxySpawn& spec);

// `cordon run`'s side, right after the child is released: waits on the report channel for the
// sockets the sandbox made (MsgKind::NetSockets, netns.h), starts the proxy with them in the host
// network namespace and closes cordon's copies. If the sandbox reports a setup error instead, that
// error is returned as it came; the proxy's own failures read "network: ...".
struct SandboxNet {
  std::string policy_path, session_id, log_path;
  std::string events_path;                // the session's events.jsonl (NetproxySpawn::events_path)
  std::string binary;                     // find_netproxy_binary(), looked up before the clone
  std::string ca_cert_path, ca_key_path;  // NetproxySpawn::ca_cert_path/ca_key_path
  std::string secrets;                    // NetproxySpawn::secrets
  int exfil_alarm_fd = -1;                // NetproxySpawn::exfil_alarm_fd
  int decider_fd = -1;                    // NetproxySpawn::decider_fd / decider_timeout
  std::string decider_timeout;
  bool decider_is_person = false;
  pid_t sandbox_pid = 0;
  uid_t run_uid = static_cast<uid_t>(-1);  // NetproxySpawn::run_uid/run_gid
  gid_t run_gid = static_cast<gid_t>(-1);
};
Result<NetproxyProcess> start_sandbox_netproxy(int channel, const SandboxNet& net);

// "cordon-netproxy died (SIGKILL) during the session: the sandbox lost its network ..." for a
// status from NetproxyProcess::exited() seen before cordon stopped it (any exit is a loss then).
std::string describe_netproxy_exit(int status);

}  // namespace cordon::launcher
