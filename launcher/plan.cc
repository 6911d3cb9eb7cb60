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
#include <fstream>
#include <set>
#include <system_error>

#include "launcher/agent_plan.h"
#include "launcher/identity.h"
#include "launcher/sandbox/env.h"
#include "launcher/sandbox/netns.h"

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

// The host's environment with the variables that name the user (HOME, USER, LOGNAME) saying who
// the sandbox runs as, for build_environment: under sudo they name root, whose home is not the
// program's. The pointers are into `host_env` and `storage`, which must outlive the result.
std::vector<char*> sandbox_user_env(char** host_env, const Identity& ident,
                                    std::vector<std::string>& storage) {
  storage.clear();
  if (!ident.home.empty()) {
    storage.push_back("HOME=" + ident.home);
  }
  if (!ident.user.empty()) {
    storage.push_back("USER=" + ident.user);
    storage.push_back("LOGNAME=" + ident.user);
  }
  std::vector<char*> out;
  for (auto& kv : storage) {
    out.push_back(kv.data());
  }
  for (char** e = host_env; e != nullptr && *e != nullptr; ++e) {
    out.push_back(*e);  // after ours: the first occurrence wins
  }
  out.push_back(nullptr);
  return out;
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
// 5 s x 2 tries; with a decider, whose answer a lookup may wait for, glibc's longest (30 s).
// Without network, 127.0.0.1 refuses at once.
std::string sandbox_resolv_conf(bool network, bool asks_decider) {
  if (!network) {
    return "nameserver 127.0.0.1\n";
  }
  return std::string("nameserver ") + kSandboxNameserver +
         "\noptions timeout:" + (asks_decider ? "30" : "2") + " attempts:1\n";
}

// network.proxy_env: proxy-aware clients hand the explicit proxy names instead of addresses.
// Replaces the host's own proxy variables (kept ones would point at a proxy the sandbox cannot
// reach). Loopback is the sandbox's own and goes direct.
void add_proxy_environment(std::vector<std::string>& envp) {
  const std::string http = "http://127.0.0.1:" + std::to_string(kExplicitProxyPort);
  const std::string socks = "socks5h://127.0.0.1:" + std::to_string(kExplicitProxyPort);
  const std::pair<const char*, std::string> vars[] = {
      {"HTTP_PROXY", http}, {"HTTPS_PROXY", http},
      {"ALL_PROXY", socks}, {"NO_PROXY", "localhost,127.0.0.1,::1"},
      {"http_proxy", http}, {"https_proxy", http},
      {"all_proxy", socks}, {"no_proxy", "localhost,127.0.0.1,::1"}};
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

// network.allow entries naming the host's loopback become capture rules for exactly their
// addresses and ports. The ports cordon itself listens on inside the sandbox stay its own.
Status plan_loopback_services(const policy::NetworkPolicy& n, LaunchPlan& plan) {
  static const policy::IpNet kV4{policy::IpAddress::from_v4(0x7f000001), 32};
  static const policy::IpNet kV6{*policy::IpAddress::parse("::1"), 128};
  for (size_t i = 0; i < n.allow.size(); ++i) {
    const auto& a = n.allow[i];
    if (!a.names_host_loopback()) {
      continue;
    }
    for (uint16_t own : {kTransparentPort, kDnsPort, kExplicitProxyPort}) {
      if (a.matches_port(own)) {
        return make_error("network.allow[" + std::to_string(i) + "] \"" + a.text +
                              "\" includes port " + std::to_string(own) +
                              ", which cordon's proxy uses on the sandbox's own loopback",
                          "name the ports of the host's service without it");
      }
    }
    std::vector<policy::IpNet> nets;
    if (a.kind == policy::HostPattern::Kind::Exact) {
      nets = {kV4, kV6};  // what "localhost" stands for
    } else {
      nets = {a.net};
    }
    for (const auto& net : nets) {
      plan.loopback_services.push_back({net, a.port_lo, a.port_hi});
    }
  }
  if (plan.loopback_services.size() > 32) {
    return make_error("network.allow names more than 32 host loopback services",
                      "name port ranges instead of single ports");
  }
  return {};
}

void plan_etc(const std::string& hostname, LaunchPlan& plan) {
  plan.etc_files.push_back({"hosts",
                            "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost " + hostname +
                                " ip6-localhost ip6-loopback\n",
                            0644});
  plan.etc_files.push_back(
      {"resolv.conf", sandbox_resolv_conf(plan.network, plan.asks_decider), 0644});
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
  bool rw;  // writable workspace (cow on kernel overlayfs): deny_write/protect become read-only
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

bool any_match(const std::vector<policy::PathPattern>& pats, const std::string& rel,
               const std::string& abs) {
  for (const auto& p : pats) {
    if (p.matches(p.absolute ? abs : rel)) {
      return true;
    }
  }
  return false;
}

// Walks the tree at `root` (symlinks not followed: inside the sandbox one is resolved to its
// target, which is masked or absent on its own), calling visit(abs, rel, is_dir) for each entry;
// visit returns false to leave a directory unvisited. Fails closed past `budget` entries in all.
template <typename Visit>
Status walk_tree(const std::string& root, const char* what, size_t& budget, Visit visit) {
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  auto failed = [&] {
    return make_error(std::string("walking ") + what + " " + root +
                      " for filesystem.deny: " + ec.message());
  };
  if (ec) {
    return failed();
  }
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) {
      return failed();
    }
    if (budget == 0) {
      return make_error(std::string(what) + " " + root +
                            " and the other trees walked hold more than " +
                            std::to_string(kMaxWalkEntries) +
                            " entries; cordon will not start with filesystem.deny patterns it "
                            "could not apply to all of them",
                        "use a smaller workspace or grant, or --mode cow");
    }
    --budget;
    std::string abs = it->path().string();
    std::string rel = abs.substr(root == "/" ? 1 : root.size() + 1);
    auto st = it->symlink_status(ec);
    if (ec || fs::is_symlink(st)) {
      continue;
    }
    bool dir = fs::is_directory(st);
    if (!visit(abs, rel, dir) && dir) {
      it.disable_recursion_pending();
    }
  }
  return {};
}

// Without a cordon-fs view of the workspace (ro; cow on kernel overlayfs): walks it once and
// masks what filesystem.deny names and, in cow mode, makes what deny_write/protect name
// read-only. Only paths that exist now are covered: ro creates nothing, and in cow mode whatever
// the program creates stays in the session's layer until `cordon commit`.
Status plan_workspace_rules(const std::string& ws, const DenyCtx& ctx, size_t& budget,
                            LaunchPlan& plan) {
  const auto& f = ctx.fsp;
  auto reaching = f.rules_beneath(ws, true);
  bool need_walk = std::any_of(reaching.begin(), reaching.end(), [&](const auto& r) {
    return ctx.rw || r.rule.rfind("filesystem.deny[", 0) == 0;
  });
  if (!need_walk) {
    return {};
  }
  std::set<std::string> pinned;
  return walk_tree(
      ws, "the workspace", budget, [&](const std::string& abs, const std::string& rel, bool dir) {
        if (any_match(f.deny, rel, abs)) {
          plan.mounts.push_back({dir ? MountKind::MaskDir : MountKind::MaskFile, "", abs});
          return false;
        }
        if (ctx.rw && (any_match(f.deny_write, rel, abs) || any_match(f.protect, rel, abs))) {
          pin_ancestors(ws, rel, pinned, plan);
          plan.mounts.push_back({MountKind::BindRo, abs, abs});
          return false;
        }
        return true;
      });
}

// A directory shown read-only (a filesystem.read grant, or a write grant a deny_write rule
// covers): nothing can be created in it from inside, so masking what filesystem.deny names
// now holds for the whole session.
Status mask_denied_beneath(const std::string& dir, const policy::FilesystemPolicy& f,
                           size_t& budget, LaunchPlan& plan) {
  auto reaching = f.rules_beneath(dir, false);
  if (std::none_of(reaching.begin(), reaching.end(),
                   [](const auto& r) { return r.rule.rfind("filesystem.deny[", 0) == 0; })) {
    return {};
  }
  return walk_tree(
      dir, "the granted directory", budget,
      [&](const std::string& abs, const std::string&, bool is_dir) {
        policy::Decision d = f.decide_read(abs);
        if (!d.allow && d.rule.rfind("filesystem.deny[", 0) == 0) {
          plan.mounts.push_back({is_dir ? MountKind::MaskDir : MountKind::MaskFile, "", abs});
          return false;
        }
        return true;
      });
}

// "filesystem.deny_write[0] (\"~/.claude/settings.json\") and 9 more"
std::string rules_text(const std::vector<policy::FilesystemPolicy::RuleRef>& rules) {
  if (rules.empty()) {
    return "no rule";
  }
  std::string out = rules.front().rule + " (\"" + rules.front().text + "\")";
  if (rules.size() > 1) {
    out += " and " + std::to_string(rules.size() - 1) + " more";
  }
  return out;
}

// A read-write directory (a write grant, the rw workspace) in which deny-style rules may decide
// paths, existing or created later: only a cordon-fs view decides those at every access (a bind
// covers what exists at start, and the program may create, rename into place and link). Where
// no view can run, cordon refuses to start rather than hold the rules for some paths only.
Status plan_view(const std::string& dir, bool workspace, const std::string& what,
                 const std::vector<policy::FilesystemPolicy::RuleRef>& rules, const HostFacts& host,
                 std::vector<MountOp>& user, LaunchPlan& plan) {
  if (!host.fs_views) {
    return make_error(
        what + ": " + rules_text(rules) +
            " must hold inside it for what the program creates there too, which takes a "
            "cordon-fs view, and " +
            host.no_fs_views_reason,
        "run where cordon-fs can mount (as root, or with read-write access to /dev/fuse), " +
            std::string(workspace ? "use --mode cow (changes reviewed before they reach the "
                                    "workspace) or --mode ro"
                                  : "grant it read-only (--read / filesystem.read)") +
            ", or lift those rules in a policy file");
  }
  plan.views.push_back(FsView{dir, workspace, rules, ""});
  user.push_back({MountKind::FsView, dir, dir});
  return {};
}

// The workspace's own mount: cow through cordon-fs or kernel overlayfs, ro as a read-only bind,
// rw as a plain bind or, when rules reach into it, a cordon-fs view in direct mode.
Status plan_workspace_mount(const policy::FilesystemPolicy& f, const HostFacts& host,
                            std::vector<MountOp>& user, LaunchPlan& plan) {
  switch (plan.mode) {
    case WorkspaceMode::Cow:
      plan.cow_fuse = host.cow_fuse;
      user.push_back({plan.cow_fuse ? MountKind::CowFuse : MountKind::CowOverlay, plan.workspace,
                      plan.workspace});
      return {};
    case WorkspaceMode::Ro:
      user.push_back({MountKind::BindRo, plan.workspace, plan.workspace});
      return {};
    case WorkspaceMode::Rw:
      break;
  }
  auto rules = f.rules_beneath(plan.workspace, true);
  if (rules.empty()) {
    user.push_back({MountKind::BindRw, plan.workspace, plan.workspace});
    return {};
  }
  return plan_view(plan.workspace, true, "--mode rw (the workspace " + plan.workspace + ")", rules,
                   host, user, plan);
}

// A write grant naming a directory a protect pattern names from "/" ("~/.claude" and
// "**/.claude/**"): the pattern is anchored at the grant's root (FilesystemPolicy::decide_write),
// so what the directory holds directly is writable. Said at start unless a deny_write or deny
// rule reaches into it, as a preset's does for its hooks and settings.
void note_protected_grant(const policy::FilesystemPolicy& f, size_t i, LaunchPlan& plan) {
  const auto& g = f.write[i];
  for (size_t k = 0; k < f.protect.size(); ++k) {
    const auto& r = f.protect[k];
    if (r.absolute || r.expanded.rfind("**", 0) != 0 || !r.matches(g.expanded.substr(1))) {
      continue;
    }
    auto guarded = [&](const std::vector<policy::PathPattern>& rules) {
      return std::any_of(rules.begin(), rules.end(), [&](const policy::PathPattern& d) {
        return d.absolute && d.may_match_beneath(g.expanded) && !d.matches(g.expanded);
      });
    };
    if (!guarded(f.deny_write) && !guarded(f.deny)) {
      plan.grant_notes.push_back(
          "filesystem.write[" + std::to_string(i) + "] \"" + g.text +
          "\" is a directory filesystem.protect[" + std::to_string(k) + "] (\"" + r.text +
          "\") names: granted, so the program may write what it holds (settings, hooks); "
          "protect still holds beneath it. Name what the host runs from it in "
          "filesystem.deny_write, or use an agent preset (--agent)");
    }
    return;
  }
}

// filesystem.read and .write: host paths named exactly (globs and relative entries need no mount
// of their own). Deny wins over a grant; a deny_write/protect rule covering a write grant makes
// it read-only; rules reaching beneath a writable directory make it a cordon-fs view. Read-only
// directories go to `read_only_dirs`, to be walked for deny masks.
Status plan_grants(const policy::FilesystemPolicy& f, const HostFacts& host,
                   std::vector<MountOp>& user, std::vector<std::string>& read_only_dirs,
                   LaunchPlan& plan) {
  for (bool writable : {false, true}) {
    const auto& grants = writable ? f.write : f.read;
    const char* field = writable ? "filesystem.write" : "filesystem.read";
    for (size_t i = 0; i < grants.size(); ++i) {
      const auto& g = grants[i];
      if (!g.absolute || g.has_glob) {
        continue;
      }
      const std::string what =
          std::string(field) + "[" + std::to_string(i) + "] \"" + g.text + "\"";
      if (writable && std::find(plan.unshown_state.begin(), plan.unshown_state.end(), g.expanded) !=
                          plan.unshown_state.end()) {
        continue;
      }
      struct stat st {};
      bool created = writable && std::find(plan.create_dirs.begin(), plan.create_dirs.end(),
                                           g.expanded) != plan.create_dirs.end();
      if (created) {
        st.st_mode = S_IFDIR;  // an agent's state directory, created before the clone
      } else if (::stat(g.expanded.c_str(), &st) != 0) {
        if (errno == ENOENT) {
          if (writable) {
            plan.absent_write_grants.push_back(g.expanded);
          }
          continue;  // an optional extra (e.g. ~/.gitconfig) that this host does not have
        }
        return sys_error(what + ": stat(\"" + g.expanded + "\")",
                         "cordon runs as you: grant only paths you can reach");
      }
      policy::Decision read = f.decide_read(g.expanded);
      if (!read.allow && read.rule.rfind("filesystem.deny[", 0) == 0) {
        continue;  // deny wins over read/write
      }
      bool dir = S_ISDIR(st.st_mode);
      if (writable && f.decide_write(g.expanded).allow) {
        if (dir) {
          note_protected_grant(f, i, plan);
        }
        auto rules = dir ? f.rules_beneath(g.expanded, false)
                         : std::vector<policy::FilesystemPolicy::RuleRef>{};
        if (rules.empty()) {
          user.push_back({MountKind::BindRw, g.expanded, g.expanded});
        } else {
          TRY(plan_view(g.expanded, false, what, rules, host, user, plan));
        }
        continue;
      }
      user.push_back({MountKind::BindRo, g.expanded, g.expanded});
      if (dir) {
        read_only_dirs.push_back(g.expanded);
      }
    }
  }
  return {};
}

// `path` with symlinks resolved on the host: its longest existing prefix through realpath, the
// rest as written.
std::string real_spelling(const std::string& path) {
  std::string head = path, tail;
  while (head.size() > 1) {
    char buf[PATH_MAX];
    if (::realpath(head.c_str(), buf) != nullptr) {
      std::string real = buf;
      return real == "/" ? (tail.empty() ? real : tail) : real + tail;
    }
    size_t slash = head.rfind('/');
    if (slash == std::string::npos) {
      break;
    }
    tail = head.substr(slash) + tail;
    head.resize(slash);
  }
  return path;
}

bool at_or_beneath(const std::string& path, const std::string& dir) {
  return path == dir || (dir != "/" && path.size() > dir.size() &&
                         path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
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

bool is_under(const std::string& path, const std::string& root) {
  if (root == "/") {
    return true;
  }
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

const std::vector<std::string>& system_dirs() {
  static const std::vector<std::string> dirs = {"/usr",   "/bin",   "/sbin",  "/lib",
                                                "/lib32", "/lib64", "/libx32"};
  return dirs;
}

Result<LaunchPlan> build_plan(const policy::Policy& p, const std::vector<std::string>& argv,
                              const HostFacts& host, bool asks_decider) {
  LaunchPlan plan;
  if (argv.empty() || argv[0].empty()) {
    return make_error("no command given", "usage: cordon run [OPTIONS] -- CMD [ARGS...]");
  }
  plan.argv = argv;

  // Network on only when something may be allowed: otherwise no proxy, no route (ENETUNREACH at
  // once).
  plan.network = !p.network.allow.empty() || asks_decider;
  plan.asks_decider = asks_decider;
  plan.proxy_env = plan.network && p.network.proxy_env;
  TRY(plan_loopback_services(p.network, plan));
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
  ASSIGN_OR_RETURN(plan.workspace, workspace_path(p, host));
  if (plan.workspace == "/") {
    return make_error("workspace \"" + ws_text +
                          "\" resolves to \"/\": that would put the whole "
                          "host in the sandbox",
                      "pass --workspace DIR naming the project directory");
  }
  struct stat ws_st {};
  if (::stat(plan.workspace.c_str(), &ws_st) != 0) {
    return sys_error("stat(\"" + plan.workspace + "\")");
  }
  const Identity ident = choose_identity(host, ws_st);
  const std::string& home = ident.home;
  std::vector<std::string> homes = ident.other_homes;
  homes.push_back(home);
  for (const auto& h : homes) {
    if (!h.empty() && h != "/" && plan.workspace == h && plan.mode == WorkspaceMode::Rw) {
      return make_error("workspace \"" + ws_text + "\" is the home directory " + h +
                            "; read-write it would hand the sandbox its keys and dotfiles",
                        "use --workspace with a project directory, or --mode ro");
    }
  }
  for (size_t i = 0; i < p.filesystem.deny.size(); ++i) {
    const auto& d = p.filesystem.deny[i];
    if (d.absolute && d.matches(plan.workspace)) {
      return make_error("workspace " + plan.workspace + " is denied by filesystem.deny[" +
                        std::to_string(i) + "] (\"" + d.text + "\")");
    }
  }
  plan.ids = ident.ids;
  plan.cwd = is_under(host.cwd, plan.workspace) ? host.cwd : plan.workspace;
  plan.home = home;
  plan.hostname = p.process.hostname.empty() ? "cordon" : p.process.hostname;
  plan.tty = host.stdin_tty;
  plan.window = host.window;
  plan.tmp_size = p.filesystem.tmp;
  plan.nested_sandbox = p.process.nested_sandbox;
  plan.timeout = p.process.timeout;
  plan.kill_grace = p.process.kill_grace;
  std::vector<std::string> user_vars;
  std::vector<char*> host_env = sandbox_user_env(host.env, ident, user_vars);
  plan.envp = build_environment(p.process.env, host_env.data(), {}, &plan.env_notes);
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
  TRY(plan_workspace_mount(p.filesystem, host, user, plan));
  plan.write_warning = write_warning(plan, ws_st, host);
  // An agent preset's install tree, state and /etc defaults: its state directories exist before
  // the grants below look for them.
  plan_agent(p, host, plan, user);
  std::vector<std::string> read_only_dirs;  // granted directories walked for deny masks below
  TRY(plan_grants(p.filesystem, host, user, read_only_dirs, plan));
  std::stable_sort(user.begin(), user.end(), [](const MountOp& a, const MountOp& b) {
    return depth(a.target) < depth(b.target);
  });
  plan.mounts.insert(plan.mounts.end(), user.begin(), user.end());

  // Deny rules last, so they cover whatever an allow rule made visible. Masks and read-only
  // binds land on top of the workspace mount, the overlay in cow mode too. Through a cordon-fs
  // view (cow, or rw through a direct view) every rule is decided at each lookup instead, files
  // created later included: no walk.
  bool view = plan.cow_fuse || std::any_of(plan.views.begin(), plan.views.end(),
                                           [](const FsView& v) { return v.workspace; });
  size_t budget = kMaxWalkEntries;
  if (!view) {
    TRY(plan_workspace_rules(plan.workspace, DenyCtx{p.filesystem, plan.mode != WorkspaceMode::Ro},
                             budget, plan));
  }
  for (const auto& dir : read_only_dirs) {
    TRY(mask_denied_beneath(dir, p.filesystem, budget, plan));
  }
  return plan;
}

void add_real_deny_spellings(policy::FilesystemPolicy& f) {
  struct Alias {
    std::string as_granted, real;
  };
  std::vector<Alias> aliased;  // grants whose path goes through a symlink
  for (const auto* grants : {&f.read, &f.write}) {
    for (const auto& g : *grants) {
      if (g.absolute && !g.has_glob) {
        std::string real = real_spelling(g.expanded);
        if (real != g.expanded) {
          aliased.push_back({g.expanded, real});
        }
      }
    }
  }
  for (auto* rules : {&f.deny, &f.deny_write}) {
    std::vector<std::string> spellings;
    for (const auto& d : *rules) {
      if (!d.absolute) {
        continue;
      }
      // The fixed part (up to the first globbed segment) is resolved; the rest kept as written.
      std::string fixed = d.expanded, rest;
      if (size_t glob = d.expanded.find_first_of("*?"); glob != std::string::npos) {
        size_t cut = d.expanded.rfind('/', glob);
        fixed = d.expanded.substr(0, cut == 0 ? 1 : cut);
        rest = d.expanded.substr(cut == 0 ? 1 : cut);
        if (cut == 0) {
          continue;  // "/*...": nothing fixed to resolve
        }
      }
      std::string real = real_spelling(fixed);
      spellings.push_back(real + rest);
      for (const auto& a : aliased) {
        if (at_or_beneath(real, a.real)) {
          spellings.push_back(a.as_granted + real.substr(a.real.size()) + rest);
        } else if (rest.empty() && at_or_beneath(a.real, real)) {
          spellings.push_back(a.as_granted);  // the deny covers the whole grant
        }
      }
    }
    for (const auto& text : spellings) {
      bool known = std::any_of(rules->begin(), rules->end(),
                               [&](const policy::PathPattern& r) { return r.expanded == text; });
      if (!known) {
        if (auto p = policy::PathPattern::parse(text, "", nullptr)) {
          rules->push_back(std::move(*p));
        }
      }
    }
  }
}

Result<std::string> workspace_path(const policy::Policy& p, const HostFacts& host) {
  std::string ws_text = p.filesystem.workspace.empty() ? "." : p.filesystem.workspace;
  return resolve_dir("workspace", expand_home(ws_text, invoking_home(host)), host.cwd);
}

void protect_hooks_path(policy::FilesystemPolicy& f, const std::string& workspace) {
  if (f.protect.empty()) {
    return;  // protect lifted: the user lets the program change what git runs
  }
  std::ifstream in(workspace + "/.git/config");
  std::string line, hooks;
  bool core = false;
  for (int n = 0; n < 100000 && std::getline(in, line); ++n) {
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#' || line[b] == ';') {
      continue;
    }
    std::string t = line.substr(b);
    if (t[0] == '[') {
      std::string name = t.substr(1, t.find_first_of("] \t\"") - 1);
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      core = name == "core" && t.find('"') == std::string::npos;
      continue;
    }
    size_t eq = t.find('=');
    if (!core || eq == std::string::npos) {
      continue;
    }
    std::string key = t.substr(0, t.find_last_not_of(" \t", eq - 1) + 1);
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    if (key != "hookspath") {
      continue;
    }
    std::string v = t.substr(eq + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    v.erase(v.find_last_not_of(" \t\r") + 1);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
      v = v.substr(1, v.size() - 2);
    }
    hooks = v;  // the last one wins, as in git
  }
  if (hooks.empty() || hooks[0] == '~') {
    return;
  }
  // Relative: from the top of the working tree, where git runs hooks.
  std::string abs = hooks[0] == '/' ? hooks : workspace + "/" + hooks;
  std::string real = real_spelling(abs);
  if (!at_or_beneath(real, workspace) || real == workspace) {
    return;  // outside: the program cannot write it unless a grant says so
  }
  std::string rel = real.substr(workspace.size() + 1);
  if (auto pat = policy::PathPattern::parse(rel + "/**", "", nullptr)) {
    f.protect.push_back(std::move(*pat));
  }
}

}  // namespace cordon::launcher
