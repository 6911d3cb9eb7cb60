// Privilege drop in the program's process (no_new_privs, every capability set emptied, securebits
// locked) and the final check that the sandbox holds before exec.
#include "launcher/sandbox/caps.h"

#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace cordon::launcher {

namespace {

// Raw capget/capset: libcap's cap_t allocates, which this child-side code must not do.
struct CapSets {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
};

// Walks capabilities 0.. until the kernel says EINVAL: that is the kernel's own cap_last_cap,
// found without reading /proc (which may not be mounted yet, and costs an open in the child).
constexpr int kMaxCapProbe = 64;

}  // namespace

Status drop_privileges() {
  // First, so that nothing exec'd from here on can gain privileges through setuid/file caps.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return sys_error("prctl(PR_SET_NO_NEW_PRIVS, 1)");
  }
  // While CAP_SETPCAP is still held: uid 0 inside the sandbox must not get a full capability set
  // back on exec (NOROOT), setuid transitions must not touch capabilities (NO_SETUID_FIXUP), and
  // nobody may flip these back (the _LOCKED bits). KEEP_CAPS is locked off.
  constexpr unsigned long kSecbits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                     SECBIT_NO_CAP_AMBIENT_RAISE |
                                     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, kSecbits, 0, 0, 0) != 0) {
    return sys_error(
        "prctl(PR_SET_SECUREBITS, NOROOT|NO_SETUID_FIXUP|KEEP_CAPS_LOCKED|"
        "NO_CAP_AMBIENT_RAISE, all locked)",
        "needs CAP_SETPCAP in the sandbox's user namespace");
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    return sys_error("prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)");
  }
  // The bounding set caps what any later exec could ever receive: empty it.
  for (int cap = 0; cap < kMaxCapProbe; ++cap) {
    if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) < 0) {
      if (errno == EINVAL) {
        break;  // past the kernel's last capability
      }
      return sys_error("prctl(PR_CAPBSET_READ, " + std::to_string(cap) + ")");
    }
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      return sys_error("prctl(PR_CAPBSET_DROP, " + std::to_string(cap) + ")",
                       "needs CAP_SETPCAP in the sandbox's user namespace");
    }
  }
  // Last, since it removes CAP_SETPCAP which the steps above needed.
  CapSets caps;
  if (::syscall(SYS_capset, &caps.hdr, caps.data) != 0) {
    return sys_error("capset(effective=permitted=inheritable=0)");
  }
  return {};
}

Status verify_sandbox_holds(UsernsCheck userns) {
  CapSets caps;
  if (::syscall(SYS_capget, &caps.hdr, caps.data) != 0) {
    return sys_error("capget");
  }
  for (const auto& d : caps.data) {
    if (d.effective != 0 || d.permitted != 0 || d.inheritable != 0) {
      return make_error(
          "sandbox check: capabilities still held (effective/permitted/inheritable "
          "not empty)");
    }
  }
  for (int cap = 0; cap < kMaxCapProbe; ++cap) {
    int r = ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (r < 0) {
      break;
    }
    if (r == 1) {
      return make_error("sandbox check: capability " + std::to_string(cap) +
                        " still in the bounding set");
    }
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) == 1) {
      return make_error("sandbox check: capability " + std::to_string(cap) +
                        " still in the ambient set");
    }
  }
  if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
    return make_error("sandbox check: no_new_privs is not set");
  }
  // Seccomp before the userns probe: without the filter the probe below would succeed and leave
  // this process in a fresh user namespace.
  if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 2) {
    return make_error("sandbox check: no seccomp filter is installed (PR_GET_SECCOMP != 2)");
  }
  // The escape hatch every container breakout starts with: a new user namespace gives back a full
  // capability set over new namespaces. It must be refused (unless process.nested_sandbox asked
  // for it; through the listener the probe has run already).
  if (userns == UsernsCheck::Direct && ::unshare(CLONE_NEWUSER) == 0) {
    return make_error(
        "sandbox check: unshare(CLONE_NEWUSER) succeeded; a new user namespace "
        "could be created");
  }
  return {};
}

}  // namespace cordon::launcher
