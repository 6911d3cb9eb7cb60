// Finding a program on the host the sandbox could not find, and the grant that would show it.
#include "launcher/host_program.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "base/unique_fd.h"

namespace cordon::launcher {
namespace {

std::optional<std::string> real_path(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr) {
    return std::nullopt;
  }
  return std::string(buf);
}

// An executable regular file named `name` in a directory of `path`, as execvp would find it.
std::optional<std::string> search(const std::string& name, const std::string& path,
                                  const std::string& cwd) {
  if (name.find('/') != std::string::npos) {
    return real_path(name[0] == '/' ? name : cwd + "/" + name);
  }
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string p = (dir.empty() ? cwd : dir) + "/" + name;
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) {
      return real_path(p);
    }
  }
  return std::nullopt;
}

bool beneath(const std::string& path, const std::string& dir) {
  return dir == "/" || path == dir ||
         (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
          path[dir.size()] == '/');
}

// Whether one of the plan's mounts shows the host's `path` at the same place inside.
bool shown(const LaunchPlan& plan, const std::string& path) {
  bool seen = false;
  for (const auto& m : plan.mounts) {
    switch (m.kind) {
      case MountKind::BindRo:
      case MountKind::BindRw:
      case MountKind::CowOverlay:
      case MountKind::CowFuse:
      case MountKind::FsView:
        if (m.source == m.target && beneath(path, m.target)) {
          seen = true;
        }
        break;
      case MountKind::MaskFile:
      case MountKind::MaskDir:
      case MountKind::Tmpfs:
        if (beneath(path, m.target)) {
          seen = false;  // covered by a later mount
        }
        break;
      default:
        break;
    }
  }
  return seen;
}

// The grant that shows a program: its install prefix when it sits in a "bin" directory
// (/opt/node/bin/node -> /opt/node), else its directory.
std::string grant_for(const std::string& real) {
  std::string dir = real.substr(0, real.rfind('/'));
  size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0 &&
      dir.compare(slash, std::string::npos, "/bin") == 0) {
    return dir.substr(0, slash);
  }
  return dir.empty() ? "/" : dir;
}

// The interpreter a "#!" line names ("/usr/bin/env node" -> node's path), or nullopt.
std::optional<std::string> interpreter_of(const std::string& file, const std::string& path,
                                          const std::string& cwd) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  char buf[256];
  ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf - 1) : -1;
  if (n < 3 || buf[0] != '#' || buf[1] != '!') {
    return std::nullopt;
  }
  std::string line(buf + 2, static_cast<size_t>(n - 2));
  line = line.substr(0, line.find('\n'));
  std::stringstream words(line);
  std::string interp, arg;
  words >> interp >> arg;
  if (interp.empty()) {
    return std::nullopt;
  }
  if (interp.size() >= 4 && interp.compare(interp.size() - 4, 4, "/env") == 0 && !arg.empty() &&
      arg[0] != '-') {
    return search(arg, path, cwd);
  }
  return real_path(interp);
}

}  // namespace

std::optional<std::string> not_found_hint(const std::string& cmd, const std::string& path,
                                          const std::string& cwd, const LaunchPlan& plan) {
  auto found = search(cmd, path, cwd);
  if (!found) {
    return std::nullopt;
  }
  if (!shown(plan, *found)) {
    return "the host has it at " + *found +
           ", which the sandbox does not see; show it with --read " + grant_for(*found) +
           " (filesystem.read)";
  }
  auto interp = interpreter_of(*found, path, cwd);
  if (interp && !shown(plan, *interp)) {
    return "its interpreter is " + *interp + " on the host, which the sandbox does not see; show " +
           "it with --read " + grant_for(*interp) + " (filesystem.read)";
  }
  return std::nullopt;
}

}  // namespace cordon::launcher
