// Root composition: base tmpfs, pivot #1 (host tree at /oldroot), replay the plan into /newroot,
// read-only, pivot #2 and detach the host.
#include "launcher/sandbox/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "launcher/sandbox/container_fixes.h"

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

}  // namespace

Status mount_proc(const std::string& dst, bool nested_sandbox) {
  TRY(ensure_mountpoint(dst, true));
  const std::string hint =
      std::string(
          "procfs can only be mounted where the host's /proc is not partly covered by "
          "other mounts; in a container: ") +
      kProcMaskedFix;
  TRY(do_mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr, hint.c_str()));
  if (nested_sandbox) {
    // The kernel lets a nested sandbox mount its own procfs only while this one is fully
    // visible, with nothing mounted over any part of it. Without the read-only binds below the
    // knobs stay as the user namespace leaves them: writable by no one inside.
    return {};
  }
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

namespace {

// The kernel's own words about a refused fs_context (read(2) on the fsopen fd yields lines
// "e overlayfs: ..."): they name the bad layer far better than errno alone.
std::string fs_context_log(int fsfd) {
  std::string log;
  char buf[512];
  for (int i = 0; i < 8; ++i) {
    ssize_t n = ::read(fsfd, buf, sizeof buf - 1);
    if (n <= 0) {
      break;
    }
    std::string line(buf, static_cast<size_t>(n));
    while (!line.empty() && line.back() == '\n') {
      line.pop_back();
    }
    log += (log.empty() ? "" : "; ") + line;
  }
  return log;
}

// overlayfs' lowerdir string syntax gives ':' and ',' (and '\') a meaning: escape them.
std::string escape_layer(const std::string& path) {
  std::string out;
  for (char ch : path) {
    if (ch == ':' || ch == ',' || ch == '\\') {
      out += '\\';
    }
    out += ch;
  }
  return out;
}

constexpr const char* kCowHint =
    "the kernel refused the copy-on-write overlay (overlayfs in a user namespace needs Linux >= "
    "5.11, the overlay module, and user xattrs on the filesystem that holds the session); use "
    "--mode ro or --mode rw, or set CORDON_STATE_DIR to a local filesystem such as ext4/xfs/tmpfs";

// One attempt at the cow overlay's superblock. `by_fd` names the layers by file descriptor
// (FSCONFIG_SET_FD, Linux >= 6.13); otherwise by path, upper/work through /proc/self/fd magic
// links, which resolve without a lookup through the session directory the sandbox's id cannot
// traverse. *unsupported is set when the kernel does not take layers by fd.
Result<UniqueFd> make_cow_overlay(bool by_fd, int lower, const CowLayers& cow,
                                  const std::string& lower_path, bool* unsupported) {
  UniqueFd fs(::fsopen("overlay", FSOPEN_CLOEXEC));
  if (!fs) {
    return sys_error("fsopen(\"overlay\") for the cow workspace", kCowHint);
  }
  auto config = [&](unsigned cmd, const char* key, const std::string& value, int fd,
                    const std::string& shown) -> Status {
    if (::fsconfig(fs.get(), cmd, key, value.empty() ? nullptr : value.c_str(), fd) != 0) {
      int e = errno;
      std::string log = fs_context_log(fs.get());
      errno = e;
      return sys_error("fsconfig(overlay, " + std::string(key ? key : "FSCONFIG_CMD_CREATE") +
                           (shown.empty() ? "" : "=" + shown) + ")" +
                           (log.empty() ? "" : " [kernel: " + log + "]"),
                       kCowHint);
    }
    return {};
  };
  // userxattr: overlay keeps its metadata (opaque dirs, redirects) in user.overlay.* xattrs; the
  // trusted.* namespace it uses by default is out of reach in a user namespace.
  TRY(config(FSCONFIG_SET_FLAG, "userxattr", "", 0, ""));
  if (by_fd) {
    for (auto [key, fd] : {std::pair<const char*, int>{"lowerdir+", lower},
                           {"upperdir", cow.upper.get()},
                           {"workdir", cow.work.get()}}) {
      if (::fsconfig(fs.get(), FSCONFIG_SET_FD, key, nullptr, fd) != 0) {
        int e = errno;
        std::string log = fs_context_log(fs.get());
        *unsupported = e == EINVAL && key == std::string("lowerdir+");
        errno = e;
        return sys_error(std::string("fsconfig(overlay, FSCONFIG_SET_FD, \"") + key + "\")" +
                             (log.empty() ? "" : " [kernel: " + log + "]"),
                         kCowHint);
      }
    }
  } else {
    std::string upper = "/oldroot/proc/self/fd/" + std::to_string(cow.upper.get());
    std::string work = "/oldroot/proc/self/fd/" + std::to_string(cow.work.get());
    TRY(config(FSCONFIG_SET_STRING, "lowerdir", escape_layer(lower_path), 0, lower_path));
    TRY(config(FSCONFIG_SET_STRING, "upperdir", upper, 0, upper));
    TRY(config(FSCONFIG_SET_STRING, "workdir", work, 0, work));
  }
  TRY(config(FSCONFIG_CMD_CREATE, nullptr, "", 0, ""));
  UniqueFd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!mnt) {
    return sys_error("fsmount(overlay, MOUNT_ATTR_NOSUID|MOUNT_ATTR_NODEV)", kCowHint);
  }
  return mnt;
}

// cow mode: the workspace's own path shows an overlay of the session's upper/ over the real
// workspace. Writes go to upper/ only (copy-up); the real workspace is a lower layer, which
// overlayfs never writes. Fails closed: there is no fallback to a writable bind.
Status mount_cow(const MountOp& op, const std::string& dst, const CowLayers& cow) {
  if (!cow.upper || !cow.work) {
    return make_error("cow workspace " + op.target +
                      ": the session's upper/ and work/ were not opened (internal error)");
  }
  const std::string lower_path = std::string(kOld) + op.source;
  UniqueFd lower(::open(lower_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!lower) {
    return sys_error("open(\"" + op.source + "\", O_PATH) as the cow workspace's lower layer",
                     "the sandbox's id must be able to reach the workspace");
  }
  TRY(ensure_mountpoint(dst, true));
  bool unsupported = false;
  auto mnt = make_cow_overlay(true, lower.get(), cow, lower_path, &unsupported);
  if (!mnt.ok() && unsupported) {
    mnt = make_cow_overlay(false, lower.get(), cow, lower_path, &unsupported);
  }
  if (!mnt.ok()) {
    return std::move(mnt).error().with_context("mounting the copy-on-write workspace " + op.target);
  }
  if (::move_mount(mnt->get(), "", AT_FDCWD, dst.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return sys_error("move_mount(overlay, \"" + dst + "\")", kCowHint);
  }
  // overlayfs makes its scratch work/work with mode 0. It works on it with the mounter's
  // capabilities and ignores the mode; the owner needs the bits back to delete the session later
  // without privilege, even if cordon is killed. Best effort: nothing depends on it here.
  (void)::fchmodat(cow.work.get(), "work", 0700, 0);
  return {};
}

// cow through cordon-fs: the daemon's view (cloned before the id switch) moves onto the workspace
// path. If the daemon dies, every access fails with ENOTCONN: the real tree is not beneath it.
Status mount_cow_fuse(const MountOp& op, const std::string& dst, const CowLayers& cow) {
  if (!cow.fuse_view) {
    return make_error("cow workspace " + op.target +
                      ": the cordon-fs view was not opened (internal error)");
  }
  TRY(ensure_mountpoint(dst, true));
  if (::move_mount(cow.fuse_view.get(), "", AT_FDCWD, dst.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return sys_error("move_mount(cordon-fs view, \"" + dst + "\")");
  }
  return set_attrs(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false);
}

// A read-write directory through a cordon-fs view in direct mode (the clone taken before the id
// switch) moves onto its path. If the daemon dies, every access fails with ENOTCONN.
Status mount_fs_view(const MountOp& op, const std::string& dst, const LaunchPlan& plan,
                     const CowLayers& cow) {
  for (size_t i = 0; i < plan.views.size() && i < cow.views.size(); ++i) {
    if (plan.views[i].dir == op.target) {
      TRY(ensure_mountpoint(dst, true));
      if (::move_mount(cow.views[i].get(), "", AT_FDCWD, dst.c_str(), MOVE_MOUNT_F_EMPTY_PATH) !=
          0) {
        return sys_error("move_mount(cordon-fs view of " + op.source + ", \"" + dst + "\")");
      }
      return set_attrs(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false);
    }
  }
  return make_error("cordon-fs view of " + op.target + " was not opened (internal error)");
}

// Names in a directory (without "." and ".."), sorted. A missing directory reads as empty when
// `missing_ok`: a staged subdirectory need not exist on the host, nor the other way round.
Result<std::vector<std::string>> list_dir(const std::string& path, bool missing_ok) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    if (missing_ok && errno == ENOENT) {
      return names;
    }
    return sys_error("opendir(\"" + path + "\") while composing /etc",
                     "the sandbox's id must be able to list the host's /etc");
  }
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") {
      names.push_back(std::move(n));
    }
  }
  int e = errno;
  ::closedir(d);
  if (e != 0) {
    errno = e;
    return sys_error("readdir(\"" + path + "\") while composing /etc");
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Fills `dst` (a directory on the fallback tmpfs) with what the /etc overlay would show for the
// pair host/stage: a staged entry wins over the host's (a staged directory merges with a host
// directory of the same name, as overlayfs merges directories); every other host entry is the
// same symlink or a recursive bind of the host's entry. MS_REC is what makes this work where the
// overlay cannot: mounts the user namespace locked beneath the entry travel with it. `host` is
// empty where the host has no directory to merge.
Status compose_etc_dir(const std::string& host, const std::string& stage, const std::string& dst) {
  ASSIGN_OR_RETURN(std::vector<std::string> staged, list_dir(stage, true));
  std::vector<std::string> host_names;
  if (!host.empty()) {
    ASSIGN_OR_RETURN(host_names, list_dir(host, false));
  }
  for (const auto& name : staged) {
    const std::string s = stage + "/" + name, d = dst + "/" + name, h = host + "/" + name;
    struct stat st {};
    if (::lstat(s.c_str(), &st) != 0) {
      return sys_error("lstat(\"" + s + "\") while composing /etc");
    }
    if (S_ISDIR(st.st_mode)) {
      struct stat hst {};
      bool merge = !host.empty() && ::lstat(h.c_str(), &hst) == 0 && S_ISDIR(hst.st_mode);
      if (::mkdir(d.c_str(), 0755) != 0) {
        return sys_error("mkdir(\"" + d + "\") while composing /etc");
      }
      TRY(compose_etc_dir(merge ? h : std::string(), s, d));
      continue;
    }
    TRY(ensure_mountpoint(d, false));
    TRY(do_mount(s.c_str(), d, nullptr, MS_BIND, nullptr));
  }
  for (const auto& name : host_names) {
    if (std::binary_search(staged.begin(), staged.end(), name)) {
      continue;
    }
    const std::string h = host + "/" + name, d = dst + "/" + name;
    struct stat st {};
    if (::lstat(h.c_str(), &st) != 0) {
      if (errno == ENOENT) {
        continue;  // removed on the host since the listing: the overlay would not show it either
      }
      return sys_error("lstat(\"" + h + "\") while composing /etc");
    }
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = ::readlink(h.c_str(), target, sizeof target - 1);
      if (n < 0) {
        return sys_error("readlink(\"" + h + "\") while composing /etc");
      }
      target[n] = '\0';
      if (::symlink(target, d.c_str()) != 0) {
        return sys_error("symlink(\"" + std::string(target) + "\", \"" + d + "\")");
      }
      continue;
    }
    TRY(ensure_mountpoint(d, S_ISDIR(st.st_mode)));
    TRY(do_mount(h.c_str(), d, nullptr, MS_BIND | MS_REC, nullptr));
  }
  return {};
}

// The sandbox's /etc: cordon's staged files (hosts, resolv.conf, ld.so.preload, hostname, empty
// files over secrets) over the host's /etc, read-only, nosuid, nodev. Secret directories are
// masked by later MaskDir ops on top of either form.
Status mount_etc(const MountOp& op, const std::string& dst) {
  TRY(ensure_mountpoint(dst, true));
  // Fast path: a read-only overlay with two lower layers and no upper. Staged files win over the
  // host's /etc even where the host has no such file or has a symlink there. One mount instead of
  // one per /etc entry.
  const std::string stage = std::string(kStage) + "/etc";
  const std::string host = std::string(kOld) + op.source;
  std::string data = "lowerdir=" + escape_layer(stage) + ":" + escape_layer(host);
  if (::mount("overlay", dst.c_str(), "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, data.c_str()) ==
      0) {
    return {};
  }
  const int overlay_errno = errno;
  Error overlay =
      sys_error("mount(\"overlay\", \"" + dst + "\", \"overlay\", " +
                    flag_names(MS_RDONLY | MS_NOSUID | MS_NODEV) + ", \"" + data + "\")",
                "overlayfs in a user namespace needs Linux >= 5.11 and the overlay "
                "module");
  overlay.code = overlay_errno;  // building the message may have touched errno
  // Fallback, only for EINVAL: the host's /etc has mounts beneath it (Docker bind-mounts
  // resolv.conf, hostname and hosts there). In our user namespace those mounts are locked to
  // /etc, and overlayfs refuses a lower layer with locked submounts ("failed to clone
  // lowerpath"). So /etc becomes a tmpfs holding the same union, built from per-entry recursive
  // binds, then made read-only, nosuid, nodev as a whole: what the program sees and may do is
  // the same as through the overlay.
  if (overlay.code != EINVAL) {
    return overlay;
  }
  auto fail = [&](Error e) {
    return std::move(e).with_context(
        overlay.to_string() + "; then composing " + op.target +
        " from per-entry binds (the fallback for a host /etc with mounts beneath it)");
  };
  if (Status s = do_mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m");
      !s.ok()) {
    return fail(std::move(s).error());
  }
  if (Status s = compose_etc_dir(host, stage, dst); !s.ok()) {
    return fail(std::move(s).error());
  }
  if (Status s = set_attrs(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, true);
      !s.ok()) {
    return fail(std::move(s).error());
  }
  return {};
}

Status apply(const MountOp& op, const LaunchPlan& plan, const CowLayers& cow) {
  const std::string dst = std::string(kNew) + op.target;
  constexpr uint64_t kSafe = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  // plan_landlock (landlock.cc) marks writable mounts MS_NOEXEC when process.exec_allow does not
  // reach them, so `ld.so ./prog` cannot map a binary the program wrote there.
  const uint64_t noexec = (op.flags & MS_NOEXEC) != 0 ? MOUNT_ATTR_NOEXEC : 0;
  switch (op.kind) {
    case MountKind::BindRo:
      return bind(op.source, dst, kSafe | MOUNT_ATTR_RDONLY);
    case MountKind::BindRw:
      return bind(op.source, dst, kSafe | noexec);
    case MountKind::Pin: {
      struct stat st {};
      if (::lstat(dst.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return {};  // gone or replaced since planning: nothing beneath it is protected by a pin
      }
      // A plain (non-recursive) self-bind inside the new root: it changes nothing the program
      // sees, but rename(2)/rmdir(2) of a mountpoint fail with EBUSY.
      return do_mount(dst.c_str(), dst, nullptr, MS_BIND, nullptr);
    }
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
    case MountKind::EtcOverlay:
      return mount_etc(op, dst);
    case MountKind::Proc:
      return mount_proc(dst, plan.nested_sandbox);
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
    case MountKind::CowOverlay:
      TRY(mount_cow(op, dst, cow));
      return noexec != 0 ? set_attrs(dst, noexec, false) : Status{};
    case MountKind::CowFuse:
      TRY(mount_cow_fuse(op, dst, cow));
      return noexec != 0 ? set_attrs(dst, noexec, false) : Status{};
    case MountKind::FsView:
      TRY(mount_fs_view(op, dst, plan, cow));
      return noexec != 0 ? set_attrs(dst, noexec, false) : Status{};
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

Status prepare_cow_layers_from_parent(const LaunchPlan& plan) {
  if (plan.mode != policy::WorkspaceMode::Cow || plan.cow_fuse) {
    return {};
  }
  struct stat ws {};
  if (::stat(plan.workspace.c_str(), &ws) != 0) {
    return sys_error("stat(\"" + plan.workspace + "\")");
  }
  for (const std::string* dir : {&plan.cow_upper, &plan.cow_work}) {
    // Rootless, the directories are the invoking user's already (and chown to oneself is a no-op).
    if (!plan.ids.rootless && ::chown(dir->c_str(), plan.ids.uid, plan.ids.gid) != 0) {
      return sys_error("chown(\"" + *dir + "\", " + std::to_string(plan.ids.uid) + ", " +
                       std::to_string(plan.ids.gid) + ")");
    }
  }
  // The merged root is upper/'s inode: give it the workspace's mode (minus set-id bits).
  if (::chmod(plan.cow_upper.c_str(), ws.st_mode & 01777) != 0) {
    return sys_error("chmod(\"" + plan.cow_upper + "\")");
  }
  return {};
}

// A cordon-fs mount on the host, cloned while host root's 0700 session directory is still in
// reach (the ids change next).
Result<UniqueFd> clone_view(const std::string& mountpoint, const std::string& what) {
  UniqueFd fd(::open_tree(AT_FDCWD, mountpoint.c_str(),
                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_NO_AUTOMOUNT));
  if (!fd) {
    return sys_error("open_tree(\"" + mountpoint + "\", OPEN_TREE_CLONE) for " + what,
                     "cordon-fs's mount must be in place before the sandbox starts");
  }
  return fd;
}

Result<CowLayers> open_cow_layers_in_child(const LaunchPlan& plan) {
  CowLayers cow;
  for (const auto& v : plan.views) {
    ASSIGN_OR_RETURN(UniqueFd fd, clone_view(v.mountpoint, v.dir));
    cow.views.push_back(std::move(fd));
  }
  if (plan.mode != policy::WorkspaceMode::Cow) {
    return cow;
  }
  if (plan.cow_fuse) {
    ASSIGN_OR_RETURN(cow.fuse_view, clone_view(plan.cow_mount, "the cow workspace"));
    return cow;
  }
  for (auto [path, fd] : {std::pair<const std::string*, UniqueFd*>{&plan.cow_upper, &cow.upper},
                          {&plan.cow_work, &cow.work}}) {
    fd->reset(::open(path->c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!*fd) {
      return sys_error("open(\"" + *path + "\", O_DIRECTORY) for the cow workspace",
                       "the session directory must be on a local filesystem cordon can write");
    }
  }
  return cow;
}

Status compose_root_in_child(const LaunchPlan& plan, CowLayers cow) {
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
    TRY(apply(op, plan, cow));
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

Result<bool> try_cow_overlay(const std::string& lower, const std::string& upper,
                             const std::string& work) {
  auto open_dir = [](const std::string& p) -> Result<UniqueFd> {
    UniqueFd fd(::open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd) {
      return sys_error("open(\"" + p + "\", O_PATH|O_DIRECTORY)");
    }
    return fd;
  };
  ASSIGN_OR_RETURN(UniqueFd lower_fd, open_dir(lower));
  CowLayers layers;
  ASSIGN_OR_RETURN(layers.upper, open_dir(upper));
  ASSIGN_OR_RETURN(layers.work, open_dir(work));
  bool unsupported = false;
  auto mnt = make_cow_overlay(true, lower_fd.get(), layers, lower, &unsupported);
  if (!mnt.ok()) {
    if (unsupported) {
      return false;
    }
    return std::move(mnt).error();
  }
  return true;
}

}  // namespace cordon::launcher
