// The child side of the clone: one line per step, in the order the kernel needs them.
#include "launcher/sandbox/contain.h"

#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "launcher/channel.h"
#include "launcher/run_options.h"
#include "launcher/sandbox/decoys.h"
#include "launcher/sandbox/exec.h"
#include "launcher/sandbox/exec_server.h"
#include "launcher/sandbox/init.h"
#include "launcher/sandbox/mounts.h"
#include "launcher/sandbox/namespaces.h"
#include "launcher/sandbox/netns.h"
#include "launcher/sandbox/pty.h"
#include "launcher/sandbox/userns.h"

namespace cordon::launcher {
namespace {

// If cordon dies, the sandbox dies (nothing could enforce its timeout any more). Re-armed after
// the id switch, which clears it; the channel tells whether cordon died before it was armed.
Status die_with_parent(int report_fd) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    return sys_error("prctl(PR_SET_PDEATHSIG, SIGKILL)");
  }
  pollfd p{report_fd, 0, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & POLLHUP) != 0) {
    ::_exit(kExitCordonFailed);
  }
  return {};
}

// A session of its own: signals the host's terminal generates for cordon's process group (^C
// with a piped stdin, SIGWINCH, SIGHUP) must reach the program once, through cordon's forwarding,
// not a second time through init.
Status leave_host_session() {
  if (::setsid() < 0) {
    return sys_error("setsid() in the sandbox's init");
  }
  return {};
}

// The terminal: a pty from the sandbox's own devpts; its master goes to cordon.
Result<UniqueFd> open_terminal(const ContainContext& c) {
  if (!c.plan.tty) {
    return UniqueFd();
  }
  ASSIGN_OR_RETURN(PtyPair pty, open_pty_in_child(c.plan.window));
  if (!send_msg(c.report_fd, MsgKind::PtyMaster, 0, nullptr, pty.master.get())) {
    return sys_error("sendmsg(pty master to cordon)");
  }
  return std::move(pty.slave);
}

// Right before the program is spawned, with network on or canaries planted: blocks until cordon
// sends the second release byte, once the proxy serving the capture sockets is ready (so the
// program's first connection never waits on a proxy that may yet fail to start) and the decoys
// are known to it (so no open of one goes unmatched). Cordon dying or failing the launch instead
// ends the wait with an error: the program does not start without them.
Status wait_for_program_release(const ContainContext& c) {
  if (!c.plan.network && c.plan.decoys.empty()) {
    return {};
  }
  if (!wait_for_release(c.report_fd)) {
    return make_error(
        "cordon did not report cordon-netproxy and the canaries' watch ready; the program is not "
        "started");
  }
  return {};
}

Status contain_steps(const ContainContext& c) {
  if (!wait_for_release(c.report_fd)) {
    ::_exit(kExitCordonFailed);  // cordon died before writing our id maps
  }
  TRY(leave_host_session());
  // Before the id switch: as root the session directory (0700, root's) is out of reach after it.
  ASSIGN_OR_RETURN(CowLayers cow, open_cow_layers_in_child(c.plan));
  TRY(become_sandbox_user_in_child(c.plan.ids));
  TRY(die_with_parent(c.report_fd));
  TRY(enter_cgroup_namespace_in_child());
  TRY(set_hostname_in_child(c.plan.hostname));
  TRY(bring_up_loopback_in_child());
  TRY(capture_network_in_child(c.plan.network, c.plan.proxy_env, c.plan.loopback_services,
                               c.report_fd));
  TRY(compose_root_in_child(c.plan, std::move(cow)));
  TRY(plant_decoys_in_child(c.plan, c.report_fd));
  ASSIGN_OR_RETURN(UniqueFd slave, open_terminal(c));
  TRY(prepare_init_signals());
  TRY(wait_for_program_release(c));
  if (c.exec_fd >= 0) {
    run_exec_server({c.plan, c.limits, c.seccomp, c.report_fd, c.exec_fd, c.host_mask});
  }
  ASSIGN_OR_RETURN(pid_t program, spawn_program({c.plan, c.limits, c.seccomp, c.report_fd,
                                                 slave.get(), c.host_mask}));
  slave.reset();  // only the program holds the terminal: its hangup must reach cordon
  run_init(c.report_fd, program);
}

}  // namespace

void contain(const ContainContext& c) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  Status s = contain_steps(c);
  const Error& e = s.error();
  send_msg(c.report_fd, MsgKind::SetupError, e.code, e.to_string().c_str());
  ::_exit(kExitCordonFailed);
}

}  // namespace cordon::launcher
