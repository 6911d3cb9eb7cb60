// LaunchPlan: everything `cordon run` will do, decided and validated on the host before any
// namespace exists (parse -> plan -> apply). Immutable once built; the child only replays it.
#pragma once

#include <sys/ioctl.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "launcher/sandbox/env.h"
#include "launcher/sandbox/landlock.h"
#include "policy/policy.h"

namespace cordon::launcher {

// Who the sandbox runs as. Inside and outside use the same number, so a file the program creates
// in an rw workspace is owned on the host by the id the program saw.
struct IdPlan {
  uid_t uid = 0;  // inside == outside
  gid_t gid = 0;
  // Rootless: the invoking user maps itself (setgroups must be denied first). As root: the ids are
  // an unprivileged host id and the child must also setresuid/setresgid/setgroups into them,
  // because its kernel credentials are still host root's until it does.
  bool rootless = true;
  // As root with neither $SUDO_UID nor a workspace owner other than root: the ids are 65534
  // (nobody), who cannot write where root's modes keep others out (LaunchPlan::write_warning).
  bool nobody = false;
};

// Who the sandbox runs as and whose home "~" means (identity.h): chosen from the host facts and
// the workspace's owner before the policy is read for good, since its "~" depends on it.
struct Identity {
  IdPlan ids;
  // The sandbox user's home: what "~" means in the policy and $HOME inside. The invoking user's
  // when the sandbox's uid has no passwd entry.
  std::string home;
  std::string user;  // its login name ($USER, $LOGNAME inside); "" when the uid has none
  // Other homes in play (the invoking user's under sudo, cordon's own $HOME) where they differ
  // from `home`: the policy's "~" rules (the secrets) are denied beneath them too.
  std::vector<std::string> other_homes;
};

enum class MountKind {
  BindRo,      // read-only recursive bind, nosuid, nodev (locked flags of the source kept)
  BindRw,      // read-write recursive bind, nosuid, nodev
  BindDev,     // a device node from the host /dev (nosuid, noexec; NOT nodev, or it stops working)
  Symlink,     // source = link text
  Tmpfs,       // data = mount options; ro = remount read-only once populated
  EtcOverlay,  // read-only overlay: cordon's files over the host's /etc
  Proc,        // a fresh procfs of the sandbox's pid namespace
  Devpts,      // a private devpts instance + /dev/ptmx
  MaskFile,    // an empty read-only file over a host file
  MaskDir,     // an empty read-only directory over a host directory
  Pin,         // target bound onto itself inside the sandbox: a mountpoint cannot be renamed or
               // removed (EBUSY), so a protected path's parents stay where they are
  CowOverlay,  // cow mode: overlayfs, lower = source (the real workspace, never written),
               // upper/work = LaunchPlan::cow_upper/cow_work (the session's upper/ and work/)
  CowFuse,     // cow mode: cordon-fs's view, mounted on the host at LaunchPlan::cow_mount by
               // the launcher (cowfs_sidecar.h) and cloned onto the workspace path
  FsView,      // a read-write directory through a cordon-fs view in direct mode (fs_views.h):
               // LaunchPlan::views[i] with dir == target, cloned like CowFuse
};

// A read-write host directory (a filesystem.write grant, or the workspace in rw mode) in which
// deny-style rules (deny, deny_write, protect) may decide paths, existing or created later. It
// is shown through cordon-fs in direct mode (writes land in `dir` at once; each access decided
// by the policy), mounted on the host at `mountpoint` by the launcher and cloned by the child.
struct FsView {
  std::string dir;         // the host directory, shown at the same path inside
  bool workspace = false;  // the workspace (relative rules apply), else an extra grant
  std::vector<policy::FilesystemPolicy::RuleRef> rules;  // the rules reaching into it
  std::string mountpoint;  // set once the view is mounted (fs_views.h)
};

// A canary's decoy file: written by the sandbox's child into its home (sandbox/decoys.h) and
// watched there for opens (sidecars/canary_watch.h). It exists nowhere on the host.
struct DecoyFile {
  std::string canary;   // its policy name ("aws", "ssh", "dotenv")
  std::string target;   // inside the sandbox, under LaunchPlan::home
  std::string content;  // the decoy itself
};

struct MountOp {
  MountKind kind;
  std::string source;       // host path (binds), link text (Symlink)
  std::string target;       // absolute path inside the sandbox (same as on the host for binds)
  std::string data;         // tmpfs options
  unsigned long flags = 0;  // extra MS_* flags for Tmpfs; MS_NOEXEC also for BindRw/Cow*
  bool ro = false;          // Tmpfs: read-only after everything beneath is mounted
};

// A file cordon writes into the sandbox's /etc (hosts, resolv.conf, ld.so.preload) or an empty
// one that masks a secret (shadow, ...). `path` is relative to /etc.
struct EtcFile {
  std::string path;
  std::string content;
  mode_t mode = 0644;
};

// A network.allow entry naming a service on the host's loopback ("localhost:11434",
// HostPattern::names_host_loopback): inside the sandbox, connections to `net` on these ports are
// captured like any other and the proxy dials the host's own loopback; every other loopback port
// stays the sandbox's own.
struct LoopbackService {
  policy::IpNet net;
  uint16_t port_lo = 0, port_hi = 0;
};

struct LaunchPlan {
  std::vector<std::string> argv;
  std::vector<std::string> envp;  // "K=V", already filtered by process.env
  EnvNotes env_notes;             // what filtering it decided that cordon says at start
  std::string workspace;          // realpath on the host == path inside
  policy::WorkspaceMode mode = policy::WorkspaceMode::Rw;
  std::string cwd;   // inside the sandbox
  std::string home;  // the sandbox user's home (Identity::home): an empty tmpfs inside
  std::string hostname;
  IdPlan ids;
  std::vector<EtcFile> etc_files;
  std::vector<MountOp> mounts;  // in order; targets are sandbox paths
  // Host directories created before the clone, owned by `ids`: an agent preset's state
  // directories that do not exist yet (launcher/agent_plan.h), each a write grant in `mounts`.
  std::vector<std::string> create_dirs;
  // An agent preset's state directories left out because the rules inside them (its settings,
  // hooks) need a cordon-fs view and this host has none: the agent's state stays in the
  // sandbox's home and is gone at exit. Said at start.
  std::vector<std::string> unshown_state;
  bool tty = false;               // stdin is a terminal: relay through a pty
  std::optional<winsize> window;  // the terminal's size at start
  // Where the host's owners and modes keep the program from writing the workspace (rw mode, and
  // cow on kernel overlayfs; cordon-fs's cow view makes the copy the agent's): one line saying so
  // and naming the fix, printed at start and in the summary. Empty otherwise.
  std::string write_warning;
  // cow mode: the session's upper/ and work/ (host paths), set once the session exists. The child
  // opens them before it drops host root's uid (see open_cow_layers_in_child).
  std::string cow_upper;
  std::string cow_work;
  // cow mode through cordon-fs (HostFacts::cow_fuse): the view's host mountpoint (<session>/mnt),
  // cloned by the child before it drops host ids. Path policy is then cordon-fs's, at each lookup.
  bool cow_fuse = false;
  std::string cow_mount;
  std::vector<FsView> views;      // MountKind::FsView's, in order
  std::vector<DecoyFile> decoys;  // the canaries' files (canaries.h)
  // filesystem.write entries the host does not have: not mounted, so what the program writes
  // there stays in the sandbox's own tmpfs and is gone at exit. Said at start.
  std::vector<std::string> absent_write_grants;
  // Write grants of a directory a protect pattern names, with nothing keeping its own files
  // (plan.cc note_protected_grant): one line each, said at start.
  std::vector<std::string> grant_notes;
  uint64_t tmp_size = 0;
  // network.allow not empty (or a decider): the child captures every connection (netns.h) and
  // cordon serves them with cordon-netproxy (net_sidecar.h). Off: only lo, no route, no proxy.
  bool network = false;
  // --decider / --decider-socket: a DNS answer may wait for the decider, so the sandbox's
  // resolver waits as long as glibc allows (30 s) instead of 2 s.
  bool asks_decider = false;
  bool proxy_env = false;  // network.proxy_env: explicit proxy listener + *_PROXY variables
  std::vector<LoopbackService> loopback_services;
  // process.nested_sandbox: the program may make user and mount namespaces (seccomp.h).
  bool nested_sandbox = false;
  // Landlock rules for the program (launcher/sandbox/landlock.h), filled by plan_landlock().
  LandlockPlan landlock;
  policy::Millis timeout{0};
  policy::Millis kill_grace{0};
};

// What the plan reads from the host, gathered in one place so tests can build plans for any
// situation.
struct HostFacts {
  uid_t euid = 0;
  gid_t egid = 0;
  // Whether uid 0 here is the host's root. False as "root" of a user namespace whose uid 0 maps
  // to an unprivileged outer id (rootless containers): cordon then maps itself like any user.
  bool uid0_is_host_root = true;
  std::string cwd;
  std::string home;  // $HOME
  std::optional<uid_t> sudo_uid;
  std::optional<gid_t> sudo_gid;
  std::vector<gid_t> groups;  // supplementary groups (a rootless sandbox keeps them)
  // The user database (getpwuid_r when unset): a uid's login name and home directory.
  struct UserEntry {
    std::string name, home;
  };
  std::function<std::optional<UserEntry>(uid_t)> user_of;
  bool stdin_tty = false;
  std::optional<winsize> window;
  char** env = nullptr;
  // cow mode can go through cordon-fs here (cowfs_unavailable_reason() is empty); set by
  // `cordon run`, not by current(), so plans built in tests keep the kernel overlay.
  bool cow_fuse = false;
  // cordon-fs views in direct mode can be mounted (FsView); else why not, for the refusal. Set
  // by `cordon run` (fs_views_unavailable_reason()).
  bool fs_views = false;
  std::string no_fs_views_reason = "cordon-fs views were not checked for on this host";

  static HostFacts current();
};

// Absolute deny and deny_write rules are matched on paths as the sandbox spells them, and a
// symlink on the host gives one directory two spellings: a grant of the alias shows files a
// deny names by their real path, and the other way round. Adds, for each such rule, its real
// spelling (symlinks in its fixed part resolved on the host, now) and its spelling beneath each
// grant that reaches the same files through another path, so the rule holds however the path is
// written. Globbed rules are resolved in the part before their first glob.
void add_real_deny_spellings(policy::FilesystemPolicy& f);

// The workspace directory `p` names, resolved as build_plan resolves it.
Result<std::string> workspace_path(const policy::Policy& p, const HostFacts& host);

// A repository's hooks directory may be anywhere (`core.hooksPath` in the workspace's
// .git/config, set by many projects' setup scripts), and git runs what it holds on the host. A
// hooks path inside `workspace` is added to filesystem.protect ("<path>/**") when protect is
// not empty; the .git/config itself is protected, so the program cannot move it.
void protect_hooks_path(policy::FilesystemPolicy& f, const std::string& workspace);

// `asks_decider`: a decider (--decider) may allow what network.allow does not, so the sandbox
// gets its network (through the proxy) even when network.allow is empty.
Result<LaunchPlan> build_plan(const policy::Policy& p, const std::vector<std::string>& argv,
                              const HostFacts& host, bool asks_decider = false);

// "/" plus the system directories that are bound read-only (those that exist on this host).
const std::vector<std::string>& system_dirs();

// Whether `path` is `root` or lies beneath it (both absolute and normalised).
bool is_under(const std::string& path, const std::string& root);

}  // namespace cordon::launcher
