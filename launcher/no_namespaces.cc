// `cordon run --no-namespaces`: where user namespaces are unavailable, the program runs on the host
// with the preload shim (LD_PRELOAD: events and early network refusals), cordon-netproxy on the
// host's 127.0.0.1 as its explicit HTTP/SOCKS5 proxy, and Landlock + seccomp + no_new_privs, which
// need no namespace. ADVISORY: static binaries and raw syscalls bypass the shim's network rules.
#include "launcher/no_namespaces.h"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "launcher/channel.h"
#include "launcher/diagnostics.h"
#include "launcher/exit_status.h"
#include "launcher/limits/limits.h"
#include "launcher/plan.h"
#include "launcher/sandbox/env.h"
#include "launcher/sandbox/seccomp.h"
#include "launcher/session/session.h"
#include "launcher/session/shim_attribution.h"
#include "launcher/sidecars/decider_sidecar.h"
#include "launcher/sidecars/net_sidecar.h"
#include "launcher/sidecars/shim_setup.h"
#include "launcher/supervise.h"
#include "policy/loader.h"
#include "preload_shim/fs_rules.h"

extern char** environ;

namespace cordon::launcher {
namespace {

using Clock = std::chrono::steady_clock;

void add_unique(std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v) {
    if (x == s) {
      return;
    }
  }
  v.push_back(s);
}

// As root, the program must not run as the host's root: the user who ran sudo, else the
// workspace's owner, else nobody (the same choice the namespaced mode makes).
struct Ids {
  bool drop = false;
  uid_t uid = 0;
  gid_t gid = 0;
};
Ids choose_host_ids(const std::string& workspace) {
  Ids ids;
  if (::geteuid() != 0) {
    return ids;
  }
  ids.drop = true;
  ids.uid = ids.gid = 65534;
  const char* su = std::getenv("SUDO_UID");
  const char* sg = std::getenv("SUDO_GID");
  struct stat st {};
  if (su != nullptr && std::atoi(su) > 0) {
    ids.uid = static_cast<uid_t>(std::atoi(su));
    ids.gid = sg != nullptr && std::atoi(sg) > 0 ? static_cast<gid_t>(std::atoi(sg)) : 65534;
  } else if (::stat(workspace.c_str(), &st) == 0 && st.st_uid != 0) {
    ids.uid = st.st_uid;
    ids.gid = st.st_gid != 0 ? st.st_gid : 65534;
  }
  return ids;
}

struct ChildSpec {
  std::vector<std::string> argv, envp;
  std::string cwd;
  Ids ids;
  const Limits* limits;
  const SeccompProgram* seccomp;
  LandlockPlan landlock;
  int channel;  // the child's end of the report channel (CLOEXEC: EOF once the program runs)
};

[[noreturn]] void child_fail(int channel, const std::string& what) {
  send_msg(channel, MsgKind::SetupError, errno, what.c_str());
  ::_exit(kExitCordonFailed);
}

[[noreturn]] void child_main(const ChildSpec& c) {
  // The parent blocked the signals it supervises; the program starts with none blocked.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (!wait_for_release(c.channel)) {
    ::_exit(kExitCordonFailed);  // cordon died before placing us in the cgroup
  }
  if (::chdir(c.cwd.c_str()) != 0) {
    child_fail(c.channel, "chdir(\"" + c.cwd + "\"): " + std::strerror(errno));
  }
  if (auto s = c.limits->apply_rlimits_in_child(); !s.ok()) {
    child_fail(c.channel, s.error().to_string());
  }
  if (c.ids.drop) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(c.ids.gid, c.ids.gid, c.ids.gid) != 0 ||
        ::setresuid(c.ids.uid, c.ids.uid, c.ids.uid) != 0) {
      child_fail(c.channel, "setgroups/setresgid/setresuid(" + std::to_string(c.ids.uid) +
                                "): " + std::strerror(errno));
    }
  }
  // After the id change, which clears it: the program must not outlive cordon's watch.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::getppid() == 1) {
    ::_exit(kExitCordonFailed);
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    child_fail(c.channel, std::string("prctl(PR_SET_NO_NEW_PRIVS): ") + std::strerror(errno));
  }
  if (auto s = apply_landlock_in_program(c.landlock); !s.ok()) {
    child_fail(c.channel, "landlock: " + s.error().to_string());
  }
  if (auto s = install_seccomp(*c.seccomp); !s.ok()) {
    child_fail(c.channel, "seccomp: " + s.error().to_string());
  }
  std::vector<char*> argv, envp;
  for (const auto& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : c.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  environ = envp.data();
  ::execvpe(argv[0], argv.data(), envp.data());
  send_msg(c.channel, MsgKind::ExecError, errno);
  ::_exit(kExitCordonFailed);
}

Result<std::string> workspace_path(const policy::Policy& pol) {
  std::string ws = pol.filesystem.workspace.empty() ? "." : pol.filesystem.workspace;
  char buf[PATH_MAX];
  if (::realpath(ws.c_str(), buf) == nullptr) {
    return sys_error("workspace \"" + ws + "\": realpath", "check that it exists");
  }
  return std::string(buf);
}

// Without a pid namespace nothing ends what the program left running (`cmd &`, a daemon that
// double-forked, a shell's child at the timeout), and without a cgroup (rootless) nothing finds
// it: cordon is the subreaper of the run, so every orphan comes to it, and once the program has
// ended each process reparented here, except `keep` (the proxy), is killed and reaped. Bounded:
// a tree still forking after kMaxRounds rounds is left to the cgroup, when there is one.
void end_leftovers(pid_t keep) {
  constexpr int kMaxRounds = 50;
  const std::string self = std::to_string(::getpid());
  for (int round = 0; round < kMaxRounds; ++round) {
    std::vector<pid_t> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) {
        continue;
      }
      std::ifstream st(e.path() / "stat");
      std::string line;
      std::getline(st, line);
      auto close = line.rfind(')');  // the command name may hold spaces and parentheses
      if (close == std::string::npos) {
        continue;
      }
      std::istringstream rest(line.substr(close + 1));
      std::string state, ppid;
      rest >> state >> ppid;
      pid_t pid = static_cast<pid_t>(std::stol(name));
      if (ppid == self && pid != keep) {
        found.push_back(pid);
      }
    }
    if (found.empty()) {
      return;
    }
    for (pid_t pid : found) {
      ::kill(pid, SIGKILL);
    }
    for (pid_t pid : found) {
      ::waitpid(pid, nullptr, 0);
    }
  }
}

}  // namespace

Result<std::string> shim_fs_rules(const policy::FilesystemPolicy& fs, const std::string& workspace,
                                  bool workspace_writable) {
  namespace rules = preload_shim::fs_rules;
  if (workspace.find('\n') != std::string::npos) {
    return make_error("workspace \"" + workspace + "\" contains a newline",
                      "the shim's file rules cannot name it; rename the directory");
  }
  std::string out = std::string(rules::kHeader) + "\n";
  out += "workspace " + workspace + "\n";
  out += workspace_writable ? "mode rw\n" : "mode ro\n";
  out += fs.deny_style == policy::DenyStyle::Hide ? "style hide\n" : "style eacces\n";
  size_t count = 0;
  for (auto [field, pats] :
       {std::pair<const char*, const std::vector<policy::PathPattern>*>{"deny", &fs.deny},
        {"deny_write", &fs.deny_write},
        {"protect", &fs.protect}}) {
    for (size_t i = 0; i < pats->size(); ++i) {
      const auto& p = (*pats)[i];
      if (p.expanded.find('\n') != std::string::npos) {
        return make_error("filesystem." + std::string(field) + "[" + std::to_string(i) + "] \"" +
                              p.text + "\" contains a newline",
                          "the shim's file rules are line-based; remove it in --no-namespaces");
      }
      out += std::string(field) + (p.absolute ? " a " : " r ") + p.expanded + "\n";
      ++count;
    }
  }
  if (count > rules::kMaxRules || out.size() > rules::kMaxBytes) {
    return make_error(
        "filesystem.deny/deny_write/protect hold " + std::to_string(count) + " patterns (" +
            std::to_string(out.size()) + " bytes); the shim of --no-namespaces takes at most " +
            std::to_string(rules::kMaxRules) + " (" + std::to_string(rules::kMaxBytes) + " bytes)",
        "shorten the lists, or run with namespaces (cordon-fs has no such bound)");
  }
  return out;
}

LandlockPlan no_namespaces_landlock(const policy::Policy& pol, const std::string& workspace,
                                    bool workspace_writable, const std::string& shim_library) {
  LandlockPlan ll;
  ll.abi = landlock_abi();
  ll.enabled = ll.abi > 0;
  ll.restrict_reads = true;
  for (const auto& d : system_dirs()) {
    if (d != "/") {
      add_unique(ll.read_paths, d);
    }
  }
  for (const char* p : {"/etc", "/proc", "/sys", "/dev", "/run/systemd/resolve"}) {
    add_unique(ll.read_paths, p);
  }
  add_unique(ll.read_paths, workspace);
  add_unique(ll.read_paths, shim_library);
  for (const auto& p : pol.filesystem.read) {
    if (p.absolute && !p.has_glob) {
      add_unique(ll.read_paths, p.expanded);
    }
  }
  for (const char* p : {"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts", "/dev/shm",
                        "/dev/random", "/dev/urandom", "/proc"}) {
    add_unique(ll.write_paths, p);
  }
  // Landlock only grants: a read-only workspace beneath /tmp would be writable through a /tmp
  // rule. Then the program gets only its private TMPDIR (run_no_namespaces makes it).
  for (const char* p : {"/tmp", "/var/tmp"}) {
    std::string t = p;
    if (workspace_writable || !(workspace == t || workspace.rfind(t + "/", 0) == 0)) {
      add_unique(ll.write_paths, t);
    }
  }
  if (workspace_writable) {
    add_unique(ll.write_paths, workspace);
  }
  for (const auto& p : pol.filesystem.write) {
    if (p.absolute && !p.has_glob) {
      add_unique(ll.write_paths, p.expanded);
    }
  }
  return ll;
}

int run_no_namespaces(const RunOptions& opts, const policy::Policy& pol) {
  auto t0 = Clock::now();
  say(std::string_view(kNoNamespacesWarning).substr(std::string_view("cordon: ").size()));

  // Plan, all before anything starts.
  auto ws = workspace_path(pol);
  if (!ws.ok()) {
    return fail(ws.error().to_string());
  }
  // The values would be the program's to read: it runs on the host as cordon's own user (or
  // its dropped id), and without a session CA nothing inspects the requests that carry them.
  if (!pol.network.credentials.empty()) {
    return fail(
        "network.credentials: --no-namespaces cannot keep a credential's value from the "
        "program (it runs on the host, with no TLS inspection to swap a placeholder); run "
        "without --no-namespaces, or pass the variable with process.env.pass");
  }
  bool writable = pol.filesystem.mode == policy::WorkspaceMode::Rw;
  if (pol.filesystem.mode == policy::WorkspaceMode::Cow) {
    say("--no-namespaces: copy-on-write needs a mount namespace; the workspace is read-only "
        "(use --mode rw to let the program write it)");
  }
  auto library = find_preload_library();
  if (!library.ok()) {
    return fail(library.error().to_string());
  }
  LandlockPlan ll = no_namespaces_landlock(pol, *ws, writable, *library);
  if (!pol.process.exec_allow.empty()) {
    if (!ll.enabled) {
      return fail(
          "process.exec_allow is set, but this kernel has no Landlock to enforce it (Linux >= "
          "5.13 with CONFIG_SECURITY_LANDLOCK=y and \"landlock\" in lsm=); remove "
          "process.exec_allow");
    }
    auto paths = exec_allow_paths(pol.process, *ws);
    if (!paths.ok()) {
      return fail(paths.error().to_string());
    }
    ll.exec_restricted = true;
    ll.exec_paths = *paths;
  }
  if (!ll.enabled) {
    say("--no-namespaces: this kernel has no Landlock: file rules are not enforced");
  }
  auto seccomp = compile_seccomp(pol.process.seccomp);
  if (!seccomp.ok()) {
    return fail("seccomp: " + seccomp.error().to_string());
  }
  char cwd_buf[PATH_MAX];
  std::string cwd = ::getcwd(cwd_buf, sizeof cwd_buf) != nullptr ? cwd_buf : *ws;
  Ids ids = choose_host_ids(*ws);

  auto session = Session::create(pol, opts.argv, *ws);
  if (!session.ok()) {
    return fail("session record: " + session.error().to_string());
  }
  auto limits = Limits::create(pol.process, session->id());
  if (!limits.ok()) {
    return fail("limits: " + limits.error().to_string());
  }
  SessionEnd end;
  end.limits_backend = limits->describe() + "; advisory mode (--no-namespaces)";
  auto finish = [&](int code) {
    end.exit_code = code;
    end.duration = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    session->close(end, opts.quiet);
    return code;
  };
  auto setup_failed = [&](const std::string& msg) {
    end.error = msg;
    return finish(fail(msg));
  };

  // The collector: the program runs as cordon's user (or the dropped id), so the socket lives in
  // the session directory when that id can reach it, else in a root-made directory under /run.
  IdPlan shim_ids;
  shim_ids.rootless = !ids.drop;
  shim_ids.uid = ids.uid;
  shim_ids.gid = ids.gid;
  auto shim = prepare_shim_from_parent(session->paths().dir, session->paths().events, session->id(),
                                       record::RecordLimits::from(pol.record), shim_ids);
  if (!shim.ok()) {
    return setup_failed("preload shim: " + shim.error().to_string());
  }
  // The library: a copy the dropped id can read, when it could not read the original.
  std::string socket_path, preload = *library;
  if (*shim) {
    socket_path = (*shim)->socket_path();
    preload = (*shim)->library_path();
  }
  add_unique(ll.read_paths, preload);

  // The proxy, for every connection the program makes (the shim refuses direct ones).
  std::optional<NetproxyProcess> proxy;
  DeciderChannel decider;  // --decider / --decider-socket: the proxy's channel to it
  std::map<std::string, std::string> extra_env;
  if (*shim) {
    extra_env["LD_PRELOAD"] = preload;
    extra_env["CORDON_SHIM_SOCK"] = socket_path;
    // Landlock cannot express "everything in the workspace except **/.env": the shim decides
    // filesystem.deny/deny_write/protect on hooked calls instead (advisory, like the rest).
    auto fs_rules = shim_fs_rules(pol.filesystem, *ws, writable);
    if (!fs_rules.ok()) {
      return setup_failed(fs_rules.error().to_string());
    }
    extra_env[preload_shim::fs_rules::kEnvName] = *fs_rules;
  }
  extra_env["CORDON_SHIM_DENY_NET"] = "1";
  extra_env["CORDON_SESSION"] = session->id();
  if (!pol.network.allow.empty() || opts.decider || opts.decider_socket) {
    NetproxySpawn spec;
    if (opts.decider || opts.decider_socket) {
      auto d = opts.decider ? start_decider_command(*opts.decider)
                            : connect_decider_socket(*opts.decider_socket);
      if (!d.ok()) {
        return setup_failed("decider: " + d.error().to_string());
      }
      decider = std::move(d).value();
      spec.decider_fd = decider.proxy_end.get();
      spec.decider_timeout = opts.decider_timeout.value_or("");
    }
    spec.policy_path = session->paths().policy;
    spec.session_id = session->id();
    spec.events_path = session->paths().events;
    spec.listen_on_host = true;
    spec.log_path = session->paths().dir + "/netproxy.log";
    if (ids.drop) {
      // Not the program's ids: here the program shares the host's pid namespace with the proxy.
      spec.run_uid = spec.run_gid = 65534;
    }
    auto p = spawn_netproxy(spec);
    if (!p.ok()) {
      return setup_failed("network: " + p.error().to_string());
    }
    proxy.emplace(std::move(*p));
    decider.proxy_end.reset();  // the proxy holds the only copy
    std::string port = std::to_string(proxy->host_port);
    std::string http = "http://127.0.0.1:" + port;
    std::string socks = "socks5h://127.0.0.1:" + port;
    for (const char* k : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) {
      extra_env[k] = http;
    }
    extra_env["ALL_PROXY"] = extra_env["all_proxy"] = socks;
    extra_env["NO_PROXY"] = extra_env["no_proxy"] = "";
  }
  // A read-only workspace beneath /tmp left /tmp out of the write rules: a private TMPDIR instead.
  std::string private_tmp;
  if (ll.enabled &&
      std::find(ll.write_paths.begin(), ll.write_paths.end(), "/tmp") == ll.write_paths.end()) {
    private_tmp = "/tmp/cordon-tmp-" + session->id();
    if (::mkdir(private_tmp.c_str(), 0700) != 0 ||
        (ids.drop && ::chown(private_tmp.c_str(), ids.uid, ids.gid) != 0)) {
      return setup_failed("mkdir(\"" + private_tmp + "\"): " + std::strerror(errno));
    }
    ll.write_paths.push_back(private_tmp);
    extra_env["TMPDIR"] = private_tmp;
    say("--no-namespaces: the read-only workspace is beneath /tmp, so only TMPDIR=" + private_tmp +
        " is writable there");
  }
  EnvNotes env_notes;
  std::vector<std::string> envp =
      build_environment(pol.process.env, environ, extra_env, &env_notes);
  report_env_notes(env_notes, session->events(), opts.quiet);
  if (!*shim) {
    say("--no-namespaces: CORDON_SHIM=off: nothing refuses direct connections, and "
        "filesystem.deny/deny_write/protect are not applied inside the workspace");
  }

  auto channel = make_channel();
  if (!channel.ok()) {
    return setup_failed(channel.error().to_string());
  }
  // Like system(3), the terminal's ^C and ^\ are the program's to handle (it shares cordon's
  // terminal and process group): ignored here, not forwarded. The rest are supervise()'s:
  // blocked before the collector's thread starts, so no thread takes them in their default way.
  sigset_t supervised = supervised_signals(), old_mask;
  sigdelset(&supervised, SIGINT);
  sigdelset(&supervised, SIGQUIT);
  ::sigprocmask(SIG_BLOCK, &supervised, &old_mask);
  if (*shim) {
    if (auto s = (*shim)->start(); !s.ok()) {
      ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      return setup_failed("preload shim: " + s.error().to_string());
    }
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  ChildSpec spec{opts.argv, envp, cwd, ids, &*limits, &*seccomp, ll, channel->child.get()};
  pid_t pid = ::fork();
  if (pid < 0) {
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return setup_failed(std::string("fork(): ") + std::strerror(errno));
  }
  if (pid == 0) {
    try {
      child_main(spec);
    } catch (...) {
    }
    ::_exit(kExitCordonFailed);
  }
  channel->child.reset();
  struct sigaction ign {
  }, old_int{}, old_quit{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ign, &old_int);
  ::sigaction(SIGQUIT, &ign, &old_quit);
  auto restore_signals = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGQUIT, &old_quit, nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  };
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  Status placed = pidfd ? Status{} : sys_error("pidfd_open(the program) (Linux >= 5.3)");
  if (auto s = placed.ok() ? limits->add_process(pid) : Status{}; !s.ok()) {
    placed = make_error("limits: " + s.error().to_string());
  }
  if (placed.ok()) {
    placed = release_child(channel->parent.get());
  }
  if (!placed.ok()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    restore_signals();
    return setup_failed(placed.error().to_string());
  }
  if (auto s = session->started(pid, end.limits_backend); !s.ok()) {
    say("session record: " + s.error().to_string());
  }

  // The watch a sandbox's init gets: report channel, forwarded signals, the wall-clock limit
  // (SIGTERM, then SIGKILL after the grace). The program is the watched child here, so its own
  // wait status is the one supervise() calls init's.
  SuperviseSpec watch;
  watch.init_pid = pid;
  watch.pidfd = pidfd.get();
  watch.channel = channel->parent.get();
  watch.signals = supervised;
  watch.timeout = pol.process.timeout;
  watch.kill_grace = pol.process.kill_grace;
  watch.limits = &*limits;
  Outcome out = supervise(watch);
  end_leftovers(proxy ? proxy->child.pid() : -1);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  restore_signals();
  if (*shim) {
    (*shim)->stop();
  }
  if (!private_tmp.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(private_tmp, ec);
  }
  if (proxy) {
    proxy->stop();
    // Its records are all in now: net.connect -> pid/exe/argv (shim_attribution.h).
    (void)record_connection_attribution(session->paths().events, session->events());
  }
  end.usage = limits->usage();

  ExitFacts facts;
  facts.command = opts.argv[0];
  facts.timeout = pol.process.timeout;
  facts.memory = pol.process.memory;
  return finish(exit_status(out, facts, end));
}

}  // namespace cordon::launcher
