// An agent preset's part of the launch plan: install tree, state directories, /etc defaults.
#include "launcher/agent_plan.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/sandbox/shebang.h"
#include "policy/presets.h"

namespace cordon::launcher {
namespace {

std::string dirname_of(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

bool executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

// Where execvp would find `name` with this PATH (as an absolute path), or "".
std::string find_on_path(const std::string& name, const std::string& path_env,
                         const std::string& cwd) {
  if (name.empty()) {
    return {};
  }
  if (name.find('/') != std::string::npos) {
    std::string p = name[0] == '/' ? name : cwd + "/" + name;
    return executable_file(p) ? p : std::string();
  }
  size_t i = 0;
  while (i <= path_env.size()) {
    size_t colon = std::min(path_env.find(':', i), path_env.size());
    std::string dir = path_env.substr(i, colon - i);
    i = colon + 1;
    if (dir.empty() || dir[0] != '/') {
      continue;  // relative PATH entries depend on the sandbox's cwd: not an install tree
    }
    if (std::string p = dir + "/" + name; executable_file(p)) {
      return p;
    }
  }
  return {};
}

// The package a file installed by npm belongs to: everything up to node_modules/<name> (or
// node_modules/@scope/<name>) at its first node_modules; the file's directory otherwise.
std::string package_root(const std::string& real) {
  size_t at = real.find("/node_modules/");
  if (at == std::string::npos) {
    return dirname_of(real);
  }
  size_t name = at + 14;
  size_t end = real.find('/', name);
  if (end != std::string::npos && real[name] == '@') {
    end = real.find('/', end + 1);
  }
  return end == std::string::npos ? dirname_of(real) : real.substr(0, end);
}

// The interpreter a script names on its `#!` line, or "".
std::string interpreter_of(const std::string& file) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  char buf[256];
  ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf) : -1;
  return n > 0 ? shebang_interpreter(std::string_view(buf, static_cast<size_t>(n))) : "";
}

bool visible_anyway(const std::string& dir) {
  for (const auto& sys : system_dirs()) {
    if (is_under(dir, sys)) {
      return true;
    }
  }
  return is_under(dir, "/etc") || is_under(dir, "/proc") || is_under(dir, "/dev");
}

// A tree entry may not expose more than the program: never "/", the home or what holds it, or
// what holds the workspace (a read-only bind there would also cover the workspace's own mount).
bool acceptable(const std::string& dir, const std::string& home, const std::string& workspace) {
  return dir.size() > 1 && dir[0] == '/' && !visible_anyway(dir) &&
         (home.empty() || !is_under(home, dir)) && !is_under(workspace, dir) &&
         !is_under(dir, workspace);
}

void add_tree_of(const std::string& found, std::vector<std::string>& out) {
  std::string real = real_path(found);
  if (real.empty()) {
    return;
  }
  out.push_back(dirname_of(found));  // the directory on PATH: bin/ of a prefix holds a symlink
  out.push_back(package_root(real));
}

// mkdir -p of `rel` (no "..", no leading "/") beneath the directory `base_fd`, each component
// through an O_NOFOLLOW fd: a symlink planted in the home never redirects where root creates.
Status mkdirs_beneath(int base_fd, const std::string& base, const std::string& rel,
                      const IdPlan& ids) {
  UniqueFd at(::fcntl(base_fd, F_DUPFD_CLOEXEC, 3));
  std::string done = base;
  size_t i = 0;
  while (i < rel.size()) {
    size_t slash = std::min(rel.find('/', i), rel.size());
    std::string name = rel.substr(i, slash - i);
    i = slash + 1;
    if (name.empty() || name == "." || name == "..") {
      return make_error("state directory \"" + rel + "\" is not a plain path beneath " + base);
    }
    done += "/" + name;
    bool created = ::mkdirat(at.get(), name.c_str(), 0700) == 0;
    if (!created && errno != EEXIST) {
      return sys_error("mkdir(\"" + done + "\")");
    }
    UniqueFd next(
        ::openat(at.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next) {
      return sys_error("open(\"" + done + "\", O_DIRECTORY|O_NOFOLLOW)",
                       "a state directory of the agent must be a real directory, not a symlink");
    }
    if (created && !ids.rootless && ::fchown(next.get(), ids.uid, ids.gid) != 0) {
      return sys_error("chown(\"" + done + "\", " + std::to_string(ids.uid) + ")");
    }
    at = std::move(next);
  }
  return {};
}

std::string plan_path_env(const LaunchPlan& plan) {
  for (const auto& kv : plan.envp) {
    if (kv.rfind("PATH=", 0) == 0) {
      return kv.substr(5);
    }
  }
  return {};
}

}  // namespace

std::vector<std::string> install_tree(const std::string& argv0, const std::string& path_env,
                                      const std::string& cwd, const std::string& home,
                                      const std::string& workspace) {
  std::vector<std::string> dirs;
  std::string found = find_on_path(argv0, path_env, cwd);
  if (found.empty()) {
    return {};
  }
  add_tree_of(found, dirs);
  // One level: the interpreter of a script (node for an npm package), where it is not a system
  // one. An interpreter that is itself a script is left to the user (--read).
  std::string interp = interpreter_of(real_path(found));
  if (!interp.empty()) {
    if (std::string at = find_on_path(interp, path_env, cwd); !at.empty()) {
      add_tree_of(at, dirs);
    }
  }
  std::vector<std::string> out;
  for (const auto& d : dirs) {
    bool covered = false;
    for (const auto& o : out) {
      covered = covered || is_under(d, o);
    }
    if (!covered && acceptable(d, home, workspace)) {
      std::erase_if(out, [&](const std::string& o) { return is_under(o, d); });
      out.push_back(d);
    }
  }
  return out;
}

void plan_agent(const policy::Policy& p, const HostFacts& host, LaunchPlan& plan,
                std::vector<MountOp>& user) {
  const policy::Preset* preset = policy::find_preset(p.extends);
  if (preset == nullptr) {
    return;
  }
  auto denied = [&](const std::string& path) {
    for (const auto& d : p.filesystem.deny) {
      if (d.absolute && d.matches(path)) {
        return true;
      }
    }
    return false;
  };
  // Its keys are alternative ways to sign in (an API key, a token, a login kept in its state):
  // one the host does not have is no mistake worth a line at start.
  auto& missing = plan.env_notes.pass_missing;
  missing.erase(std::remove_if(missing.begin(), missing.end(),
                               [&](const std::string& name) {
                                 return std::find(preset->keys.begin(), preset->keys.end(), name) !=
                                        preset->keys.end();
                               }),
                missing.end());

  // The program run, and the preset's own programs where PATH finds them: `sh -c 'claude …'`
  // or a wrapper script runs the agent too.
  std::vector<std::string> programs{plan.argv[0]};
  programs.insert(programs.end(), preset->programs.begin(), preset->programs.end());
  std::vector<std::string> bound;
  for (const auto& program : programs) {
    for (const auto& dir :
         install_tree(program, plan_path_env(plan), host.cwd, plan.home, plan.workspace)) {
      if (!denied(dir) && std::find(bound.begin(), bound.end(), dir) == bound.end()) {
        bound.push_back(dir);
        user.push_back({MountKind::BindRo, dir, dir});
      }
    }
  }

  // State directories that do not exist yet: created in the sandbox user's own home only, where
  // that user could have created them; anywhere else the agent keeps its state in the sandbox's
  // throwaway home, as it would without the preset.
  struct stat home_st {};
  bool own_home = !plan.home.empty() && ::stat(plan.home.c_str(), &home_st) == 0 &&
                  S_ISDIR(home_st.st_mode) && home_st.st_uid == plan.ids.uid;
  for (const auto& w : p.filesystem.write) {
    bool of_preset = false;
    for (std::string_view s : preset->state) {
      of_preset = of_preset || w.text == s;
    }
    if (of_preset && !host.fs_views && !p.filesystem.rules_beneath(w.expanded, false).empty()) {
      // The rules inside it (its settings and hooks) hold only through a cordon-fs view:
      // without one, not shown at all rather than shown with them writable.
      plan.unshown_state.push_back(w.expanded);
      continue;
    }
    struct stat st {};
    if (!of_preset || !own_home || !is_under(w.expanded, plan.home) || w.expanded == plan.home ||
        denied(w.expanded) || ::lstat(w.expanded.c_str(), &st) == 0 || errno != ENOENT) {
      continue;
    }
    plan.create_dirs.push_back(w.expanded);  // granted as the directory it will be (plan_grants)
  }
  // Protected directories the agent makes at start: empty, inside a state directory shown here.
  for (std::string_view m : preset->made) {
    std::string dir = plan.home + std::string(m.substr(1));  // "~/…"
    auto holder = std::find_if(p.filesystem.write.begin(), p.filesystem.write.end(),
                               [&](const policy::PathPattern& w) {
                                 return w.expanded != plan.home && is_under(dir, w.expanded);
                               });
    struct stat st {};
    if (!own_home || plan.home.empty() || holder == p.filesystem.write.end() ||
        std::find(plan.unshown_state.begin(), plan.unshown_state.end(), holder->expanded) !=
            plan.unshown_state.end() ||
        denied(dir) || ::lstat(dir.c_str(), &st) == 0 || errno != ENOENT) {
      continue;
    }
    plan.create_dirs.push_back(dir);
  }

  for (const auto& e : preset->etc) {
    struct stat st {};
    if (::lstat(("/etc/" + std::string(e.path)).c_str(), &st) != 0) {
      plan.etc_files.push_back({std::string(e.path), std::string(e.content), 0644});
    }
  }
}

Status create_agent_state_from_parent(const LaunchPlan& plan) {
  if (plan.create_dirs.empty()) {
    return {};
  }
  UniqueFd home(::open(plan.home.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!home) {
    return sys_error("open(\"" + plan.home + "\", O_DIRECTORY|O_NOFOLLOW)");
  }
  for (const auto& dir : plan.create_dirs) {
    TRY(mkdirs_beneath(home.get(), plan.home, dir.substr(plan.home.size() + 1), plan.ids));
  }
  return {};
}

}  // namespace cordon::launcher
