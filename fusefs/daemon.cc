// cordon-fs as a process: options, preflight, mount, serve, unmount.
#include "fusefs/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "fusefs/control.h"
#include "fusefs/cowfs.h"
#include "fusefs/kernel/kernel_init.h"
#include "fusefs/kernel/passthrough.h"
#include "fusefs/kernel/uring.h"
#include "policy/loader.h"
#include "record/events.h"

namespace cordon::fusefs {

Result<DaemonOptions> parse_daemon_options(int argc, char** argv, int* exit_code) {
  DaemonOptions o;
  CLI::App app{"cordon-fs: the copy-on-write workspace view of a cordon session"};
  app.add_option("--lower", o.lower, "the real workspace (never written)");
  app.add_option("--upper", o.upper, "the session's upper layer directory")->required();
  app.add_flag("--direct", o.direct,
               "no copy-on-write: --upper is a real directory, written at once, shown with the "
               "policy's path rules decided at every access (a read-write grant or workspace)");
  app.add_option("--view-root", o.view_root,
                 "the view shows this host path outside the workspace: paths are decided as "
                 "absolute host paths beneath it (default: workspace-relative)");
  app.add_option("--home", o.home, "the home directory \"~\" means in the policy");
  app.add_option("--mountpoint", o.mountpoint, "where to mount the view")->required();
  app.add_option("--policy", o.policy_file, "policy file (default: the embedded default policy)");
  app.add_option("--events", o.events_file, "append events (JSON lines) to this file");
  auto* ev_fd =
      app.add_option("--events-fd", o.events_fd, "append events to this inherited O_APPEND fd");
  app.add_option("--events-head-fd", o.events_head_fd,
                 "the record's head (events.jsonl.head, inherited fd) to chain --events-fd's "
                 "lines through with the record's other writers")
      ->needs(ev_fd);
  app.add_option("--session", o.session, "session id written into every event");
  app.add_option("--control", o.control, "control socket for snapshot/rollback while mounted");
  app.add_option("--snapshots", o.snapshots, "snapshot directory (default: <upper>/../snapshots)");
  app.add_option("--ready-fd", o.ready_fd, "write one byte to this fd once mounted");
  app.add_flag("--allow-other", o.allow_other,
               "let other users see the view (needs root or "
               "user_allow_other in /etc/fuse.conf)");
  std::string agent_ids, owner_ids;
  auto ids_check = [](const char* flag) {
    return CLI::Validator(
        [flag](std::string& text) {
          auto ids = parse_ids(text, flag);
          return ids.ok() ? std::string() : ids.error().to_string();
        },
        "UID:GID");
  };
  auto* agent_opt =
      app.add_option("--agent-ids", agent_ids,
                     "the ids the sandbox's processes run as (as this daemon sees them); in cow "
                     "mode the workspace owner's files are shown as theirs, and what they make is "
                     "stored under the owner's ids (a root daemon) or this daemon's own")
          ->check(ids_check("--agent-ids"));
  app.add_option("--owner-ids", owner_ids,
                 "the workspace's owner, whose files --agent-ids shows as the agent's (default: "
                 "the owner of --lower)")
      ->check(ids_check("--owner-ids"))
      ->needs(agent_opt);
  bool foreground = true;
  app.add_flag("-f,--foreground", foreground, "stay in the foreground (always the case)");
  app.add_flag("-d,--debug", o.debug, "trace FUSE requests on stderr");
  app.add_flag("--no-io-uring", o.no_io_uring,
               "serve requests through /dev/fuse reads and writes even when the kernel offers FUSE "
               "over io_uring (Linux 6.14+, /sys/module/fuse/parameters/enable_uring=Y); the "
               "transport in use is logged at mount and shown by the control socket's status");
  app.add_option("--io-uring-entries", o.uring_entries,
                 "io_uring entries per CPU queue, each with its own thread and a max_write payload "
                 "buffer")
      ->check(CLI::Range(1u, 64u));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return make_error(e.get_exit_code() == 0 ? "" : e.what());
  }
  // Checked by the validators above.
  if (!agent_ids.empty()) {
    o.agent = parse_ids(agent_ids, "--agent-ids").value();
  }
  if (!owner_ids.empty()) {
    o.owner = parse_ids(owner_ids, "--owner-ids").value();
  }
  if (o.lower.empty() != o.direct) {
    std::fprintf(stderr, "cordon-fs: %s\n",
                 o.direct ? "--direct has no lower layer: drop --lower"
                          : "--lower is required (or --direct for a pass-through view)");
    *exit_code = 2;
    return make_error("bad options");
  }
  if (o.direct && !o.control.empty()) {
    std::fprintf(stderr, "cordon-fs: --direct views have no snapshots: drop --control\n");
    *exit_code = 2;
    return make_error("bad options");
  }
  // Absolute from here on: the control socket resolves snapshot names long after startup.
  for (std::string* p : {&o.lower, &o.upper, &o.mountpoint, &o.snapshots, &o.control}) {
    if (!p->empty()) {
      *p = std::filesystem::absolute(*p).lexically_normal().string();
    }
  }
  if (o.snapshots.empty()) {
    o.snapshots =
        (std::filesystem::path(o.upper).lexically_normal().parent_path() / "snapshots").string();
  }
  return o;
}

namespace {

bool in_path(const char* prog) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && ::access((dir + "/" + prog).c_str(), X_OK) == 0) {
      return true;
    }
    if (end == std::string::npos) {
      break;
    }
    start = end + 1;
  }
  return false;
}

Status preflight(const DaemonOptions& o) {
  struct stat st;
  if (::stat("/dev/fuse", &st) != 0) {
    return sys_error(
        "stat(\"/dev/fuse\")",
        "load the module with `modprobe fuse`, or in a container pass --device /dev/fuse");
  }
  if (::geteuid() != 0) {
    // fusermount3 opens /dev/fuse with the caller's own permissions (on purpose: that is how a
    // host restricts FUSE), so a non-root mount needs both.
    if (::access("/dev/fuse", R_OK | W_OK) != 0) {
      return sys_error("/dev/fuse is not readable and writable by uid " +
                           std::to_string(::geteuid()) + " (FUSE is restricted to root here)",
                       "as root: chmod 0666 /dev/fuse (the distribution default), or run as root");
    }
    if (!in_path("fusermount3")) {
      return make_error("fusermount3 not found in PATH (needed to mount as a non-root user)",
                        "install it: apt-get install fuse3");
    }
  }
  if (::stat(o.mountpoint.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return make_error("mountpoint " + o.mountpoint + " is not a directory",
                      "create it first: mkdir -p " + o.mountpoint);
  }
  return {};
}

// Owns a fuse_session and everything it mounted or installed.
// What the INIT hook needs to start the rings, and says once which transport serves the mount.
struct TransportChoice {
  UringTransport* uring = nullptr;
  std::string off_reason;  // why not the ring, when known before INIT
};

void on_init_done(void* ctx, bool io_uring, size_t max_payload) {
  auto* c = static_cast<TransportChoice*>(ctx);
  if (io_uring && c->uring != nullptr) {
    c->uring->start(max_payload);
    std::fprintf(
        stderr,
        "cordon-fs: transport: io_uring (%zu CPU queues x %u entries and threads, %zu-byte "
        "payloads; "
        "--no-io-uring forces /dev/fuse)\n",
        c->uring->queues(), c->uring->entries_per_queue(), max_payload);
    return;
  }
  std::string why = c->off_reason;
  if (why.empty()) {
    why = kernel_offered_io_uring()
              ? "INIT could not be answered with FUSE_OVER_IO_URING"
              : "the kernel did not offer FUSE_OVER_IO_URING at INIT (needs Linux 6.14+ built "
                "with CONFIG_FUSE_IO_URING, and enable_uring=Y before the mount)";
  }
  std::fprintf(stderr, "cordon-fs: transport: /dev/fuse (%s)\n", why.c_str());
  if (c->uring != nullptr) {
    c->uring->stop();  // its threads were waiting for a start that will not come
  }
}

struct Session {
  fuse_session* se = nullptr;
  bool mounted = false;
  bool handlers = false;
  ~Session() {
    if (se == nullptr) {
      return;
    }
    if (handlers) {
      fuse_remove_signal_handlers(se);
    }
    if (mounted) {
      fuse_session_unmount(se);
    }
    fuse_session_destroy(se);
  }
};

}  // namespace

bool kernel_uring_enabled() {
  FILE* f = std::fopen("/sys/module/fuse/parameters/enable_uring", "r");
  if (f == nullptr) {
    return false;
  }
  int c = std::fgetc(f);
  std::fclose(f);
  return c == 'Y' || c == 'y' || c == '1';
}

int run_daemon(const DaemonOptions& o) {
  if (Status st = preflight(o); !st.ok()) {
    std::fprintf(stderr, "cordon-fs: %s\n", st.error().to_string().c_str());
    return 1;
  }
  policy::Policy pol;
  try {
    policy::LoadOptions lo;
    lo.home = o.home;
    pol = o.policy_file.empty() ? policy::default_policy(lo)
                                : policy::load_policy_file(o.policy_file, lo);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cordon-fs: %s\n", e.what());
    return 1;
  }
  const auto record_limits = record::RecordLimits::from(pol.record);
  record::EventLog events;
  if (o.events_fd >= 0) {
    events = record::EventLog::adopt(UniqueFd(o.events_fd), o.session, "fusefs", record_limits,
                                     UniqueFd(o.events_head_fd));
  } else if (!o.events_file.empty()) {
    auto ev = record::EventLog::open(o.events_file, o.session, "fusefs", record_limits);
    if (!ev.ok()) {
      std::fprintf(stderr, "cordon-fs: %s\n", ev.error().to_string().c_str());
      return 1;
    }
    events = std::move(ev).value();
  }
  // Every directory the kernel holds keeps one or two O_PATH fds open here, and open files one
  // each: big trees need more than the usual soft limit of 1024.
  rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (::geteuid() == 0) {
      // Root may raise the hard limit too, up to fs.nr_open.
      FILE* f = std::fopen("/proc/sys/fs/nr_open", "r");
      unsigned long long nr_open = 0;
      if (f != nullptr) {
        if (std::fscanf(f, "%llu", &nr_open) == 1 && nr_open > rl.rlim_max) {
          rl.rlim_max = nr_open;
        }
        std::fclose(f);
      }
    }
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 8192) {
    std::fprintf(stderr,
                 "cordon-fs: warning: only %llu file descriptors (RLIMIT_NOFILE); each directory "
                 "the kernel caches holds up to two, so very large trees may fail with EMFILE "
                 "(raise the hard limit: ulimit -Hn)\n",
                 static_cast<unsigned long long>(rl.rlim_cur));
  }
  // Modes arrive from the kernel with the caller's umask already applied; ours must not add to it.
  ::umask(0);
  FsConfig cfg;
  cfg.lower = o.lower;
  cfg.upper = o.upper;
  cfg.policy = pol.filesystem;
  cfg.events = &events;
  cfg.agent = o.agent;
  cfg.owner = o.owner;
  cfg.direct = o.direct;
  cfg.view_root = o.view_root;
  auto fs = CowFs::create(std::move(cfg));
  if (!fs.ok()) {
    std::fprintf(stderr, "cordon-fs: %s\n", fs.error().to_string().c_str());
    return 1;
  }
  std::string mount_opts = "default_permissions,fsname=cordon-fs,subtype=cordon";
  if (o.allow_other) {
    mount_opts += ",allow_other";
  }
  std::vector<const char*> argv = {"cordon-fs", "-o", mount_opts.c_str()};
  if (o.debug) {
    argv.push_back("-d");
  }
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  Session s;
  s.se = fuse_session_new(&args, &CowFs::operations(), sizeof(fuse_lowlevel_ops), fs->get());
  fuse_opt_free_args(&args);  // the session keeps what it needs
  if (s.se == nullptr) {
    std::fprintf(stderr, "cordon-fs: fuse_session_new failed (see libfuse's message above)\n");
    return 1;
  }
  if (fuse_set_signal_handlers(s.se) != 0) {
    std::fprintf(stderr, "cordon-fs: installing signal handlers failed\n");
    return 1;
  }
  s.handlers = true;
  if (fuse_session_mount(s.se, o.mountpoint.c_str()) != 0) {
    std::fprintf(stderr,
                 "cordon-fs: mounting %s failed (libfuse's reason is above). As a non-root user "
                 "this goes through fusermount3: check it is installed setuid root "
                 "(apt-get install fuse3) and that you own the mountpoint.\n",
                 o.mountpoint.c_str());
    return 1;
  }
  s.mounted = true;
  (*fs)->set_session(s.se);
  std::unique_ptr<ControlServer> control;
  if (!o.control.empty()) {
    auto c = ControlServer::start(o.control, fs->get(), o.snapshots);
    if (!c.ok()) {
      std::fprintf(stderr, "cordon-fs: %s\n", c.error().to_string().c_str());
      return 1;
    }
    control = std::move(c).value();
  }
  // Ready once mounted: the launcher clones the sandbox meanwhile, while the rings below are made
  // (tens of ms: a thread and a registration per CPU queue). Nothing in the sandbox runs before
  // INIT is answered by the loop, and an access that comes earlier waits for it in the kernel.
  if (o.ready_fd >= 0) {
    char one = 1;
    if (::write(o.ready_fd, &one, 1) != 1) {
      std::fprintf(stderr, "cordon-fs: writing to --ready-fd %d: %s\n", o.ready_fd,
                   std::strerror(errno));
    }
    ::close(o.ready_fd);
  }
  // Speed and O_TMPFILE, not safety: without it the view works, slower and without O_TMPFILE.
  InitAdditions init;
  // FUSE passthrough: reads and writes of opened files go straight to the daemon's fd of the
  // upper file (reads also to the lower file), with no round trip per 1 MiB. Writable opens use
  // it only without a byte quota (writes through it never reach the daemon, so they could not be
  // charged); read-only opens always may. Backing files need CAP_SYS_ADMIN in the initial user
  // namespace: a rootless daemon keeps the daemon path.
  if (std::string why = passthrough::unusable_reason(); why.empty()) {
    init.passthrough = true;
  } else {
    std::fprintf(stderr,
                 "cordon-fs: FUSE passthrough off (%s): file data goes through the "
                 "daemon, slower for large sequential I/O\n",
                 why.c_str());
  }
  // FUSE over io_uring: decided once, at INIT. Rings are made now so that a failure falls back
  // before INIT is answered; after that the kernel waits for every CPU queue to register.
  std::unique_ptr<UringTransport> uring;
  TransportChoice choice;
  if (o.no_io_uring) {
    choice.off_reason = "--no-io-uring";
  } else if (!kernel_uring_enabled()) {
    choice.off_reason =
        "the kernel's FUSE io_uring is off: /sys/module/fuse/parameters/enable_uring is not Y; "
        "to use it, as root: echo Y > /sys/module/fuse/parameters/enable_uring (applies to "
        "mounts made afterwards)";
  } else {
    UringOptions uo;
    uo.entries_per_queue = o.uring_entries;
    auto t = UringTransport::prepare(s.se, fs->get(), uo);
    if (t.ok()) {
      uring = std::move(t).value();
      choice.uring = uring.get();
      init.io_uring = true;
    } else {
      choice.off_reason = "io_uring setup failed: " + t.error().to_string();
    }
  }
  set_init_done_handler(on_init_done, &choice);
  if (Status st = add_init_flags(s.se, init, CowFs::tmpfile_handler()); !st.ok()) {
    std::fprintf(stderr, "cordon-fs: warning: %s\n", st.error().to_string().c_str());
  }
  fuse_loop_config loop{};
  loop.clone_fd = 0;
  loop.max_idle_threads = 16;
  // Multi-threaded, one shared /dev/fuse fd: measured against the single-threaded loop and
  // clone_fd on the untar and find benchmarks (2 cores), none was faster beyond noise, and
  // max_idle_threads 1 was 3-10x slower (a thread made and destroyed per burst).
  int rc = fuse_session_loop_mt(s.se, &loop);
  control.reset();  // no rollback can start once the session is gone
  // The ring threads use the session: stop them (closing the rings cancels what they had
  // registered) before the session is unmounted and destroyed.
  if (uring) {
    uring->stop();
  }
  set_init_done_handler(nullptr, nullptr);
  (*fs)->set_session(nullptr);
  (void)events.report_drops();  // cordon-fs's last word in the record
  return rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP ? 0 : 1;
}

}  // namespace cordon::fusefs
