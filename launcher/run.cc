// `cordon run`: overrides -> Policy -> LaunchPlan -> clone -> supervise -> exit status. The one
// place cordon's own failures are reported ("cordon: ...", exit 125).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "launcher/cgroup_warmup.h"
#include "launcher/channel.h"
#include "launcher/commands.h"
#include "launcher/contain.h"
#include "launcher/cowfs_sidecar.h"
#include "launcher/effective_policy.h"
#include "launcher/fs_views.h"
#include "launcher/host_program.h"
#include "launcher/landlock.h"
#include "launcher/limits.h"
#include "launcher/mounts.h"
#include "launcher/namespaces.h"
#include "launcher/net_summary.h"
#include "launcher/no_namespaces.h"
#include "launcher/plan.h"
#include "launcher/prune.h"
#include "launcher/seccomp.h"
#include "launcher/session.h"
#include "launcher/shim_attribution.h"
#include "launcher/shim_setup.h"
#include "launcher/supervise.h"
#include "launcher/userns.h"
#include "policy/base/hardening.h"
#include "policy/loader.h"

namespace cordon::launcher {
namespace {

using policy::PolicyError;

std::string human_size(uint64_t b) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (v == std::floor(v)) {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  }
  return buf;
}

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

int fail(const std::string& msg) {
  std::fprintf(stderr, "cordon: %s\n", msg.c_str());
  return kExitCordonFailed;
}

// Kills and reaps a child that never got released (setup failed on the parent side).
void abandon(const ClonedChild& c) {
  ::kill(c.pid, SIGKILL);
  int st;
  ::waitpid(c.pid, &st, 0);
}

}  // namespace

int run_command(const RunOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  // cordon holds the session's fds (events.jsonl, the copy-on-write layer, the proxy's sockets)
  // from here on: no other process of its uid may take them (pidfd_getfd) or read its memory.
  if (auto s = make_undumpable(); !s.ok()) {
    return fail(s.error().to_string());
  }
  // Overlaps cgroup v1's first-migration grace period with everything up to clone.
  CgroupAttachWarmup warmup = CgroupAttachWarmup::start();
  HostFacts host = HostFacts::current();

  // Parse: policy file (or the embedded default) plus command-line overrides, "~" as the home of
  // the user the sandbox runs as.
  policy::Policy pol;
  try {
    pol = load_effective_policy(opts, host);
  } catch (const PolicyError& e) {
    return fail(e.what());
  }
  apply_retention(sessions_root());  // at most once an hour: old finished sessions go (prune.h)
  if (opts.no_namespaces) {
    return run_no_namespaces(opts, pol);  // advisory mode: no clone, no mount plan
  }

  // cow mode goes through cordon-fs where this host allows FUSE; else kernel overlayfs, said so.
  const std::string cow_fallback = cowfs_unavailable_reason();
  host.cow_fuse = cow_fallback.empty();
  // Read-write directories with rules inside go through cordon-fs views, with no fallback.
  host.no_fs_views_reason = fs_views_unavailable_reason();
  host.fs_views = host.no_fs_views_reason.empty();

  // Plan: everything decided and validated before any namespace exists.
  auto plan = build_plan(pol, opts.argv, host);
  if (!plan.ok()) {
    return fail(plan.error().to_string());
  }
  // network.allow: found before any namespace exists, so a missing proxy never starts the program.
  auto netproxy_bin = plan->network ? find_netproxy_binary() : Result<std::string>(std::string());
  if (!netproxy_bin.ok()) {
    return fail("network: " + netproxy_bin.error().to_string());
  }
  if (auto s = plan_landlock(pol.process, *plan); !s.ok()) {
    return fail(s.error().to_string());
  }
  // The user-namespace filter reports to cordon, which records each refusal (userns_listener.h).
  auto seccomp = compile_seccomp(pol.process.seccomp, {pol.process.nested_sandbox, true});
  if (!seccomp.ok()) {
    return fail("seccomp: " + seccomp.error().to_string());
  }
  const bool cow = plan->mode == policy::WorkspaceMode::Cow;
  if (cow) {
    if (auto why = session_store_in_workspace(plan->workspace)) {
      return fail(*why);
    }
  }
  auto session = Session::create(pol, opts.argv, plan->workspace);
  if (!session.ok()) {
    return fail("session record: " + session.error().to_string());
  }
  report_env_notes(plan->env_notes, session->events(), opts.quiet);
  auto limits = Limits::create(pol.process, session->id());
  if (!limits.ok()) {
    return fail("limits: " + limits.error().to_string());
  }

  SessionEnd end;
  end.limits_backend = limits->describe();
  bool attribute = false;  // the shim runs: join its records with the proxy's and cordon-fs's
  CowFsProcess cowfs;  // cordon-fs for the session (cow mode through FUSE); stopped by finish
  std::vector<CowFsProcess> views;  // cordon-fs views of read-write directories (fs_views.h)
  std::optional<NetproxyProcess> netproxy;  // network.allow: cordon-netproxy; stopped by finish
  auto finish = [&](int code) {
    end.exit_code = code;
    finish_network(netproxy, *session, end);
    end.duration = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    cowfs.begin_stop();  // the daemon unmounts while the changes are counted
    for (auto& v : views) {
      v.begin_stop();
    }
    if (cow && end.error.empty()) {
      // What the program left in the copy-on-write layer; the workspace itself is untouched.
      if (plan->cow_fuse) {
        end.cow_changed = count_cowfs_changes(plan->workspace, session->paths().upper);
      } else {
        CowChanges c = count_cow_changes(session->paths().upper, plan->workspace, kMaxCowCount);
        end.cow_changed = c.count;
        end.cow_changed_more = c.more;
        end.cow_fallback = cow_fallback;
      }
      end.cow_upper = session->paths().upper;
    }
    if (CowFsExit x = cowfs.stop(); x.died_early) {
      end.cow_daemon_died = x.how;
    }
    for (size_t i = 0; i < views.size(); ++i) {
      if (CowFsExit x = views[i].stop(); x.died_early) {
        end.view_daemon_died = plan->views[i].dir + " (" + x.how + ")";
      }
    }
    if (attribute) {
      // Every writer has stopped (proxy, cordon-fs, the shim's collector): connections and
      // filesystem refusals -> the pid/exe/argv the shim saw.
      (void)record_connection_attribution(session->paths().events, session->events());
    }
    session->close(end, opts.quiet);
    return code;
  };
  auto setup_failed = [&](const std::string& msg) {
    std::fprintf(stderr, "cordon: %s\n", msg.c_str());
    end.error = msg;
    return finish(kExitCordonFailed);
  };

  if (cow) {
    plan->cow_upper = session->paths().upper;
    plan->cow_work = session->paths().work;
    if (auto s = prepare_cow_layers_from_parent(*plan); !s.ok()) {
      return setup_failed("copy-on-write layer: " + s.error().to_string());
    }
    auto view = start_cow_backend(*session, *plan);
    if (!view.ok()) {
      return setup_failed("copy-on-write workspace: " + view.error().to_string());
    }
    cowfs = std::move(view).value();
    if (!plan->cow_fuse && !opts.quiet) {
      std::fprintf(stderr,
                   "cordon: copy-on-write through kernel overlayfs, not cordon-fs (%s): deny rules "
                   "cover only files present now; no live snapshot/rollback\n",
                   cow_fallback.c_str());
    }
  }
  {
    auto started = start_fs_views(*session, *plan);
    if (!started.ok()) {
      return setup_failed(started.error().to_string());
    }
    views = std::move(started).value();
  }
  if (!opts.quiet) {
    for (const auto& g : plan->absent_write_grants) {
      std::fprintf(stderr,
                   "cordon: filesystem.write: %s does not exist, so it is not shown: what the "
                   "program writes there stays in the sandbox and is gone at exit (create it "
                   "first to keep it)\n",
                   g.c_str());
    }
  }
  if (!plan->write_warning.empty()) {
    end.workspace_unwritable = plan->write_warning;
    if (!opts.quiet) {
      std::fprintf(stderr, "cordon: %s\n", end.workspace_unwritable.c_str());
    }
  }
  // The preload shim: library + collector socket into the plan now, collector thread after clone.
  auto shim = prepare_shim_from_parent(session->paths().dir, session->paths().events, session->id(),
                                       record::RecordLimits::from(pol.record), *plan);
  if (!shim.ok()) {
    return setup_failed("preload shim: " + shim.error().to_string());
  }
  attribute = static_cast<bool>(*shim);

  // Apply: signals are blocked before clone so none is lost between clone and the signalfd. They
  // stay blocked until cordon exits: one arriving after the program ended (a hangup while the
  // record is written) must not turn the program's exit status into cordon's death by signal.
  sigset_t host_mask;
  sigset_t sup = supervised_signals();
  ::sigprocmask(SIG_BLOCK, &sup, &host_mask);

  auto channel = make_channel();
  if (!channel.ok()) {
    return setup_failed(channel.error().to_string());
  }
  // cordon-fs started meanwhile; its view must be mounted before the clone copies the mount table.
  if (auto s = cowfs.wait_ready(); !s.ok()) {
    return setup_failed("copy-on-write workspace: " + s.error().to_string());
  }
  for (size_t i = 0; i < views.size(); ++i) {
    if (auto s = views[i].wait_ready(); !s.ok()) {
      return setup_failed("cordon-fs view of " + plan->views[i].dir + ": " + s.error().to_string());
    }
  }
  warmup.join();  // no second thread may exist across the raw clone
  const LaunchPlan& lp = *plan;
  const Limits& lim = *limits;
  const SeccompProgram& sc = *seccomp;
  int child_end = channel->child.get();
  // The child starts as a copy of us, and an undumpable process's /proc files belong to root: a
  // rootless cordon could not write the child's id maps. So dumpable across the clone alone; the
  // child is then what its own steps make it (init makes itself undumpable, the program's exec
  // dumpable, as without cordon).
  ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  auto child = clone_sandbox([&] {
    channel->parent.reset();
    contain({lp, lim, sc, child_end, host_mask});
  });
  if (auto s = make_undumpable(); !s.ok()) {
    if (child.ok()) {
      abandon(*child);
    }
    return setup_failed(s.error().to_string());
  }
  channel->child.reset();
  if (!child.ok()) {
    int e = child.error().code;
    return setup_failed(child.error().to_string() +
                        (e == EPERM || e == ENOSPC || e == EUSERS
                             ? "; without namespaces, `cordon run --no-namespaces` runs the program "
                               "in an advisory mode (preload shim, proxy, Landlock; not a sandbox)"
                             : ""));
  }
  // The child waits on the channel while its ids are mapped and its cgroup is set.
  if (auto s = write_id_maps_from_parent(child->pid, lp.ids); !s.ok()) {
    abandon(*child);
    return setup_failed("user namespace: " + s.error().to_string());
  }
  if (auto s = limits->add_process(child->pid); !s.ok()) {
    abandon(*child);
    return setup_failed("limits: " + s.error().to_string());
  }
  if (auto s = release_child(channel->parent.get()); !s.ok()) {
    abandon(*child);
    return setup_failed(s.error().to_string());
  }

  // Off the critical path: the child is composing its root meanwhile.
  if (*shim) {
    if (auto s = (*shim)->start(); !s.ok()) {
      std::fprintf(stderr, "cordon: preload shim: %s\n", s.error().to_string().c_str());
    }
  }
  if (auto s = session->started(child->pid, end.limits_backend); !s.ok()) {
    std::fprintf(stderr, "cordon: session record: %s\n", s.error().to_string().c_str());
  }
  if (!opts.quiet && ::isatty(2) == 1) {
    std::fprintf(stderr, "cordon: %s\n", end.limits_backend.c_str());
  }
  if (lp.network) {
    // The sandbox's capture sockets -> cordon-netproxy in the host's network namespace.
    SandboxNet net{session->paths().policy, session->id(), session->paths().dir + "/netproxy.log",
                   session->paths().events, *netproxy_bin};
    if (!lp.ids.rootless) {
      // Host root: the proxy runs as the sandbox's user, not as root.
      net.run_uid = lp.ids.uid;
      net.run_gid = lp.ids.gid;
    }
    auto np = start_sandbox_netproxy(channel->parent.get(), net);
    if (!np.ok()) {
      abandon(*child);
      return setup_failed(np.error().to_string());
    }
    netproxy.emplace(std::move(*np));
    // The proxy is ready: only now may the program start (netns.h, wait_for_proxy_in_child).
    // EPIPE: the sandbox already ended with a setup error, which supervise reads and reports.
    if (auto s = release_child(channel->parent.get()); !s.ok() && s.error().code != EPIPE) {
      abandon(*child);
      return setup_failed("network: " + s.error().to_string());
    }
  }

  SuperviseSpec spec;
  spec.init_pid = child->pid;
  spec.pidfd = child->pidfd.get();
  spec.channel = channel->parent.get();
  spec.signals = sup;
  spec.timeout = lp.timeout;
  spec.kill_grace = lp.kill_grace;
  spec.limits = &lim;
  spec.on_userns_refused = [&](const RefusedNamespace& r) {
    nlohmann::json f = {{"decision", "deny"},
                        {"syscall", r.syscall},
                        {"flags", namespace_flags_text(r.flags)},
                        {"pid", r.pid},
                        {"rule", "process.nested_sandbox"},
                        {"reason",
                         "creating a user namespace is refused (EPERM) while "
                         "process.nested_sandbox is off"}};
    char link[64], exe[4096];
    std::snprintf(link, sizeof link, "/proc/%d/exe", static_cast<int>(r.pid));
    if (ssize_t n = ::readlink(link, exe, sizeof exe - 1); n > 0) {
      f["exe"] = std::string(exe, static_cast<size_t>(n));
    }
    (void)session->events().emit("proc.refused", std::move(f));
  };
  Outcome out = supervise(spec);
  end.userns_refused = out.userns_refused;
  if (*shim) {
    (*shim)->stop();  // drains what the program's processes sent before the record is closed
  }
  end.usage = limits->usage();

  if (out.setup_error) {
    return setup_failed(*out.setup_error);
  }
  if (out.exec_errno) {
    int e = *out.exec_errno;
    const std::string& cmd = lp.argv[0];
    if (e == ENOENT || e == ENOTDIR) {
      std::string path;
      for (const auto& kv : lp.envp) {
        if (kv.rfind("PATH=", 0) == 0) {
          path = kv.substr(5);
        }
      }
      end.error = cmd + ": command not found";
      if (auto hint = not_found_hint(cmd, path, lp.cwd, lp)) {
        end.error += " in the sandbox; " + *hint;
      }
      std::fprintf(stderr, "cordon: %s\n", end.error.c_str());
      return finish(kExitNotFound);
    }
    std::fprintf(stderr, "cordon: %s: %s\n", cmd.c_str(), std::strerror(e));
    end.error = cmd + ": " + std::strerror(e);
    return finish(kExitCannotExec);
  }
  if (out.timed_out) {
    end.timed_out = true;
    end.limit_hit = "timeout";
    std::fprintf(stderr, "cordon: killed: timeout (%s) reached\n",
                 policy::format_duration(lp.timeout).c_str());
    return finish(kExitTimeout);
  }
  // The program's own status (from init); init's status if init died before it could report.
  int st = out.program_status.value_or(out.init_status);
  if (WIFSIGNALED(st)) {
    int sig = WTERMSIG(st);
    end.signal = sig;
    if (sig == SIGKILL && end.usage.oom_killed) {
      end.limit_hit = "memory";
      std::fprintf(stderr, "cordon: killed: memory limit (%s) reached\n",
                   human_size(pol.process.memory).c_str());
    } else if (end.usage.pids_limit_hit) {
      end.limit_hit = "pids";
    }
    return finish(128 + sig);
  }
  if (end.usage.oom_killed) {
    end.limit_hit = "memory";
  } else if (end.usage.pids_limit_hit) {
    end.limit_hit = "pids";
  }
  return finish(WIFEXITED(st) ? WEXITSTATUS(st) : kExitCordonFailed);
}

}  // namespace cordon::launcher
