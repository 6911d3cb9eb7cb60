// The user namespace: id maps written by the parent, the child's switch into the mapped ids.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "base/result.h"
#include "launcher/plan.h"

namespace cordon::launcher {

// Parent side, while the child waits: /proc/PID/uid_map "U U 1", setgroups "deny" (rootless, or
// the kernel refuses the gid map), gid_map "G G 1". As root the map is still a single
// unprivileged id: host uid 0 is never mapped into the sandbox.
Status write_id_maps_from_parent(pid_t child, const IdPlan& ids);

// Child side, right after release: as root, drops supplementary groups and switches the child's
// kernel credentials (still host root's until now) to the mapped ids. Capabilities in the new
// namespace survive the switch because uid 0 is not mapped there (no "root -> non-root"
// transition exists for the kernel to clear them on). Rootless: nothing to do.
Status become_sandbox_user_in_child(const IdPlan& ids);

// The host's switches for user namespaces as /proc/sys shows them; nullopt where the kernel has
// no such switch (unprivileged_userns_clone is Debian's patch, the AppArmor one Ubuntu's).
struct UsernsSettings {
  std::optional<long> unprivileged_userns_clone;              // kernel.unprivileged_userns_clone
  std::optional<long> apparmor_restrict_unprivileged_userns;  // kernel.apparmor_restrict_...
  std::optional<long> max_user_namespaces;                    // user.max_user_namespaces
};
UsernsSettings read_userns_settings(const std::string& proc_sys = "/proc/sys");

// The setting that keeps an ordinary user from creating a user namespace, as "name=value"; ""
// when none of them does.
std::string userns_restriction(const UsernsSettings& s);

// Where the Debian package puts cordon's AppArmor profile (packaging/apparmor/cordon; its
// postinst copies it to /etc/apparmor.d where AppArmor reads ABI 4.0), and the one program it
// lets create user namespaces.
inline constexpr const char* kAppArmorProfileSource = "/usr/share/cordon/apparmor/cordon";
inline constexpr const char* kAppArmorProfile = "/etc/apparmor.d/cordon";
inline constexpr const char* kInstalledCordon = "/usr/bin/cordon";

// The message for EPERM/ENOSPC from clone(CLONE_NEWUSER) under settings `s`: the setting, and for
// AppArmor's restriction the profile and the command that loads it, for a cordon at `exe`.
std::string userns_disabled_hint(const UsernsSettings& s, const std::string& exe,
                                 bool profile_installed);
// The same for this host, this executable and the profile as installed here.
std::string userns_disabled_hint();

}  // namespace cordon::launcher
