// The user namespace: id maps (parent side) and the switch into them (child side).
#include "launcher/sandbox/userns.h"

#include <fcntl.h>
#include <grp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace cordon::launcher {
namespace {

std::optional<long> read_proc_sys(const std::string& path) {
  std::ifstream f(path);
  long v = 0;
  if (f >> v) {
    return v;
  }
  return std::nullopt;
}

Status write_proc_file(pid_t pid, const char* name, const std::string& content) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return sys_error("open(\"" + path + "\", O_WRONLY)");
  }
  ssize_t n = ::write(fd, content.data(), content.size());
  int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(content.size())) {
    errno = n < 0 ? saved : EIO;
    std::string shown = content;
    if (!shown.empty() && shown.back() == '\n') {
      shown.pop_back();
    }
    return sys_error("write(\"" + path + "\", \"" + shown + "\")",
                     "the id must be one the invoking user owns (rootless) or an existing "
                     "unprivileged id (as root)");
  }
  return {};
}

}  // namespace

Status write_id_maps_from_parent(pid_t child, const IdPlan& ids) {
  TRY(write_proc_file(child, "uid_map",
                      std::to_string(ids.uid) + " " + std::to_string(ids.uid) + " 1\n"));
  if (ids.rootless) {
    TRY(write_proc_file(child, "setgroups", "deny\n"));
  }
  TRY(write_proc_file(child, "gid_map",
                      std::to_string(ids.gid) + " " + std::to_string(ids.gid) + " 1\n"));
  return {};
}

Status become_sandbox_user_in_child(const IdPlan& ids) {
  if (ids.rootless) {
    return {};
  }
  // Host root's supplementary groups (gid 0 among them) would otherwise ride into the sandbox.
  if (::setgroups(0, nullptr) != 0) {
    return sys_error("setgroups(0, NULL)");
  }
  if (::setresgid(ids.gid, ids.gid, ids.gid) != 0) {
    return sys_error("setresgid(" + std::to_string(ids.gid) + ")");
  }
  if (::setresuid(ids.uid, ids.uid, ids.uid) != 0) {
    return sys_error("setresuid(" + std::to_string(ids.uid) + ")");
  }
  return {};
}

UsernsSettings read_userns_settings(const std::string& proc_sys) {
  UsernsSettings s;
  s.unprivileged_userns_clone = read_proc_sys(proc_sys + "/kernel/unprivileged_userns_clone");
  s.apparmor_restrict_unprivileged_userns =
      read_proc_sys(proc_sys + "/kernel/apparmor_restrict_unprivileged_userns");
  s.max_user_namespaces = read_proc_sys(proc_sys + "/user/max_user_namespaces");
  return s;
}

std::string userns_restriction(const UsernsSettings& s) {
  if (s.unprivileged_userns_clone == 0) {
    return "kernel.unprivileged_userns_clone=0";
  }
  if (s.apparmor_restrict_unprivileged_userns.value_or(0) != 0) {
    return "kernel.apparmor_restrict_unprivileged_userns=" +
           std::to_string(*s.apparmor_restrict_unprivileged_userns);
  }
  if (s.max_user_namespaces == 0) {
    return "user.max_user_namespaces=0";
  }
  return "";
}

std::string userns_disabled_hint(const UsernsSettings& s, const std::string& exe,
                                 bool profile_installed) {
  // Name the switch this host actually has set, so the fix is one command, not a list of guesses.
  std::string setting = userns_restriction(s);
  if (setting.rfind("kernel.apparmor_restrict_unprivileged_userns", 0) == 0) {
    const std::string load = std::string("sudo apparmor_parser -r ") + kAppArmorProfile;
    std::string fix;
    if (!profile_installed) {
      fix = std::string("cordon's profile is not installed: sudo install -m 644 ") +
            kAppArmorProfileSource + " " + kAppArmorProfile + " (packaging/apparmor/cordon " +
            "in a source tree), then load it: " + load;
    } else if (exe != kInstalledCordon) {
      fix = std::string("cordon's profile ") + kAppArmorProfile + " lets only " + kInstalledCordon +
            " create them, and this cordon is " + exe + ": run " + kInstalledCordon +
            ", or copy the profile naming " + exe + " and load the copy with " +
            "sudo apparmor_parser -r";
    } else {
      fix = std::string("load cordon's profile ") + kAppArmorProfile + ": " + load;
    }
    return setting + ": AppArmor lets only programs with a profile create user namespaces; " + fix +
           "; or allow them for all programs: sudo sysctl -w " +
           "kernel.apparmor_restrict_unprivileged_userns=0 (docs/install.md)";
  }
  if (setting == "kernel.unprivileged_userns_clone=0") {
    return setting +
           ": unprivileged user namespaces are off; sudo sysctl -w "
           "kernel.unprivileged_userns_clone=1 (docs/install.md)";
  }
  if (setting == "user.max_user_namespaces=0") {
    return setting + ": user namespaces are off; sudo sysctl -w user.max_user_namespaces=15000";
  }
  return "unprivileged user namespaces are disabled: sysctl -w "
         "kernel.unprivileged_userns_clone=1 (Debian) / user.max_user_namespaces=15000 / "
         "kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu)";
}

std::string userns_disabled_hint() {
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  return userns_disabled_hint(read_userns_settings(), ec ? "cordon" : exe,
                              ::access(kAppArmorProfile, F_OK) == 0);
}

}  // namespace cordon::launcher
