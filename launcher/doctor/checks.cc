// The checks of `cordon doctor`: each one measures through the launcher's own probes and says, by
// name, the kernel, container or pod setting that decides it.
#include "launcher/doctor/checks.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "base/unique_fd.h"
#include "launcher/limits/limits.h"
#include "launcher/sandbox/container_fixes.h"
#include "launcher/sandbox/landlock.h"
#include "launcher/sandbox/seccomp.h"
#include "launcher/sandbox/userns.h"
#include "launcher/session/session.h"
#include "launcher/sidecars/cowfs_sidecar.h"
#include "policy/policy.h"

namespace cordon::launcher::doctor {
namespace {

// What a Status says without its hint (the hint goes to the FIX line instead).
std::string said(const Status& s) {
  if (s.ok()) {
    return "ok";
  }
  Error e = s.error();
  e.hint.clear();
  return e.to_string();
}

Check ok(const char* name, std::string measured) {
  return Check{name, State::Ok, std::move(measured), "", ""};
}

std::string fs_name(long type) {
  switch (type) {
    case TMPFS_MAGIC:
      return "tmpfs";
    case OVERLAYFS_SUPER_MAGIC:
      return "overlay";
    case EXT4_SUPER_MAGIC:
      return "ext2/3/4";
    case XFS_SUPER_MAGIC:
      return "xfs";
    case BTRFS_SUPER_MAGIC:
      return "btrfs";
    case NFS_SUPER_MAGIC:
      return "nfs";
    case FUSE_SUPER_MAGIC:
      return "fuse";
    case 0x2fc12fc1:
      return "zfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(type));
      return std::string("filesystem ") + buf;
    }
  }
}

constexpr const char* kNamespacesContainerFix =
    "in a container: allow clone/unshare of namespaces, e.g. podman run --security-opt "
    "seccomp=unconfined (docker: also --security-opt apparmor=unconfined); Kubernetes: "
    "securityContext.seccompProfile.type: Unconfined (or a Localhost profile that allows them) "
    "and spec.hostUsers: false";

}  // namespace

Result<StateDir> resolve_state_dir(const std::string& flag) {
  StateDir d;
  if (!flag.empty()) {
    struct stat st {};
    if (::stat(flag.c_str(), &st) != 0) {
      return sys_error("--state-dir " + flag, "name an existing directory");
    }
    if (!S_ISDIR(st.st_mode)) {
      errno = ENOTDIR;
      return sys_error("--state-dir " + flag, "name an existing directory");
    }
    d.path = flag;
    d.source = "--state-dir";
  } else {
    const char* env = std::getenv("CORDON_STATE_DIR");
    d.source = env != nullptr && *env != '\0' ? "$CORDON_STATE_DIR" : "default";
    std::string root = sessions_root();
    d.path = root.substr(0, root.size() - std::string("/sessions").size());
  }
  // cordon makes the default directory on its first run: measure where it will be made.
  std::filesystem::path p = d.path;
  std::error_code ec;
  while (!std::filesystem::is_directory(p, ec) && p.has_parent_path() && p != p.parent_path()) {
    p = p.parent_path();
  }
  d.existing = p.string();
  return d;
}

Check check_namespaces(const SandboxTrial& t) {
  const char* name = "namespaces";
  const char* consequence =
      "no sandbox: only cordon run --no-namespaces works here, which is advisory (the preload "
      "shim alone)";
  if (!t.clone.ok()) {
    std::string fix = t.clone.error().hint;
    if (::geteuid() == 0 || fix.empty()) {
      fix = kNamespacesContainerFix;
    } else {
      fix += "; " + std::string(kNamespacesContainerFix);
    }
    return Check{name, State::Missing, said(t.clone), consequence, fix};
  }
  if (!t.hostname.ok()) {
    return Check{name, State::Missing,
                 "user, mount, pid, net, ipc, uts namespaces created; " + said(t.hostname),
                 "every run stops at its hostname step", kHostnameSeccompFix};
  }
  std::string restriction = userns_restriction(read_userns_settings());
  std::string measured =
      "clone3(CLONE_NEWUSER|NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS) and sethostname(\"cordon\"): ok";
  if (::geteuid() == 0 && !restriction.empty()) {
    measured += " (as root; ordinary users are refused by " + restriction + ")";
  }
  return ok(name, measured);
}

Check check_proc(const SandboxTrial& t) {
  if (t.proc.ok()) {
    return ok("/proc", "mount(\"proc\") in a new pid + mount namespace: ok");
  }
  return Check{"/proc", State::Missing, said(t.proc),
               "every run stops when it mounts the sandbox's /proc",
               t.clone.ok() ? kProcMaskedFix : "fix the namespaces row first"};
}

Check check_seccomp() {
  const char* name = "seccomp";
  // The filter a run installs: the default list, refused CLONE_NEWUSER sent to a listener.
  auto prog = compile_seccomp(policy::SeccompPolicy{}, {false, true});
  if (!prog.ok()) {
    return Check{
        name, State::Missing, said(Status(prog.error())),
        "every run stops before the program starts",
        prog.error().hint.empty() ? "install libseccomp2 (2.5 or later)" : prog.error().hint};
  }
  Status with_listener = run_in_forked_child([&]() -> Status {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
      return sys_error("prctl(PR_SET_NO_NEW_PRIVS)");
    }
    UniqueFd listener;
    return install_seccomp(*prog, &listener);
  });
  if (with_listener.ok()) {
    return ok(name,
              "cordon's filter with SECCOMP_FILTER_FLAG_NEW_LISTENER (SECCOMP_RET_USER_NOTIF): "
              "installed");
  }
  Status plain = run_in_forked_child([&]() -> Status {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
      return sys_error("prctl(PR_SET_NO_NEW_PRIVS)");
    }
    SeccompProgram p = *prog;
    p.listener = false;
    return install_seccomp(p);
  });
  std::string fix =
      plain.ok() ? "SECCOMP_RET_USER_NOTIF needs Linux 5.0+ and no other filter with a listener "
                   "above cordon (EBUSY: cordon inside cordon, or a supervisor using one)"
                 : "the kernel needs CONFIG_SECCOMP_FILTER; in a container the runtime must let "
                   "seccomp(2) through (podman/docker do by default)";
  return Check{
      name, State::Missing,
      said(with_listener) + "; without the listener: " + (plain.ok() ? "installed" : said(plain)),
      "every run stops when it installs its filter", fix};
}

Check check_fuse() {
  const char* name = "/dev/fuse";
  const char* consequence =
      "cow mode falls back to kernel overlayfs: path rules cover only the files present at "
      "start, no quota, no snapshot or rollback while the program runs";
  UniqueFd fd(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  if (!fd) {
    int e = errno;
    std::string measured = "open(\"/dev/fuse\", O_RDWR) as uid " + std::to_string(::geteuid()) +
                           ": " + std::strerror(e);
    std::string fix =
        e == ENOENT
            ? "host: modprobe fuse; container: pass the device (podman/docker run --device "
              "/dev/fuse); Kubernetes: a FUSE device plugin resource"
            : "host: give this user the device (chmod 0666 /dev/fuse, the distribution default, "
              "or setfacl -m u:" +
                  std::to_string(::geteuid()) +
                  ":rw /dev/fuse); container: --device /dev/fuse; Kubernetes: a FUSE device "
                  "plugin resource";
    return Check{name, State::Degraded, measured, consequence, fix};
  }
  std::string why = cordon_fs_unavailable_reason();
  if (!why.empty()) {
    return Check{name, State::Degraded, "open(\"/dev/fuse\", O_RDWR): ok; but " + why, consequence,
                 why};
  }
  return ok(name, "open(\"/dev/fuse\", O_RDWR): ok; cordon-fs found");
}

Check check_cgroups() {
  const char* name = "cgroups";
  CgroupSupport c = cgroup_support();
  // The limits a default run asks for, in a group made and removed here.
  auto limits =
      Limits::create(policy::ProcessPolicy{}, "cordon-doctor-" + std::to_string(::getpid()));
  if (!limits.ok()) {
    return Check{name, State::Missing,
                 "cgroup " + c.hierarchy + "; " + said(Status(limits.error())),
                 "every run with limits (the default policy has them) stops",
                 limits.error().hint.empty()
                     ? "make the cgroup writable by cordon, or set process.memory, cpus and pids "
                       "to 0 in the policy"
                     : limits.error().hint};
  }
  if (limits->backend() != LimitBackend::Rlimits) {
    std::vector<std::string> paths = limits->cgroup_paths();
    std::string where = paths.empty() ? "" : " (" + paths.front() + ")";
    return ok(name,
              "cgroup " + c.hierarchy + "; a child group for limits made and removed" + where);
  }
  return Check{name, State::Degraded, "cgroup " + c.hierarchy + "; no child group: " + c.why_not,
               "limits fall back to rlimits: memory per process (RLIMIT_DATA), not the whole "
               "sandbox's; pids per uid (RLIMIT_NPROC); cpus not enforced",
               "cgroup v2 delegated to this user: run cordon in a delegated scope (systemd-run "
               "--user --scope -p Delegate=yes cordon run ...); as root on cgroup v1 it works "
               "as is; podman: --cgroupns=private on a cgroup v2 host; Kubernetes: nodes on "
               "cgroup v2"};
}

Check check_state_dir(const StateDir& dir, const Result<bool>& overlay, bool cow_fuse_ok) {
  const char* name = "state dir";
  std::string where = dir.path + " (" + dir.source + ")";
  if (dir.existing != dir.path) {
    where += ", not made yet: measured at " + dir.existing;
  }
  struct statfs sf {};
  if (::statfs(dir.existing.c_str(), &sf) != 0) {
    return Check{name, State::Missing, sys_error("statfs(\"" + dir.existing + "\")").to_string(),
                 "cordon cannot keep session records there",
                 "set CORDON_STATE_DIR to a writable directory"};
  }
  std::string fs = fs_name(static_cast<long>(sf.f_type));
  where += " on " + fs;
  const std::string fix =
      "keep the state directory on tmpfs or a local disk filesystem (ext4, xfs): "
      "--state-dir DIR or CORDON_STATE_DIR=DIR; in a pod mount an emptyDir volume there "
      "(emptyDir.medium: Memory for tmpfs) and pass --state-dir with its mountPath; "
      "podman/docker: --tmpfs DIR or -v VOLUME:DIR";
  if (overlay.ok()) {
    if (overlay.value()) {
      return ok(name, where + "; an overlay upper layer works there");
    }
    if (sf.f_type != OVERLAYFS_SUPER_MAGIC) {
      return ok(name, where + "; overlay upper layer not tried (needs Linux 6.13+)");
    }
  }
  if (!overlay.ok() && overlay.error().message.rfind("not tried", 0) == 0) {
    return ok(name, where + "; overlay upper layer " + overlay.error().message);
  }
  std::string why = overlay.ok() ? "overlayfs cannot hold an upper layer on overlayfs"
                                 : said(Status(overlay.error()));
  if (why.rfind("mkdir(", 0) == 0 || why.rfind("mkdtemp(", 0) == 0) {
    return Check{name, State::Missing, where + "; " + why,
                 "cordon cannot write its session records there",
                 "make it writable by uid " + std::to_string(::geteuid()) + ", or " + fix};
  }
  if (cow_fuse_ok) {
    return Check{name, State::Degraded, where + "; overlay upper layer: " + why,
                 "cow mode works only through cordon-fs: its kernel overlayfs fallback fails "
                 "here",
                 fix};
  }
  return Check{name, State::Missing, where + "; overlay upper layer: " + why,
               "cow mode (the default) fails: cordon-fs is not usable and its overlayfs "
               "fallback cannot keep its upper layer here (--mode ro or rw still run)",
               fix};
}

Check check_landlock() {
  int err = 0;
  int abi = landlock_abi(&err);
  if (abi > 0) {
    return ok("Landlock", "landlock_create_ruleset(VERSION): ABI " + std::to_string(abi));
  }
  return Check{
      "Landlock", State::Degraded,
      std::string("landlock_create_ruleset(VERSION): ") + std::strerror(err),
      "no second write layer behind the mounts; a policy with process.exec_allow is refused",
      err == EOPNOTSUPP
          ? "Landlock is built but off: add landlock to the lsm= kernel parameter (e.g. "
            "lsm=landlock,lockdown,yama,integrity,apparmor,bpf) and reboot"
          : "a kernel with CONFIG_SECURITY_LANDLOCK=y (Linux 5.13+); in a container, a seccomp "
            "profile that allows landlock_create_ruleset, landlock_add_rule and "
            "landlock_restrict_self (recent podman/docker defaults do)"};
}

Check check_nftables(const SandboxTrial& t) {
  if (t.capture.ok()) {
    return ok("nftables",
              "capture ruleset installed through libnftables in a fresh network namespace");
  }
  return Check{"nftables", State::Degraded, said(t.capture),
               "runs with network.allow or --allow-host stop (closed); runs without network work",
               t.clone.ok() ? (t.capture.error().hint.empty()
                                   ? "modprobe nf_tables nft_redirect nf_nat nfnetlink_log on the "
                                     "host (a container cannot load modules)"
                                   : t.capture.error().hint +
                                         "; a container cannot load modules: load them on the host")
                            : "fix the namespaces row first"};
}

std::vector<Check> run_all_checks(const StateDir& dir) {
  // The overlay trial's layers live in the state directory, as a session's upper/ does.
  std::string scratch = dir.existing + "/.cordon-doctor-XXXXXX";
  Result<bool> scratch_made = true;
  if (::mkdtemp(scratch.data()) == nullptr) {
    scratch_made = sys_error("mkdtemp(\"" + scratch + "\")");
    scratch.clear();
  }
  SandboxTrial trial = run_sandbox_trial(scratch);
  if (!scratch.empty()) {
    // overlayfs leaves its work/work with mode 0; its owner needs the bits back to remove it.
    (void)::chmod((scratch + "/work/work").c_str(), 0700);
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  std::vector<Check> checks;
  checks.push_back(check_namespaces(trial));
  checks.push_back(check_proc(trial));
  checks.push_back(check_seccomp());
  Check fuse = check_fuse();
  bool fuse_ok = fuse.state == State::Ok;
  checks.push_back(std::move(fuse));
  checks.push_back(check_cgroups());
  checks.push_back(check_state_dir(dir, scratch_made.ok() ? trial.overlay : scratch_made, fuse_ok));
  checks.push_back(check_landlock());
  checks.push_back(check_nftables(trial));
  return checks;
}

const char* state_name(State s) {
  switch (s) {
    case State::Ok:
      return "ok";
    case State::Degraded:
      return "degraded";
    case State::Missing:
      return "missing";
  }
  return "?";
}

}  // namespace cordon::launcher::doctor
