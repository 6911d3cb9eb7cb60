// Building the LaunchPlan: validation, identity choice, the mount list and deny expansion, all on
// the host before any namespace exists.
#include "launcher/plan.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>

#include "launcher/env.h"
#include "launcher/netns.h"

namespace cordon::launcher {
namespace {

namespace fs = std::filesystem;
using policy::WorkspaceMode;

// Upper bound on the workspace walk that expands relative deny globs at start. Past it cordon
// refuses rather than silently leaving some matches unmasked (fail closed).
constexpr size_t kMaxWalkEntries = 200000;

std::optional<uint32_t> env_id(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  unsigned long n = std::strtoul(v, &end, 10);
  if (errno != 0 || *end != '\0' || n > UINT32_MAX) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(n);
}

size_t depth(const std::string& p) {
  return static_cast<size_t>(std::count(p.begin(), p.end(), '/'));
}

bool is_under(const std::string& path, const std::string& root) {
  if (root == "/") {
    return true;
  }
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

std::string expand_home(const std::string& p, const std::string& home) {
  if (p == "~") {
    return home;
  }
  if (p.rfind("~/", 0) == 0) {
    return home + p.substr(1);
  }
  return p;
}

Result<std::string> resolve_dir(const std::string& what, const std::string& path,
                                const std::string& cwd) {
  std::string abs = path.empty() || path[0] == '/' ? path : cwd + "/" + path;
  char buf[PATH_MAX];
  if (::realpath(abs.c_str(), buf) == nullptr) {
    return sys_error(what + " \"" + path + "\" (" + abs + "): realpath",
                     "check that it exists and that you can reach it");
  }
  struct stat st {};
  if (::stat(buf, &st) != 0) {
    return sys_error(what + " \"" + path + "\": stat(\"" + std::string(buf) + "\")");
  }
  if (!S_ISDIR(st.st_mode)) {
    return make_error(what + " \"" + path + "\" (" + buf + ") is not a directory");
  }
  return std::string(buf);
}

// Reads /proc/self/uid_map: is inside uid 0 mapped to outside uid 0? In the initial namespace
// ("0 0 4294967295") it is. A namespace whose 0 maps to another id cannot make anyone host root.
bool uid0_maps_to_root() {
  FILE* f = std::fopen("/proc/self/uid_map", "re");
  if (f == nullptr) {
    return true;  // cannot tell: keep the strict, as-root behaviour
  }
  unsigned long inside = 0, outside = 0, count = 0;
  bool root = true;
  while (std::fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3) {
    if (inside == 0 && count > 0) {
      root = outside == 0;
    }
  }
  std::fclose(f);
  return root;
}

IdPlan choose_ids(const HostFacts& host, const struct stat& ws) {
  IdPlan ids;
  if (host.euid != 0 || !host.uid0_is_host_root) {
    // Rootless (or "root" of a user namespace that is no host root): the invoking user maps
    // itself; an unprivileged id like 65534 is usually not even mapped there.
    ids.rootless = true;
    ids.uid = host.euid;
    ids.gid = host.egid;
    return ids;
  }
  // As root the sandbox must never be host uid 0: pick the user who invoked sudo, else the
  // workspace's owner, else nobody.
  ids.rootless = false;
  if (host.sudo_uid && *host.sudo_uid != 0) {
    ids.uid = *host.sudo_uid;
    ids.gid = host.sudo_gid && *host.sudo_gid != 0 ? *host.sudo_gid : 65534;
  } else if (ws.st_uid != 0) {
    ids.uid = ws.st_uid;
    ids.gid = ws.st_gid != 0 ? ws.st_gid : 65534;
  } else {
    ids.uid = 65534;
    ids.gid = 65534;
    ids.nobody = true;
  }
  return ids;
}

// Whether `ids` (with `groups`, the supplementary groups they keep) may write a directory of
// attributes `st` by its mode bits, as the kernel decides for anyone without CAP_DAC_OVERRIDE
// (ACLs aside).
bool mode_allows_write(const struct stat& st, const IdPlan& ids, const std::vector<gid_t>& groups) {
  if (st.st_uid == ids.uid) {
    return (st.st_mode & S_IWUSR) != 0;
  }
  if (st.st_gid == ids.gid || std::find(groups.begin(), groups.end(), st.st_gid) != groups.end()) {
    return (st.st_mode & S_IWGRP) != 0;
  }
  return (st.st_mode & S_IWOTH) != 0;
}

// The line said when the program cannot write the workspace because the host's owners and modes
// apply to it: rw mode, and cow on kernel overlayfs. Through cordon-fs the copy is the agent's
// (its owner's files are shown as the sandbox user's), so nothing needs saying there.
std::string write_warning(const LaunchPlan& plan, const struct stat& ws, const HostFacts& host) {
  bool host_modes =
      plan.mode == WorkspaceMode::Rw || (plan.mode == WorkspaceMode::Cow && !plan.cow_fuse);
  // As root the sandbox drops every supplementary group; rootless it keeps the user's.
  static const std::vector<gid_t> none;
  if (!host_modes || mode_allows_write(ws, plan.ids, plan.ids.rootless ? host.groups : none)) {
    return "";
  }
  std::string where = plan.mode == WorkspaceMode::Rw
                          ? "in --mode rw"
                          : "in copy-on-write on kernel overlayfs (cordon-fs is not usable here)";
  std::string fix = plan.mode == WorkspaceMode::Rw
                        ? "use --mode cow (the default: the agent changes its own copy, which "
                          "cordon diff shows and cordon commit applies)"
                        : "make cordon-fs usable (the line above says why it is not; through "
                          "it the agent changes its own copy)";
  if (plan.ids.nobody) {
    return "the program runs as uid 65534 (nobody): as root, cordon never runs it as host uid 0, "
           "and neither $SUDO_UID nor the workspace's owner (root) names another user, so " +
           where + " it cannot create or change what root's modes keep from others; " + fix +
           ", run cordon as the workspace's owner or through sudo, or chown the workspace to the "
           "user the agent should act as";
  }
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(ws.st_mode & 07777));
  std::string uid = std::to_string(plan.ids.uid);
  return "the program runs as uid " + uid + ", who cannot write the workspace " + plan.workspace +
         " (owner uid " + std::to_string(ws.st_uid) + ", mode " + mode + ") " + where + "; " + fix +
         ", or give uid " + uid + " write access to it (chown or chmod)";
}

// /etc files that hold secrets on common distributions. Masked when present (the sandbox user
// normally cannot read them anyway; this keeps it so if the sandbox ever runs with more rights).
const char* const kEtcSecretFiles[] = {
    "shadow",           "gshadow",          "shadow-",           "gshadow-",
    "sudoers",          "security/opasswd", "krb5.keytab",       "ipsec.secrets",
    "ppp/chap-secrets", "ppp/pap-secrets",  "machine-id.secret",
};
const char* const kEtcSecretDirs[] = {
    "sudoers.d", "ssl/private",    "NetworkManager/system-connections",
    "wireguard", "openvpn/server", "libvirt/secrets",
    "cups/ssl",
};

// With network, any nameserver address will do: the capture ruleset redirects UDP and TCP port 53
// to the proxy's DNS responder (netns.h). A short timeout: an unanswered query fails in 2 s, not
// 5 s x 2 tries. Without network, 127.0.0.1 refuses at once.
std::string sandbox_resolv_conf(bool network) {
  if (!network) {
    return "nameserver 127.0.0.1\n";
  }
  return std::string("nameserver ") + kSandboxNameserver + "\noptions timeout:2 attempts:1\n";
}

// network.proxy_env: proxy-aware clients hand the explicit proxy names instead of addresses.
// Replaces the host's own proxy variables (kept ones would point at a proxy the sandbox cannot
// reach). Loopback is the sandbox's own and goes direct.
void add_proxy_environment(std::vector<std::string>& envp) {
  const std::string http = "http://127.0.0.1:" + std::to_string(kExplicitProxyPort);
  const std::string socks = "socks5h://127.0.0.1:" + std::to_string(kExplicitProxyPort);
  const std::pair<const char*, std::string> vars[] = {
      {"HTTP_PROXY", http},  {"HTTPS_PROXY", http},  {"ALL_PROXY", socks},
      {"NO_PROXY", "localhost,127.0.0.1,::1"},
      {"http_proxy", http},  {"https_proxy", http},  {"all_proxy", socks},
      {"no_proxy", "localhost,127.0.0.1,::1"}};
  std::erase_if(envp, [&](const std::string& kv) {
    for (const auto& [name, value] : vars) {
      size_t n = std::strlen(name);
      if (kv.size() > n && kv.compare(0, n, name) == 0 && kv[n] == '=') {
        return true;
      }
    }
    return false;
  });
  for (const auto& [name, value] : vars) {
    envp.push_back(std::string(name) + "=" + value);
  }
}

void plan_etc(const std::string& hostname, LaunchPlan& plan) {
  plan.etc_files.push_back({"hosts",
                            "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost " + hostname +
                                " ip6-localhost ip6-loopback\n",
                            0644});
  plan.etc_files.push_back({"resolv.conf", sandbox_resolv_conf(plan.network), 0644});
  // Empty for now; the preload-shim issue fills it (an /etc file, so it survives env scrubbing).
  plan.etc_files.push_back({"ld.so.preload", "", 0644});
  plan.etc_files.push_back({"hostname", hostname + "\n", 0644});

  struct stat st {};
  for (const char* f : kEtcSecretFiles) {
    if (::lstat((std::string("/etc/") + f).c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      plan.etc_files.push_back({f, "", 0});
    }
  }
  if (DIR* d = ::opendir("/etc/ssh")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      // ssh_host_*_key are private; the .pub halves are public.
      if (n.rfind("ssh_host_", 0) == 0 && n.size() > 4 && n.compare(n.size() - 4, 4, "_key") == 0) {
        plan.etc_files.push_back({"ssh/" + n, "", 0});
      }
    }
    ::closedir(d);
  }
  plan.mounts.push_back({MountKind::EtcOverlay, "/etc", "/etc"});
  for (const char* dname : kEtcSecretDirs) {
    std::string p = std::string("/etc/") + dname;
    if (::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      plan.mounts.push_back({MountKind::MaskDir, "", p});
    }
  }
}

void plan_dev(LaunchPlan& plan) {
  plan.mounts.push_back(
      {MountKind::Tmpfs, "", "/dev", "mode=0755,size=64k", MS_NOSUID | MS_NOEXEC, /*ro=*/true});
  for (const char* d : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string p = std::string("/dev/") + d;
    plan.mounts.push_back({MountKind::BindDev, p, p});
  }
  plan.mounts.push_back({MountKind::Devpts, "", "/dev/pts"});
  plan.mounts.push_back(
      {MountKind::Tmpfs, "", "/dev/shm", "mode=1777,size=64m", MS_NOSUID | MS_NODEV, false});
  plan.mounts.push_back({MountKind::Symlink, "/proc/self/fd", "/dev/fd"});
  plan.mounts.push_back({MountKind::Symlink, "/proc/self/fd/0", "/dev/stdin"});
  plan.mounts.push_back({MountKind::Symlink, "/proc/self/fd/1", "/dev/stdout"});
  plan.mounts.push_back({MountKind::Symlink, "/proc/self/fd/2", "/dev/stderr"});
}

struct DenyCtx {
  const policy::FilesystemPolicy& fsp;
  bool rw;          // writable workspace: cow or rw
  bool direct = false;  // rw: writes land in the real workspace at once
};

// Pins every directory between the workspace root and `rel` (exclusive), outermost first, once.
// A read-only bind on `.git/config` alone does not hold: `mv .git .git.old` carries the bind
// away and a fresh `.git/config` is writable. Found by attack (tests/launcher/escape_test.cc).
void pin_ancestors(const std::string& ws, const std::string& rel, std::set<std::string>& pinned,
                   LaunchPlan& plan) {
  for (size_t pos = rel.find('/'); pos != std::string::npos; pos = rel.find('/', pos + 1)) {
    std::string abs = ws + "/" + rel.substr(0, pos);
    if (pinned.insert(abs).second) {
      plan.mounts.push_back({MountKind::Pin, "", abs});
    }
  }
}

// The literal directory part of a relative pattern: ".git/modules/**" -> ".git/modules";
// "**/.envrc" -> "".
std::string literal_prefix(const std::string& pattern) {
  std::string out;
  size_t start = 0;
  while (start < pattern.size()) {
    size_t end = pattern.find('/', start);
    std::string seg = pattern.substr(start, end == std::string::npos ? end : end - start);
    if (seg.find_first_of("*?[") != std::string::npos) {
      break;
    }
    out += (out.empty() ? "" : "/") + seg;
    if (end == std::string::npos) {
      break;
    }
    start = end + 1;
  }
  return out;
}

// A relative pattern as it applies below one directory: "**/.git/commondir" holds at any depth,
// so below each directory named ".git" it means ".git/commondir"; an anchored pattern applies
// at the workspace root only. "" when the pattern says nothing there.
std::string anchored_at(const policy::PathPattern& pat, bool root) {
  const std::string& e = pat.expanded;
  if (e.rfind("**/", 0) == 0) {
    return e.substr(3);
  }
  return root ? e : "";
}

// rw mode: a protected path that does not exist yet (".git/commondir", which would point the
// host's git at a planted config) cannot be covered by a bind, so its nearest existing directory
// below the workspace root becomes read-only instead. In practice `.git` turns read-only in rw
// mode: agents that commit belong in cow mode, where nothing reaches the host before review.
// `base` is where the pattern applies: "" for the workspace root, or the parent of a directory
// the walk found whose name starts a "**/" pattern (`sub` for `sub/.git`: a nested repository).
void protect_absent_paths(const std::string& ws, const std::string& base,
                          const std::vector<policy::PathPattern>& pats,
                          std::set<std::string>& pinned, std::set<std::string>& sealed,
                          LaunchPlan& plan, const std::string& first_segment = "") {
  for (const auto& pat : pats) {
    if (pat.absolute) {
      continue;
    }
    std::string lit = literal_prefix(anchored_at(pat, base.empty() && first_segment.empty()));
    if (lit.empty() || (!first_segment.empty() && lit.substr(0, lit.find('/')) != first_segment)) {
      continue;
    }
    if (!base.empty()) {
      lit = base + "/" + lit;
    }
    struct stat st {};
    if (::lstat((ws + "/" + lit).c_str(), &st) == 0) {
      continue;  // it exists and the walk covered it
    }
    while (!lit.empty()) {
      size_t cut = lit.rfind('/');
      lit = cut == std::string::npos ? "" : lit.substr(0, cut);
      if (lit.empty()) {
        break;  // only the workspace root is left: sealing it would make rw mode ro
      }
      std::string abs = ws + "/" + lit;
      if (::lstat(abs.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode) && sealed.insert(abs).second) {
          pin_ancestors(ws, lit, pinned, plan);
          plan.mounts.push_back({MountKind::BindRo, abs, abs});
        }
        break;
      }
    }
  }
}

bool any_match(const std::vector<policy::PathPattern>& pats, const std::string& rel,
               const std::string& abs) {
  for (const auto& p : pats) {
    if (p.matches(p.absolute ? abs : rel)) {
      return true;
    }
  }
  return false;
}

// Walks the workspace once and masks what filesystem.deny names (and, in rw and cow mode,
// write-protects what deny_write/protect name). Only paths that exist now are covered: a file
// created later at a denied path is not masked (cordon-fs will enforce the rules on those).
Status plan_workspace_rules(const std::string& ws, const DenyCtx& ctx, LaunchPlan& plan) {
  const auto& f = ctx.fsp;
  bool need_walk = !f.deny.empty() || (ctx.rw && (!f.deny_write.empty() || !f.protect.empty()));
  if (!need_walk) {
    return {};
  }
  std::error_code ec;
  fs::recursive_directory_iterator it(ws, fs::directory_options::skip_permission_denied, ec);
  if (ec) {
    return make_error("walking the workspace " + ws + " for filesystem.deny: " + ec.message());
  }
  size_t n = 0;
  std::set<std::string> pinned, sealed;
  if (ctx.direct) {
    protect_absent_paths(ws, "", f.protect, pinned, sealed, plan);
    protect_absent_paths(ws, "", f.deny_write, pinned, sealed, plan);
  }
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) {
      return make_error("walking the workspace " + ws + " for filesystem.deny: " + ec.message());
    }
    if (++n > kMaxWalkEntries) {
      return make_error("the workspace " + ws + " has more than " +
                            std::to_string(kMaxWalkEntries) +
                            " entries; cordon will not start with filesystem.deny patterns it "
                            "could not apply to all of them",
                        "use a smaller workspace or --mode cow");
    }
    const fs::path& p = it->path();
    std::string abs = p.string();
    std::string rel = abs.substr(ws == "/" ? 1 : ws.size() + 1);
    auto st = it->symlink_status(ec);
    if (ec) {
      continue;
    }
    // A symlink is resolved inside the sandbox, where its target is masked or absent on its own.
    if (fs::is_symlink(st)) {
      continue;
    }
    bool dir = fs::is_directory(st);
    if (ctx.direct && dir && rel.find('/') != std::string::npos) {
      // A nested `.git` (or `.vscode`, ...): the "**/" patterns' absent paths below it too.
      std::string name = rel.substr(rel.rfind('/') + 1);
      std::string parent = rel.substr(0, rel.rfind('/'));
      protect_absent_paths(ws, parent, f.protect, pinned, sealed, plan, name);
      protect_absent_paths(ws, parent, f.deny_write, pinned, sealed, plan, name);
    }
    if (any_match(f.deny, rel, abs)) {
      plan.mounts.push_back({dir ? MountKind::MaskDir : MountKind::MaskFile, "", abs});
      if (dir) {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (ctx.rw && (any_match(f.deny_write, rel, abs) || any_match(f.protect, rel, abs))) {
      pin_ancestors(ws, rel, pinned, plan);
      plan.mounts.push_back({MountKind::BindRo, abs, abs});
      if (dir) {
        it.disable_recursion_pending();
      }
    }
  }
  return {};
}

}  // namespace

HostFacts HostFacts::current() {
  HostFacts h;
  h.euid = ::geteuid();
  h.egid = ::getegid();
  h.uid0_is_host_root = h.euid != 0 || uid0_maps_to_root();
  char buf[PATH_MAX];
  if (::getcwd(buf, sizeof buf) != nullptr) {
    h.cwd = buf;
  }
  if (const char* home = std::getenv("HOME")) {
    h.home = home;
  }
  if (auto u = env_id("SUDO_UID")) {
    h.sudo_uid = *u;
  }
  if (auto g = env_id("SUDO_GID")) {
    h.sudo_gid = *g;
  }
  int n = ::getgroups(0, nullptr);
  if (n > 0) {
    h.groups.resize(static_cast<size_t>(n));
    n = ::getgroups(n, h.groups.data());
    h.groups.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  h.stdin_tty = ::isatty(0) == 1;
  if (h.stdin_tty) {
    winsize ws{};
    if (::ioctl(0, TIOCGWINSZ, &ws) == 0) {
      h.window = ws;
    }
  }
  h.env = environ;
  return h;
}

const std::vector<std::string>& system_dirs() {
  static const std::vector<std::string> dirs = {"/usr",   "/bin",   "/sbin",  "/lib",
                                                "/lib32", "/lib64", "/libx32"};
  return dirs;
}

Result<LaunchPlan> build_plan(const policy::Policy& p, const std::vector<std::string>& argv,
                              const HostFacts& host) {
  LaunchPlan plan;
  if (argv.empty() || argv[0].empty()) {
    return make_error("no command given", "usage: cordon run [OPTIONS] -- CMD [ARGS...]");
  }
  plan.argv = argv;

  // Network on only when something is allowed: otherwise no proxy, no route (ENETUNREACH at once).
  plan.network = !p.network.allow.empty();
  plan.proxy_env = plan.network && p.network.proxy_env;
  switch (p.filesystem.mode) {
    case WorkspaceMode::Cow:  // cordon-fs (HostFacts::cow_fuse), else kernel overlayfs
    case WorkspaceMode::Ro:
    case WorkspaceMode::Rw:
      plan.mode = p.filesystem.mode;
      break;
  }
  if (host.cwd.empty()) {
    return make_error("getcwd failed: the current directory is gone",
                      "cd to an existing directory or pass --workspace with an absolute path");
  }

  std::string ws_text = p.filesystem.workspace.empty() ? "." : p.filesystem.workspace;
  ASSIGN_OR_RETURN(plan.workspace,
                   resolve_dir("workspace", expand_home(ws_text, host.home), host.cwd));
  if (plan.workspace == "/") {
    return make_error("workspace \"" + ws_text +
                          "\" resolves to \"/\": that would put the whole "
                          "host in the sandbox",
                      "pass --workspace DIR naming the project directory");
  }
  std::string home;
  if (!host.home.empty() && host.home[0] == '/') {
    char buf[PATH_MAX];
    home = ::realpath(host.home.c_str(), buf) != nullptr ? std::string(buf) : host.home;
  }
  if (!home.empty() && home != "/" && plan.workspace == home && plan.mode == WorkspaceMode::Rw) {
    return make_error("workspace \"" + ws_text + "\" is your home directory " + home +
                          "; read-write it would hand the sandbox your keys and dotfiles",
                      "use --workspace with a project directory, or --mode ro");
  }
  for (size_t i = 0; i < p.filesystem.deny.size(); ++i) {
    const auto& d = p.filesystem.deny[i];
    if (d.absolute && d.matches(plan.workspace)) {
      return make_error("workspace " + plan.workspace + " is denied by filesystem.deny[" +
                        std::to_string(i) + "] (\"" + d.text + "\")");
    }
  }
  struct stat ws_st {};
  if (::stat(plan.workspace.c_str(), &ws_st) != 0) {
    return sys_error("stat(\"" + plan.workspace + "\")");
  }
  plan.ids = choose_ids(host, ws_st);
  plan.cwd = is_under(host.cwd, plan.workspace) ? host.cwd : plan.workspace;
  plan.home = home;
  plan.hostname = p.process.hostname.empty() ? "cordon" : p.process.hostname;
  plan.tty = host.stdin_tty;
  plan.window = host.window;
  plan.tmp_size = p.filesystem.tmp;
  plan.timeout = p.process.timeout;
  plan.kill_grace = p.process.kill_grace;
  plan.envp = build_environment(p.process.env, host.env);
  if (plan.proxy_env) {
    add_proxy_environment(plan.envp);
  }

  // The system: read-only binds of what exists, symlinks (usr-merged /bin -> usr/bin) as symlinks.
  for (const auto& d : system_dirs()) {
    struct stat st {};
    if (::lstat(d.c_str(), &st) != 0) {
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      char buf[PATH_MAX];
      ssize_t n = ::readlink(d.c_str(), buf, sizeof buf - 1);
      if (n < 0) {
        return sys_error("readlink(\"" + d + "\")");
      }
      plan.mounts.push_back({MountKind::Symlink, std::string(buf, static_cast<size_t>(n)), d});
    } else if (S_ISDIR(st.st_mode)) {
      plan.mounts.push_back({MountKind::BindRo, d, d});
    }
  }
  plan_etc(plan.hostname, plan);
  plan.mounts.push_back({MountKind::Proc, "", "/proc"});
  plan_dev(plan);

  // The user layer, parents before children: /tmp, an empty $HOME, the workspace, extra paths.
  std::vector<MountOp> user;
  user.push_back({MountKind::Tmpfs, "", "/tmp",
                  "mode=1777,size=" + std::to_string(std::max<uint64_t>(p.filesystem.tmp, 4096)),
                  MS_NOSUID | MS_NODEV | MS_NOEXEC, false});
  if (!home.empty() && home != "/" && home != "/tmp") {
    user.push_back({MountKind::Tmpfs, "", home,
                    "mode=0700,size=" + std::to_string(std::max<uint64_t>(p.filesystem.tmp, 4096)) +
                        ",uid=" + std::to_string(plan.ids.uid) +
                        ",gid=" + std::to_string(plan.ids.gid),
                    MS_NOSUID | MS_NODEV, false});
  }
  MountKind ws_kind = plan.mode == WorkspaceMode::Rw    ? MountKind::BindRw
                      : plan.mode == WorkspaceMode::Cow ? MountKind::CowOverlay
                                                        : MountKind::BindRo;
  if (plan.mode == WorkspaceMode::Cow && host.cow_fuse) {
    ws_kind = MountKind::CowFuse;
    plan.cow_fuse = true;
  }
  user.push_back({ws_kind, plan.workspace, plan.workspace});
  plan.write_warning = write_warning(plan, ws_st, host);
  std::optional<Error> extra_error;
  auto extra = [&](const std::vector<policy::PathPattern>& pats, MountKind kind,
                   const char* field) {
    for (size_t i = 0; i < pats.size(); ++i) {
      const auto& pat = pats[i];
      // Globs and workspace-relative entries need no mount of their own: relative ones are in the
      // workspace already; absolute globs are not expanded on the host (too broad to walk).
      if (!pat.absolute || pat.has_glob) {
        continue;
      }
      struct stat st {};
      if (::stat(pat.expanded.c_str(), &st) != 0) {
        if (errno == ENOENT) {
          continue;  // an optional extra (e.g. ~/.gitconfig) that this host does not have
        }
        if (!extra_error) {
          extra_error = sys_error(std::string(field) + "[" + std::to_string(i) + "] \"" + pat.text +
                                      "\": stat(\"" + pat.expanded + "\")",
                                  "cordon runs as you: grant only paths you can reach");
        }
        continue;
      }
      if (any_match(p.filesystem.deny, "", pat.expanded)) {
        continue;  // deny wins over read/write
      }
      user.push_back({kind, pat.expanded, pat.expanded});
    }
  };
  extra(p.filesystem.read, MountKind::BindRo, "filesystem.read");
  extra(p.filesystem.write, MountKind::BindRw, "filesystem.write");
  if (extra_error) {
    return *extra_error;
  }
  std::stable_sort(user.begin(), user.end(), [](const MountOp& a, const MountOp& b) {
    return depth(a.target) < depth(b.target);
  });
  plan.mounts.insert(plan.mounts.end(), user.begin(), user.end());

  // Deny rules last, so they cover whatever an allow rule made visible.
  // Masks and read-only binds land on top of the workspace mount, the overlay in cow mode too.
  // Through cordon-fs, workspace-relative rules are decided at each lookup (files created later
  // included); only absolute patterns that reach into the workspace still need start-time masks.
  policy::FilesystemPolicy walk_rules = p.filesystem;
  if (plan.cow_fuse) {
    for (auto* pats : {&walk_rules.deny, &walk_rules.deny_write, &walk_rules.protect}) {
      std::erase_if(*pats, [](const policy::PathPattern& pat) { return !pat.absolute; });
    }
  }
  TRY(plan_workspace_rules(plan.workspace, DenyCtx{walk_rules, plan.mode != WorkspaceMode::Ro,
                                   plan.mode == WorkspaceMode::Rw},
                           plan));
  for (const auto& d : p.filesystem.deny) {
    if (!d.absolute || d.has_glob || is_under(d.expanded, plan.workspace)) {
      continue;  // globs and workspace paths were handled by the walk
    }
    bool visible = false;
    for (const auto& m : user) {
      if ((m.kind == MountKind::BindRo || m.kind == MountKind::BindRw ||
           m.kind == MountKind::CowOverlay || m.kind == MountKind::CowFuse) &&
          is_under(d.expanded, m.source) && d.expanded != m.source) {
        visible = true;
      }
    }
    struct stat st {};
    if (visible && ::lstat(d.expanded.c_str(), &st) == 0 && !S_ISLNK(st.st_mode)) {
      plan.mounts.push_back(
          {S_ISDIR(st.st_mode) ? MountKind::MaskDir : MountKind::MaskFile, "", d.expanded});
    }
  }
  return plan;
}

}  // namespace cordon::launcher
