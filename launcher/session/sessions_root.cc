// Where session records live: sessions_root() and --state-dir. Apart from session.cc so that
// small callers (cordon-exec) link without the record writer.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "launcher/session/session.h"

namespace cordon::launcher {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string home_dir() {
  std::string home = env_or_empty("HOME");
  if (!home.empty()) {
    return home;
  }
  struct passwd pw;
  struct passwd* res = nullptr;
  char buf[4096];
  if (getpwuid_r(::geteuid(), &pw, buf, sizeof buf, &res) == 0 && res != nullptr &&
      res->pw_dir != nullptr) {
    return res->pw_dir;
  }
  return "/";
}

}  // namespace

std::string sessions_root() {
  std::string state = env_or_empty("CORDON_STATE_DIR");
  if (!state.empty()) {
    return state + "/sessions";
  }
  if (::geteuid() == 0) {
    return "/var/lib/cordon/sessions";
  }
  std::string xdg = env_or_empty("XDG_STATE_HOME");
  // The XDG spec says a relative value is invalid and must be ignored.
  if (!xdg.empty() && xdg[0] == '/') {
    return xdg + "/cordon/sessions";
  }
  return home_dir() + "/.local/state/cordon/sessions";
}

Status use_state_dir(const std::string& dir) {
  const std::string what = "--state-dir " + dir;
  const char* fix =
      "name an existing directory, e.g. the mountPath of a pod's volume, or leave --state-dir out "
      "to use $CORDON_STATE_DIR or the default";
  if (dir.empty()) {
    return make_error(what + ": empty", fix);
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return sys_error(what, fix);
  }
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return sys_error(what, fix);
  }
  // Absolute, because the sidecars and the commands cordon starts may run elsewhere.
  char real[PATH_MAX];
  if (::realpath(dir.c_str(), real) == nullptr) {
    return sys_error(what + ": realpath", fix);
  }
  if (::setenv("CORDON_STATE_DIR", real, 1) != 0) {
    return sys_error("setenv(CORDON_STATE_DIR)");
  }
  return {};
}

}  // namespace cordon::launcher
