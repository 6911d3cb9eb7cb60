// Root composition: base tmpfs, pivot #1 (host tree at /oldroot), replay the plan into /newroot,
// read-only, pivot #2 and detach the host.
#include "launcher/mounts.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

namespace cordon::launcher {
namespace {

constexpr const char* kOld = "/oldroot";  // the host's tree between the two pivots
constexpr const char* kNew = "/newroot";  // the sandbox's root being built
constexpr const char* kStage = "/stage";  // cordon's own files (etc layer, masks)

std::string flag_names(unsigned long f) {
  std::string s;
  auto add = [&](unsigned long bit, const char* name) {
    if ((f & bit) != 0) {
      s += s.empty() ? name : std::string("|") + name;
    }
  };
  add(MS_BIND, "MS_BIND");
  add(MS_REC, "MS_REC");
  add(MS_REMOUNT, "MS_REMOUNT");
  add(MS_RDONLY, "MS_RDONLY");
  add(MS_NOSUID, "MS_NOSUID");
  add(MS_NODEV, "MS_NODEV");
  add(MS_NOEXEC, "MS_NOEXEC");
  add(MS_SLAVE, "MS_SLAVE");
  return s.empty() ? "0" : s;
}

Status do_mount(const char* src, const std::string& dst, const char* type, unsigned long flags,
                const char* data, const char* hint = nullptr) {
  if (::mount(src, dst.c_str(), type, flags, data) != 0) {
    std::string what = std::string("mount(\"") + (src ? src : "none") + "\", \"" + dst + "\", " +
                       (type ? std::string("\"") + type + "\"" : "NULL") + ", " +
                       flag_names(flags) + (data ? std::string(", \"") + data + "\"" : "") + ")";
    return sys_error(what, hint ? hint
                                : "the kernel refused this mount in the sandbox's user namespace; "
                                  "check the path exists and is on a local filesystem");
  }
  return {};
}

// Sets mount attributes on `path` (and, with `recursive`, every mount beneath it). Only sets bits,
// so the kernel's locked flags of a mount inherited from the host (nosuid/nodev/noexec/atime) are
// kept as they are. Falls back to MS_REMOUNT on kernels without mount_setattr (< 5.12), where
// the locked flags must be repeated by hand (read with statvfs) or the kernel answers EPERM.
Status set_attrs(const std::string& path, uint64_t attrs, bool recursive) {
  mount_attr a{};
  a.attr_set = attrs;
  if (::mount_setattr(AT_FDCWD, path.c_str(), recursive ? AT_RECURSIVE : 0, &a, sizeof a) == 0) {
    return {};
  }
  if (errno != ENOSYS) {
    return sys_error("mount_setattr(\"" + path + "\", " + (recursive ? "AT_RECURSIVE" : "0") +
                     ", attr_set=0x" +
                     [&] {
                       char b[32];
                       snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(attrs));
                       return std::string(b);
                     }() +
                     ")");
  }
  struct statvfs sv {};
  if (::statvfs(path.c_str(), &sv) != 0) {
    return sys_error("statvfs(\"" + path + "\")");
  }
  unsigned long flags = MS_REMOUNT | MS_BIND;
  if ((attrs & MOUNT_ATTR_RDONLY) != 0 || (sv.f_flag & ST_RDONLY) != 0) flags |= MS_RDONLY;
  if ((attrs & MOUNT_ATTR_NOSUID) != 0 || (sv.f_flag & ST_NOSUID) != 0) flags |= MS_NOSUID;
  if ((attrs & MOUNT_ATTR_NODEV) != 0 || (sv.f_flag & ST_NODEV) != 0) flags |= MS_NODEV;
  if ((attrs & MOUNT_ATTR_NOEXEC) != 0 || (sv.f_flag & ST_NOEXEC) != 0) flags |= MS_NOEXEC;
  if ((sv.f_flag & ST_NOATIME) != 0) flags |= MS_NOATIME;
  if ((sv.f_flag & ST_NODIRATIME) != 0) flags |= MS_NODIRATIME;
  if ((sv.f_flag & ST_RELATIME) != 0) flags |= MS_RELATIME;
  return do_mount(nullptr, path, nullptr, flags, nullptr);
}

Status mkdir_p(const std::string& path, mode_t mode = 0755) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string sub = path.substr(0, i);
      if (::mkdir(sub.c_str(), mode) != 0 && errno != EEXIST) {
        return sys_error("mkdir(\"" + sub + "\")",
                         "a mount point is missing inside a read-only part of the sandbox");
      }
    }
  }
  return {};
}

// Creates the mount point `dst` (a directory, or an empty file for a file mount) unless present.
Status ensure_mountpoint(const std::string& dst, bool dir) {
  struct stat st {};
  if (::lstat(dst.c_str(), &st) == 0) {
    return {};
  }
  size_t slash = dst.rfind('/');
  TRY(mkdir_p(dst.substr(0, slash)));
  if (dir) {
    if (::mkdir(dst.c_str(), 0755) != 0 && errno != EEXIST) {
      return sys_error("mkdir(\"" + dst + "\")");
    }
    return {};
  }
  int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
  if (fd < 0) {
    return sys_error("open(\"" + dst + "\", O_CREAT) for a file mount point");
  }
  ::close(fd);
  return {};
}

Status write_file(const std::string& path, const std::string& content, mode_t mode) {
  TRY(mkdir_p(path.substr(0, path.rfind('/'))));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return sys_error("open(\"" + path + "\", O_CREAT)");
  }
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
            ::fchmod(fd, mode) == 0;
  int saved = errno;
  ::close(fd);
  if (!ok) {
    errno = saved;
    return sys_error("write(\"" + path + "\")");
  }
  return {};
}

Status bind(const std::string& host_path, const std::string& dst, uint64_t attrs) {
  std::string src = std::string(kOld) + host_path;
  struct stat st {};
  if (::stat(src.c_str(), &st) != 0) {
    return sys_error("stat(\"" + host_path + "\") for a bind mount",
                     errno == ENOENT ? "the path vanished after cordon planned the sandbox"
                                     : "the sandbox's id cannot reach it: as root, cordon runs "
                                       "the sandbox as $SUDO_UID or the workspace's owner, who "
                                       "must be able to read the path");
  }
  TRY(ensure_mountpoint(dst, S_ISDIR(st.st_mode)));
  TRY(do_mount(src.c_str(), dst, nullptr, MS_BIND | MS_REC, nullptr));
  return set_attrs(dst, attrs, /*recursive=*/true);
}

Status mask(const std::string& dst, bool dir) {
  std::string src = std::string(kStage) + (dir ? "/empty-dir" : "/empty-file");
  struct stat st {};
  if (::lstat(dst.c_str(), &st) != 0) {
    return {};  // gone since planning: nothing left to hide
  }
  TRY(do_mount(src.c_str(), dst, nullptr, MS_BIND, nullptr));
  return set_attrs(
      dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false);
}

Status mount_proc(const std::string& dst) {
  TRY(ensure_mountpoint(dst, true));
  TRY(do_mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr,
               "procfs can only be mounted where the host's /proc is not partly covered by other "
               "mounts (e.g. inside some containers); run cordon on the host or with an "
               "unobstructed /proc"));
  // Kernel knobs stay readable but not writable (the user namespace already denies most writes;
  // this also covers the ones it would allow).
  for (const char* sub : {"sys", "sysrq-trigger", "irq", "bus"}) {
    std::string p = dst + "/" + sub;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      continue;
    }
    TRY(do_mount(p.c_str(), p, nullptr, MS_BIND | MS_REC, nullptr));
    TRY(set_attrs(p, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                  true));
  }
  return {};
}

Status apply(const MountOp& op) {
  const std::string dst = std::string(kNew) + op.target;
  constexpr uint64_t kSafe = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  switch (op.kind) {
    case MountKind::BindRo:
      return bind(op.source, dst, kSafe | MOUNT_ATTR_RDONLY);
    case MountKind::BindRw:
      return bind(op.source, dst, kSafe);
    case MountKind::BindDev: {
      // Device nodes only work through a mount without nodev; nosuid/noexec still apply.
      TRY(ensure_mountpoint(dst, false));
      std::string src = std::string(kOld) + op.source;
      TRY(do_mount(src.c_str(), dst, nullptr, MS_BIND, nullptr));
      return set_attrs(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
    }
    case MountKind::Symlink:
      TRY(mkdir_p(dst.substr(0, dst.rfind('/'))));
      if (::symlink(op.source.c_str(), dst.c_str()) != 0) {
        return sys_error("symlink(\"" + op.source + "\", \"" + dst + "\")");
      }
      return {};
    case MountKind::Tmpfs:
      TRY(ensure_mountpoint(dst, true));
      return do_mount("tmpfs", dst, "tmpfs", op.flags, op.data.c_str());
    case MountKind::EtcOverlay: {
      TRY(ensure_mountpoint(dst, true));
      // Read-only overlay with two lower layers and no upper: cordon's files (hosts, resolv.conf,
      // ld.so.preload, empty files over secrets) win over the host's /etc, even where the host
      // has no such file or has a symlink there. One mount instead of one per /etc entry.
      std::string data = std::string("lowerdir=") + kStage + "/etc:" + kOld + op.source;
      return do_mount("overlay", dst, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, data.c_str(),
                      "overlayfs in a user namespace needs Linux >= 5.11 and the overlay module");
    }
    case MountKind::Proc:
      return mount_proc(dst);
    case MountKind::Devpts: {
      TRY(ensure_mountpoint(dst, true));
      // A private instance: the sandbox sees only its own ptys, never the host's.
      TRY(do_mount("devpts", dst, "devpts", MS_NOSUID | MS_NOEXEC,
                   "newinstance,ptmxmode=0666,mode=0620"));
      std::string ptmx = std::string(kNew) + "/dev/ptmx";
      if (::symlink("pts/ptmx", ptmx.c_str()) != 0) {
        return sys_error("symlink(\"pts/ptmx\", \"" + ptmx + "\")");
      }
      return {};
    }
    case MountKind::MaskFile:
      return mask(dst, false);
    case MountKind::MaskDir:
      return mask(dst, true);
  }
  return make_error("unknown mount kind");
}

Status pivot(const char* new_root, const char* put_old) {
  if (::syscall(SYS_pivot_root, new_root, put_old) != 0) {
    return sys_error(std::string("pivot_root(\"") + new_root + "\", \"" + put_old + "\")",
                     "the current root must be a mount point; cordon cannot run from a chroot or "
                     "an initramfs root (use a real root filesystem)");
  }
  return {};
}

Status stage_files(const LaunchPlan& plan) {
  TRY(mkdir_p(std::string(kStage) + "/etc"));
  for (const auto& f : plan.etc_files) {
    TRY(write_file(std::string(kStage) + "/etc/" + f.path, f.content, f.mode));
  }
  // Masks: an empty directory and an empty file nobody but root (which the program is not) reads.
  if (::mkdir((std::string(kStage) + "/empty-dir").c_str(), 0) != 0) {
    return sys_error("mkdir(\"/stage/empty-dir\")");
  }
  return write_file(std::string(kStage) + "/empty-file", "", 0);
}

}  // namespace

Status compose_root_in_child(const LaunchPlan& plan) {
  mode_t old_umask = ::umask(022);
  // Nothing done here may propagate back to the host's mount table.
  TRY(do_mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr));
  // Base: a tmpfs over the host's /tmp becomes root; the host's tree moves to /oldroot (pivot
  // uncovers the host's /tmp there, so workspaces under /tmp still bind).
  TRY(do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=8m"));
  if (::chdir("/tmp") != 0) {
    return sys_error("chdir(\"/tmp\")");
  }
  for (const char* d : {"newroot", "oldroot"}) {
    if (::mkdir(d, 0755) != 0) {
      return sys_error(std::string("mkdir(\"/tmp/") + d + "\")");
    }
  }
  TRY(pivot("/tmp", "/tmp/oldroot"));
  if (::chdir("/") != 0) {
    return sys_error("chdir(\"/\")");
  }
  TRY(stage_files(plan));
  TRY(do_mount("tmpfs", kNew, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m"));

  std::vector<std::string> ro_later;
  for (const auto& op : plan.mounts) {
    TRY(apply(op));
    if (op.kind == MountKind::Tmpfs && op.ro) {
      ro_later.push_back(std::string(kNew) + op.target);
    }
  }
  // Populated tmpfs (/dev) and finally the root itself become read-only.
  for (const auto& p : ro_later) {
    TRY(set_attrs(p, MOUNT_ATTR_RDONLY, false));
  }
  TRY(set_attrs(kNew, MOUNT_ATTR_RDONLY, false));

  // Pivot #2: the new root on top, the base (with the host's tree beneath it) stacked over it and
  // then detached as a whole, so no path to the host remains.
  if (::chdir(kNew) != 0) {
    return sys_error(std::string("chdir(\"") + kNew + "\")");
  }
  TRY(pivot(".", "."));
  if (::umount2(".", MNT_DETACH) != 0) {
    return sys_error("umount2(old root, MNT_DETACH)");
  }
  if (::chdir("/") != 0) {
    return sys_error("chdir(\"/\") in the new root");
  }
  ::umask(old_umask);
  if (::chdir(plan.cwd.c_str()) != 0) {
    return sys_error("chdir(\"" + plan.cwd + "\") inside the sandbox");
  }
  return {};
}

}  // namespace cordon::launcher
