// `cordon run`: load -> plan -> open session -> start sidecars -> clone and release -> supervise
// -> exit status, one call a stage in run_command. Cordon's own failures end it with exit 125.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "base/hardening.h"
#include "launcher/agent_plan.h"
#include "launcher/canaries.h"
#include "launcher/channel.h"
#include "launcher/commands.h"
#include "launcher/detach.h"
#include "launcher/diagnostics.h"
#include "launcher/effective_policy.h"
#include "launcher/exit_status.h"
#include "launcher/host_program.h"
#include "launcher/limits/cgroup_warmup.h"
#include "launcher/limits/limits.h"
#include "launcher/no_namespaces.h"
#include "launcher/plan.h"
#include "launcher/sandbox/contain.h"
#include "launcher/sandbox/landlock.h"
#include "launcher/sandbox/mounts.h"
#include "launcher/sandbox/namespaces.h"
#include "launcher/sandbox/netns.h"
#include "launcher/sandbox/seccomp.h"
#include "launcher/sandbox/userns.h"
#include "launcher/session/detached.h"
#include "launcher/session/net_summary.h"
#include "launcher/session/prune.h"
#include "launcher/session/session.h"
#include "launcher/session/shim_attribution.h"
#include "launcher/session_control.h"
#include "launcher/sidecars/asker.h"
#include "launcher/sidecars/canary_watch.h"
#include "launcher/sidecars/cowfs_sidecar.h"
#include "launcher/sidecars/credentials.h"
#include "launcher/sidecars/decider_sidecar.h"
#include "launcher/sidecars/fs_views.h"
#include "launcher/sidecars/session_ca.h"
#include "launcher/sidecars/shim_setup.h"
#include "launcher/supervise.h"
#include "policy/loader.h"

namespace cordon::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Bound on the walk of upper/ that counts the changes for the summary.
constexpr uint64_t kMaxCowCount = 100000;

// cow mode: overlayfs refuses an upper layer inside its own lower (and the session record would
// show up, and grow, inside the sandbox's view of the workspace). Checked before the session
// directory is made, so the real workspace gets no session directory either.
std::optional<std::string> session_store_in_workspace(const std::string& workspace) {
  std::error_code ec;
  std::string root = std::filesystem::weakly_canonical(sessions_root(), ec).string();
  if (ec) {
    root = sessions_root();
  }
  if (root == workspace || root.rfind(workspace + "/", 0) == 0) {
    return "the session store " + root + " is inside the workspace " + workspace +
           ": the copy-on-write layer cannot live inside the directory it lies over; set "
           "CORDON_STATE_DIR (or XDG_STATE_HOME) to a directory outside the workspace, pass "
           "--workspace with a project directory, or use --mode ro or rw";
  }
  return std::nullopt;
}

// What was decided before anything exists on the host: the plan and what it needs beside it.
struct Planned {
  LaunchPlan plan;
  std::string netproxy_bin;  // empty without network.allow
  SeccompProgram seccomp;
  std::string cow_fallback;        // why cow runs on kernel overlayfs; "" = through cordon-fs
  std::string no_fs_views_reason;  // why there are no cordon-fs views; "" = there are
};

// The runtime side of one run, beside the plan: the session record, the limits and the sidecars.
// finish() stops the sidecars and closes the record; every path out of run_command ends there
// once the session exists.
struct Wiring {
  const RunOptions& opts;
  Clock::time_point t0;
  Session session;
  Limits limits;
  SessionEnd end;
  CowFsProcess cowfs;               // cow mode through FUSE
  std::vector<CowFsProcess> views;  // cordon-fs views of read-write directories (fs_views.h)
  std::optional<NetproxyProcess> netproxy;  // network.allow
  std::unique_ptr<ShimSession> shim;        // the preload shim's collector, when the shim runs
  InspectionCa ca;                          // network.inspect / network.rules: the proxy's CA
  std::string secrets;       // network.credentials' real values, for the proxy only (credentials.h)
  CanaryWatch canary_watch;  // opens of the canaries' decoy files (canary_watch.h)
  // network.on_exfil: kill: cordon-netproxy writes a byte to exfil_alarm_w on each net.exfil.
  UniqueFd exfil_alarm, exfil_alarm_w;
  DeciderChannel decider;  // --decider / --decider-socket (decider_sidecar.h), or --ask's asker
  UniqueFd ask_tty;        // --ask: cordon's controlling terminal, until the asker takes it
  UniqueFd ask_hold;       // --ask: the asker's input hold (SuperviseSpec::input_hold)
  std::unique_ptr<SessionControl> control;  // --detach: `cordon exec`'s way in

  int finish(const Planned& p, int code);
  int setup_failed(const Planned& p, const std::string& msg) {
    end.error = msg;
    return finish(p, fail(msg));
  }
};

int Wiring::finish(const Planned& p, int code) {
  end.exit_code = code;
  finish_network(netproxy, session, end);
  canary_watch.drain(session.events());  // opens the loop had not read yet
  end.canaries_touched.insert(canary_watch.touched().begin(), canary_watch.touched().end());
  end.duration = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  cowfs.begin_stop();  // the daemon unmounts while the changes are counted
  for (auto& v : views) {
    v.begin_stop();
  }
  if (p.plan.mode == policy::WorkspaceMode::Cow && end.error.empty()) {
    // What the program left in the copy-on-write layer; the workspace itself is untouched.
    if (p.plan.cow_fuse) {
      end.cow_changed = count_cowfs_changes(p.plan.workspace, session.paths().upper);
    } else {
      CowChanges c = count_cow_changes(session.paths().upper, p.plan.workspace, kMaxCowCount);
      end.cow_changed = c.count;
      end.cow_changed_more = c.more;
      end.cow_fallback = p.cow_fallback;
    }
    end.cow_upper = session.paths().upper;
  }
  if (CowFsExit x = cowfs.stop(); x.died_early) {
    end.cow_daemon_died = x.how;
  }
  for (size_t i = 0; i < views.size(); ++i) {
    if (CowFsExit x = views[i].stop(); x.died_early) {
      end.view_daemon_died = p.plan.views[i].dir + " (" + x.how + ")";
    }
  }
  if (shim) {
    // Every writer has stopped (proxy, cordon-fs, the shim's collector): connections and
    // filesystem refusals -> the pid/exe/argv the shim saw.
    (void)record_connection_attribution(session.paths().events, session.events());
  }
  session.close(end, opts.quiet);
  return code;
}

// Load: the policy file (or the embedded default) plus the command line's overrides, "~" as the
// home of the user the sandbox runs as.
Result<policy::Policy> load(const RunOptions& opts, const HostFacts& host) {
  try {
    return load_effective_policy(opts, host);
  } catch (const policy::PolicyError& e) {
    return make_error(e.what());
  }
}

bool asks_decider(const RunOptions& opts) {
  return opts.decider || opts.decider_socket || opts.ask;
}

// --decider CMD / --decider-socket PATH: the channel the proxy will get. Opened after the clone,
// by cordon in the host's namespaces, so that no process of the sandbox ever holds its fd.
Status open_decider(const RunOptions& opts, Wiring& w) {
  if (opts.decider) {
    ASSIGN_OR_RETURN(w.decider, start_decider_command(*opts.decider));
  } else if (opts.decider_socket) {
    ASSIGN_OR_RETURN(w.decider, connect_decider_socket(*opts.decider_socket));
  } else if (opts.ask) {
    AskOptions ask;
    ask.policy_file = opts.policy_file.value_or("");
    ask.session_id = w.session.id();
    ask.events_path = w.session.paths().events;
    ask.timeout = std::chrono::seconds(60);
    if (opts.ask_timeout) {
      if (auto t = policy::parse_duration(*opts.ask_timeout)) {
        ask.timeout = *t;
      }
    }
    ASSIGN_OR_RETURN(Asker asker, start_asker(std::move(w.ask_tty), ask));
    w.decider = std::move(asker.channel);
    w.ask_hold = std::move(asker.hold);
  }
  return {};
}

// Plan: everything decided and validated before any namespace exists.
Result<Planned> plan(const policy::Policy& pol, const RunOptions& opts, HostFacts host) {
  Planned p;
  // cow mode goes through cordon-fs where this host allows FUSE; else kernel overlayfs, said so.
  p.cow_fallback = cowfs_unavailable_reason();
  host.cow_fuse = p.cow_fallback.empty();
  // Read-write directories with rules inside go through cordon-fs views, with no fallback.
  host.no_fs_views_reason = fs_views_unavailable_reason();
  host.fs_views = host.no_fs_views_reason.empty();
  p.no_fs_views_reason = host.no_fs_views_reason;
  auto built = build_plan(pol, detached_plan_argv(opts), host, asks_decider(opts));
  if (!built.ok()) {
    return make_error(built.error().to_string());
  }
  p.plan = std::move(built).value();
  // network.allow: found now, so a missing proxy never starts the program.
  if (p.plan.network) {
    auto bin = find_netproxy_binary();
    if (!bin.ok()) {
      return make_error("network: " + bin.error().to_string());
    }
    p.netproxy_bin = *bin;
  }
  if (auto s = plan_landlock(pol.process, p.plan); !s.ok()) {
    return make_error(s.error().to_string());
  }
  // The user-namespace filter reports to cordon, which records each refusal (userns_listener.h).
  // --detach: each exec'd program would bring a listener of its own, so there the filter
  // refuses a user namespace with EPERM itself, unrecorded.
  auto seccomp = compile_seccomp(pol.process.seccomp, {pol.process.nested_sandbox, !opts.detach});
  if (!seccomp.ok()) {
    return make_error("seccomp: " + seccomp.error().to_string());
  }
  p.seccomp = std::move(seccomp).value();
  if (p.plan.mode == policy::WorkspaceMode::Cow) {
    if (auto why = session_store_in_workspace(p.plan.workspace)) {
      return make_error(*why);
    }
  }
  return p;
}

// Open session: the record (policy.json, events.jsonl) and the limits' cgroup.
Result<std::unique_ptr<Wiring>> open_session(const policy::Policy& pol, const RunOptions& opts,
                                             const Planned& p, Clock::time_point t0,
                                             const policy::Policy* learned_from) {
  auto session = Session::create(pol, opts.argv, p.plan.workspace, learned_from);
  if (!session.ok()) {
    return make_error("session record: " + session.error().to_string());
  }
  report_env_notes(p.plan.env_notes, session->events(), opts.quiet);
  auto limits = Limits::create(pol.process, session->id());
  if (!limits.ok()) {
    return make_error("limits: " + limits.error().to_string());
  }
  auto w = std::unique_ptr<Wiring>(new Wiring{opts,
                                              t0,
                                              std::move(session).value(),
                                              std::move(limits).value(),
                                              {},
                                              {},
                                              {},
                                              {},
                                              {},
                                              {},
                                              {},
                                              {},
                                              {},
                                              {}});
  w->end.limits_backend = w->limits.describe();
  if (learned_from != nullptr) {
    // Said even with --quiet: a run with the network open must never look like an ordinary one.
    say("LEARN MODE: network to any public host name is allowed and recorded (every name is "
        "looked up through the host's resolver); private, loopback and metadata addresses, raw "
        "addresses, network.deny, canaries and credentials stay refused; " +
        std::string(pol.filesystem.mode == policy::WorkspaceMode::Ro
                        ? "the workspace stays read-only"
                        : "workspace writes stay copy-on-write") +
        "; run `cordon policy suggest " + w->session.id() + "` afterwards");
  }
  return w;
}

// --learn: the policy as the user asked for it, kept in the session for suggestions.
Result<std::optional<policy::Policy>> load_requested(const RunOptions& opts,
                                                     const HostFacts& host) {
  if (!opts.learn) {
    return std::optional<policy::Policy>();
  }
  if (opts.no_namespaces) {
    return make_error(
        "--learn cannot be used with --no-namespaces: learn mode opens the network to every "
        "public name and relies on the sandbox's own network namespace and proxy to keep "
        "private and metadata addresses out, which the advisory mode does not have");
  }
  try {
    policy::Policy p = load_requested_policy(opts, host);
    if (p.filesystem.mode == policy::WorkspaceMode::Rw) {
      return make_error(
          std::string("--learn cannot be used with ") +
          (opts.mode ? "--mode rw" : "filesystem.mode \"rw\"") +
          ": a learning run keeps the workspace copy-on-write (cow, the default) or read-only, "
          "so that what it wrote can be reviewed with `cordon diff` before it lands");
    }
    return std::optional<policy::Policy>(std::move(p));
  } catch (const policy::PolicyError& e) {
    return make_error(e.what());
  }
}

// The policy's canaries: decoys into the plan, their values behind the credentials' for the
// proxy, their files watched; with network.on_exfil: kill, the proxy's alarm pipe.
Status plant_session_canaries(const policy::Policy& pol, LaunchPlan& plan, Wiring& w, bool quiet) {
  ASSIGN_OR_RETURN(PlantedCanaries c, plant_canaries(pol, plan));
  if (!c.handover.empty()) {
    nlohmann::json all = w.secrets.empty() ? nlohmann::json::array()
                                           : nlohmann::json::parse(w.secrets, nullptr, false);
    for (auto& e : c.handover) {
      all.push_back(std::move(e));
    }
    w.secrets = all.dump();
  }
  if (pol.network.kill_on_exfil) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return sys_error("pipe2() for network.on_exfil");
    }
    w.exfil_alarm.reset(fds[0]);
    w.exfil_alarm_w.reset(fds[1]);
  }
  if (!quiet) {
    if (!c.planted.empty()) {
      std::string names;
      for (const auto& n : c.planted) {
        names += (names.empty() ? "" : "; ") + n;
      }
      say("canaries: " + names + " (decoys: reading one is recorded, sending one is refused)");
    }
    for (const auto& n : c.notes) {
      say(n);
    }
  }
  return {};
}

// Start sidecars: the copy-on-write layer and cordon-fs, the views, the shim's collector socket.
// The plan takes the session's paths here, its last change: it is const from then on.
Status start_sidecars(const policy::Policy& pol, Planned& p, Wiring& w) {
  LaunchPlan& plan = p.plan;
  const bool quiet = w.opts.quiet;
  // Before any view: a cordon-fs view of a state directory serves what is there at its start.
  if (auto s = create_agent_state_from_parent(plan); !s.ok()) {
    return make_error("agent state (--agent " + pol.extends + "): " + s.error().to_string());
  }
  if (plan.mode == policy::WorkspaceMode::Cow) {
    plan.cow_upper = w.session.paths().upper;
    plan.cow_work = w.session.paths().work;
    if (auto s = prepare_cow_layers_from_parent(plan); !s.ok()) {
      return make_error("copy-on-write layer: " + s.error().to_string());
    }
    auto view = start_cow_backend(w.session, plan);
    if (!view.ok()) {
      return make_error("copy-on-write workspace: " + view.error().to_string());
    }
    w.cowfs = std::move(view).value();
    if (!plan.cow_fuse && !quiet) {
      say("copy-on-write through kernel overlayfs, not cordon-fs (" + p.cow_fallback +
          "): deny rules cover only files present now; no live snapshot/rollback");
    }
  }
  auto views = start_fs_views(w.session, plan);
  if (!views.ok()) {
    return make_error(views.error().to_string());
  }
  w.views = std::move(views).value();
  if (!quiet) {
    for (const auto& d : plan.unshown_state) {
      say("--agent " + pol.extends + ": " + d +
          " is not shown: the rules inside it (its settings and hooks never writable) hold "
          "only through a cordon-fs view, and " +
          p.no_fs_views_reason + "; the agent's state stays in the sandbox and is gone at exit");
    }
    for (const auto& g : plan.absent_write_grants) {
      say("filesystem.write: " + g +
          " does not exist, so it is not shown: what the program writes there stays in the "
          "sandbox and is gone at exit (create it first to keep it)");
    }
    for (const auto& n : plan.grant_notes) {
      say(n);
    }
  }
  if (!plan.write_warning.empty()) {
    w.end.workspace_unwritable = plan.write_warning;
    if (!quiet) {
      say(w.end.workspace_unwritable);
    }
  }
  const SessionPaths& paths = w.session.paths();
  auto ca = trust_inspection_ca(pol.network, paths.dir, plan);
  if (!ca.ok()) {
    return make_error("network.inspect: " + ca.error().to_string());
  }
  w.ca = std::move(ca).value();
  auto secrets = plant_placeholders(pol.network, plan);
  if (!secrets.ok()) {
    return std::move(secrets).error();
  }
  w.secrets = std::move(secrets).value();
  if (auto s = plant_session_canaries(pol, plan, w, quiet); !s.ok()) {
    return make_error("canaries: " + s.error().to_string());
  }
  // The preload shim: library + collector socket into the plan now, collector thread after clone.
  auto shim = prepare_shim_from_parent(paths.dir, paths.events, w.session.id(),
                                       record::RecordLimits::from(pol.record), plan.ids);
  if (!shim.ok()) {
    return make_error("preload shim: " + shim.error().to_string());
  }
  w.shim = std::move(shim).value();
  if (w.shim) {
    if (auto s = w.shim->add_to_plan(plan); !s.ok()) {
      return make_error("preload shim: " + s.error().to_string());
    }
  }
  return {};
}

// The cloned init until it is released: a setup step that fails after the clone kills and reaps
// it. Released once supervise() owns its end.
class Unreleased {
 public:
  explicit Unreleased(ClonedChild& c) : child_(&c) {}
  Unreleased(const Unreleased&) = delete;
  Unreleased& operator=(const Unreleased&) = delete;
  ~Unreleased() {
    if (child_ != nullptr) {
      ::kill(child_->pid, SIGKILL);
      int st;
      ::waitpid(child_->pid, &st, 0);
    }
  }
  void release() { child_ = nullptr; }

 private:
  ClonedChild* child_;
};

// The sandbox once its init runs the program's setup: what supervise() watches.
struct Sandbox {
  ClonedChild init;
  ChannelPair channel;
  sigset_t signals;  // blocked before clone, read by supervise() through a signalfd
};

// Clone and release: the sandbox's init is cloned with the plan, mapped, placed in its cgroup and
// let go; with network.allow, its proxy starts and the program is let go once it is ready.
Result<Sandbox> clone_and_release(const LaunchPlan& lp, const Planned& p, Wiring& w,
                                  CgroupAttachWarmup& warmup) {
  // Signals are blocked before clone so none is lost between clone and the signalfd. They stay
  // blocked until cordon exits: one arriving after the program ended (a hangup while the record
  // is written) must not turn the program's exit status into cordon's death by signal.
  sigset_t host_mask;
  sigset_t sup = supervised_signals();
  ::sigprocmask(SIG_BLOCK, &sup, &host_mask);

  auto channel = make_channel();
  if (!channel.ok()) {
    return make_error(channel.error().to_string());
  }
  if (lp.network) {
    preload_capture_plugin();  // while cordon-fs mounts, not in the child's setup
  }
  // cordon-fs started meanwhile; its view must be mounted before the clone copies the mount table.
  if (auto s = w.cowfs.wait_ready(); !s.ok()) {
    return make_error("copy-on-write workspace: " + s.error().to_string());
  }
  for (size_t i = 0; i < w.views.size(); ++i) {
    if (auto s = w.views[i].wait_ready(); !s.ok()) {
      return make_error("cordon-fs view of " + lp.views[i].dir + ": " + s.error().to_string());
    }
  }
  warmup.join();  // no second thread may exist across the raw clone
  const Limits& lim = w.limits;
  const SeccompProgram& sc = p.seccomp;
  int child_end = channel->child.get();
  int exec_end = w.control ? w.control->sandbox_end() : -1;
  // The child starts as a copy of us, and an undumpable process's /proc files belong to root: a
  // rootless cordon could not write the child's id maps. So dumpable across the clone alone; the
  // child is then what its own steps make it (init makes itself undumpable, the program's exec
  // dumpable, as without cordon).
  ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  auto child = clone_sandbox([&] {
    channel->parent.reset();
    contain({lp, lim, sc, child_end, host_mask, exec_end});
  });
  std::optional<Unreleased> unreleased;
  if (child.ok()) {
    unreleased.emplace(*child);
  }
  if (auto s = make_undumpable(); !s.ok()) {
    return make_error(s.error().to_string());
  }
  channel->child.reset();
  if (w.control && child.ok()) {
    w.control->started(child->pid);
  }
  if (!child.ok()) {
    int e = child.error().code;
    return make_error(child.error().to_string() +
                      (e == EPERM || e == ENOSPC || e == EUSERS
                           ? "; without namespaces, `cordon run --no-namespaces` runs the program "
                             "in an advisory mode (preload shim, proxy, Landlock; not a sandbox)"
                           : ""));
  }
  // The child waits on the channel while its ids are mapped and its cgroup is set.
  if (auto s = write_id_maps_from_parent(child->pid, lp.ids); !s.ok()) {
    return make_error("user namespace: " + s.error().to_string());
  }
  if (auto s = w.limits.add_process(child->pid); !s.ok()) {
    return make_error("limits: " + s.error().to_string());
  }
  if (auto s = release_child(channel->parent.get()); !s.ok()) {
    return make_error(s.error().to_string());
  }

  // Off the critical path: the child is composing its root meanwhile.
  if (w.shim) {
    if (auto s = w.shim->start(); !s.ok()) {
      say("preload shim: " + s.error().to_string());
    }
  }
  if (auto s = w.session.started(child->pid, w.end.limits_backend); !s.ok()) {
    say("session record: " + s.error().to_string());
  }
  if (!w.opts.quiet && ::isatty(2) == 1) {
    say(w.end.limits_backend);
  }
  if (lp.network) {
    // The sandbox's capture sockets -> cordon-netproxy in the host's network namespace.
    const SessionPaths& paths = w.session.paths();
    SandboxNet net{paths.policy,  w.session.id(), paths.dir + "/netproxy.log",
                   paths.events,  p.netproxy_bin, w.ca.cert_path,
                   w.ca.key_path, w.secrets};
    net.exfil_alarm_fd = w.exfil_alarm_w ? w.exfil_alarm_w.get() : -1;
    if (auto s = open_decider(w.opts, w); !s.ok()) {
      return make_error("decider: " + s.error().to_string());
    }
    net.decider_fd = w.decider.proxy_end ? w.decider.proxy_end.get() : -1;
    net.decider_timeout =
        w.opts.ask ? w.opts.ask_timeout.value_or("") : w.opts.decider_timeout.value_or("");
    net.decider_is_person = w.opts.ask;
    net.sandbox_pid = child->pid;
    if (!lp.ids.rootless) {
      // Host root: the proxy runs as the sandbox's user, not as root.
      net.run_uid = lp.ids.uid;
      net.run_gid = lp.ids.gid;
    }
    auto np = start_sandbox_netproxy(channel->parent.get(), net);
    if (!np.ok()) {
      return make_error(np.error().to_string());
    }
    w.netproxy.emplace(std::move(*np));
    w.decider.proxy_end.reset();  // the proxy holds the only copy: its end is the decider's EOF
  }
  if (!lp.decoys.empty()) {
    // The canaries' files, written and watched by the child: the collector learns which opens
    // are of decoys before the program can make one.
    auto watch = CanaryWatch::from_child(channel->parent.get(), lp.decoys);
    if (!watch.ok()) {
      return make_error("canaries: " + watch.error().to_string());
    }
    w.canary_watch = std::move(*watch);
    if (w.shim) {
      std::vector<preload_shim::Collector::DecoyId> ids;
      for (const auto& d : w.canary_watch.watched()) {
        ids.push_back({d.dev, d.ino, d.canary});
      }
      w.shim->set_decoys(std::move(ids));
    }
  }
  if (lp.network || !lp.decoys.empty()) {
    // The proxy is ready and the decoys known: only now may the program start (contain.cc).
    // EPIPE: the sandbox already ended with a setup error, which supervise reads and reports.
    if (auto s = release_child(channel->parent.get()); !s.ok() && s.error().code != EPIPE) {
      return make_error("releasing the program: " + s.error().to_string());
    }
  }
  unreleased->release();
  return Sandbox{std::move(*child), std::move(*channel), sup};
}

// --ask: the program has ended; the asker stops asking (putting the terminal's mode back if it was
// asking) and says so, before cordon restores the mode the terminal had before the session.
void release_terminal(int hold) {
  (void)!::write(hold, "q", 1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (int i = 0; i < 64; ++i) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{hold, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      return;
    }
    char buf[16];
    ssize_t k = ::read(hold, buf, sizeof buf);
    if (k <= 0 || std::memchr(buf, 'k', static_cast<size_t>(k)) != nullptr) {
      return;
    }
  }
}

// Supervise: until init has exited; each refused user namespace is recorded meanwhile.
Outcome supervise_sandbox(const LaunchPlan& lp, Sandbox& sb, Wiring& w) {
  SuperviseSpec spec;
  spec.init_pid = sb.init.pid;
  spec.pidfd = sb.init.pidfd.get();
  spec.channel = sb.channel.parent.get();
  spec.signals = sb.signals;
  spec.timeout = lp.timeout;
  spec.kill_grace = lp.kill_grace;
  spec.limits = &w.limits;
  spec.on_userns_refused = [&](const RefusedNamespace& r) {
    nlohmann::json f = {{"decision", "deny"},
                        {"syscall", r.syscall},
                        {"flags", namespace_flags_text(r.flags)},
                        {"pid", r.pid},
                        {"rule", "process.nested_sandbox"},
                        {"reason",
                         "creating a user namespace is refused (EPERM) while "
                         "process.nested_sandbox is off"}};
    if (!r.exe.empty()) {
      f["exe"] = r.exe;
    }
    (void)w.session.events().emit("proc.refused", std::move(f));
  };
  if (w.canary_watch.fd() >= 0) {
    spec.watches.push_back({w.canary_watch.fd(), [&w] {
                              w.canary_watch.drain(w.session.events());
                              return false;
                            }});
  }
  if (w.exfil_alarm) {
    w.exfil_alarm_w.reset();  // the proxy holds its own copy: its end is our end of file
    spec.watches.push_back({w.exfil_alarm.get(), [&w] {
                              char buf[64];
                              return ::read(w.exfil_alarm.get(), buf, sizeof buf) > 0;
                            }});
  }
  if (w.control) {
    for (auto& watch : w.control->watches()) {
      spec.watches.push_back(std::move(watch));
    }
  }
  if (w.ask_hold) {
    spec.input_hold = w.ask_hold.get();
    // The asker puts the terminal back as it found it when stopped mid-question: that must come
    // before supervise() restores the mode the terminal had before cordon's raw mode.
    spec.before_terminal_restore = [&w] { release_terminal(w.ask_hold.get()); };
  }
  Outcome out = supervise(spec);
  w.end.userns_refused = out.userns_refused;
  if (w.shim) {
    w.shim->stop();  // drains what the program's processes sent before the record is closed
  }
  w.end.usage = w.limits.usage();
  return out;
}

// --detach: the session's control socket and the exec server's socketpair, before the clone.
Status open_control(const RunOptions& opts, Wiring& w) {
  if (!opts.detach) {
    return {};
  }
  SessionControlOptions o;
  o.session_dir = w.session.paths().dir;
  o.name = opts.name.value_or("");
  if (opts.idle_timeout) {
    o.idle_timeout = *policy::parse_duration(*opts.idle_timeout);  // detach_option_error checked
  }
  auto c = SessionControl::open(o, w.session.events());
  if (!c.ok()) {
    return make_error("--detach: " + c.error().to_string());
  }
  w.control = std::move(*c);
  return {};
}

// --name: unique among the running sessions, so that `cordon exec NAME` means one.
Status check_name_free(const RunOptions& opts) {
  if (!opts.name) {
    return {};
  }
  if (auto other = find_running_by_name(sessions_root(), *opts.name)) {
    return make_error("--name " + *opts.name + ": session " + *other +
                      " is running under that name; stop it (`cordon stop " + *opts.name +
                      "`) or choose another name");
  }
  return {};
}

ExitFacts exit_facts(const policy::Policy& pol, const LaunchPlan& lp) {
  ExitFacts f;
  f.command = lp.argv[0];
  f.timeout = lp.timeout;
  f.memory = pol.process.memory;
  f.not_found_hint = [&lp] {
    std::string path;
    for (const auto& kv : lp.envp) {
      if (kv.rfind("PATH=", 0) == 0) {
        path = kv.substr(5);
      }
    }
    return not_found_hint(lp.argv[0], path, lp.cwd, lp);
  };
  return f;
}

}  // namespace

int run_command(const RunOptions& opts) {
  const auto t0 = Clock::now();
  if (std::string e = detach_option_error(opts); !e.empty()) {
    return fail(e);
  }
  std::optional<DetachedStart> detached;
  if (opts.detach) {
    // Before any thread exists (the cgroup warm-up below starts one): fork is safe only here.
    if (auto s = check_name_free(opts); !s.ok()) {
      return fail(s.error().to_string());
    }
    auto d = DetachedStart::fork_supervisor();
    if (!d.ok()) {
      return fail(d.error().to_string());
    }
    detached.emplace(std::move(*d));
  }
  // cordon holds the session's fds (events.jsonl, the copy-on-write layer, the proxy's sockets)
  // from here on: no other process of its uid may take them (pidfd_getfd) or read its memory.
  if (auto s = make_undumpable(); !s.ok()) {
    return fail(s.error().to_string());
  }
  // Overlaps cgroup v1's first-migration grace period with everything up to clone.
  CgroupAttachWarmup warmup = CgroupAttachWarmup::start();
  const HostFacts host = HostFacts::current();

  auto requested = load_requested(opts, host);
  if (!requested.ok()) {
    return fail(requested.error().to_string());
  }
  auto pol = load(opts, host);
  if (!pol.ok()) {
    return fail(pol.error().to_string());
  }
  if (opts.ask && (opts.decider || opts.decider_socket || opts.decider_timeout)) {
    return fail(
        "--ask: cordon itself is the decider, asking at its terminal; --decider, "
        "--decider-socket and --decider-timeout name another one (use --ask-timeout)");
  }
  if (opts.ask_timeout && !opts.ask) {
    return fail("--ask-timeout: there is no question to wait for without --ask");
  }
  UniqueFd ask_tty;
  if (opts.ask) {
    if (opts.no_namespaces) {
      return fail("--ask: not with --no-namespaces (there is no proxy to hold connections)");
    }
    auto tty = open_controlling_terminal();
    if (!tty.ok()) {
      return fail(tty.error().to_string());
    }
    ask_tty = std::move(*tty);
  }
  if (opts.decider_timeout && !asks_decider(opts)) {
    return fail(
        "--decider-timeout: there is no decider to wait for (give --decider CMD or "
        "--decider-socket PATH)");
  }
  apply_retention(sessions_root());  // at most once an hour: old finished sessions go (prune.h)
  if (opts.no_namespaces) {
    return run_no_namespaces(opts, *pol);  // advisory mode: no clone, no mount plan
  }
  // Before the plan and the session's policy.json, which cordon-fs and the review go by.
  add_real_deny_spellings(pol->filesystem);
  if (auto ws = workspace_path(*pol, host); ws.ok()) {
    protect_hooks_path(pol->filesystem, *ws);
  }
  auto planned = plan(*pol, opts, host);
  if (!planned.ok()) {
    return fail(planned.error().to_string());
  }
  auto wiring =
      open_session(*pol, opts, *planned, t0, requested->has_value() ? &**requested : nullptr);
  if (!wiring.ok()) {
    return fail(wiring.error().to_string());
  }
  Planned& p = *planned;
  Wiring& w = **wiring;
  w.ask_tty = std::move(ask_tty);
  if (auto s = start_sidecars(*pol, p, w); !s.ok()) {
    return w.setup_failed(p, s.error().to_string());
  }
  if (auto s = open_control(opts, w); !s.ok()) {
    return w.setup_failed(p, s.error().to_string());
  }
  const LaunchPlan& lp = p.plan;  // settled: nothing changes it from here on
  auto sandbox = clone_and_release(lp, p, w, warmup);
  if (!sandbox.ok()) {
    return w.setup_failed(p, sandbox.error().to_string());
  }
  if (detached) {
    detached->announce(w.session.id());
  }
  Outcome out = supervise_sandbox(lp, *sandbox, w);
  if (w.control && w.control->end() != SessionControl::End::None) {
    return w.finish(p, 0);  // `cordon stop` or the idle timeout: the session's planned end
  }
  return w.finish(p, exit_status(out, exit_facts(*pol, lp), w.end));
}

}  // namespace cordon::launcher
