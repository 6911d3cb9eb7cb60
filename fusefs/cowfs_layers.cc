// CowFs's whole-layer operations: opening the layers at start, snapshot and rollback while mounted.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "fusefs/cowfs.h"
#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {

namespace {

// Removes what an interrupted copy-up or rename left under temp names (hidden, but they hold
// quota bytes and would confuse diff).
void remove_temps(int dirfd) {
  int err = 0;
  for (const auto& n : list_dir(dirfd, &err)) {
    if (n.starts_with(kTempPrefix)) {
      remove_tree_at(dirfd, n);
      continue;
    }
    struct stat st;
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
      UniqueFd sub(open_beneath(dirfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (sub) {
        remove_temps(sub.get());
      }
    }
  }
}

}  // namespace

Result<std::unique_ptr<CowFs>> CowFs::create(FsConfig config) {
  if (config.direct) {
    // The real directory is the only layer. Nothing in it is renamed, chowned or scanned at
    // start (it is the user's, and may be large), and no quota applies to it.
    config.policy.quota = {0, 0};
    config.cache_timeout = 1.0;  // the host may change the directory: revalidate after a second
    UniqueFd dir(::open(config.upper.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    UniqueFd dir_path(::open(config.upper.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!dir || !dir_path || ::fstat(dir.get(), &st) != 0) {
      return sys_error("opening the directory " + config.upper + " (--direct)",
                       "pass an existing directory, not a symlink");
    }
    std::unique_ptr<CowFs> fs(
        new CowFs(std::move(config), UniqueFd(), std::move(dir), Usage{}, IdMap{}));
    // With the root's own device as the "lower" one, every object shows its real inode number.
    fs->table_.init_root(std::move(dir_path), UniqueFd(), {st.st_dev, st.st_ino},
                         {st.st_dev, st.st_ino});
    return fs;
  }
  UniqueFd lower(::open(config.lower.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!lower) {
    return sys_error("opening the workspace (lower layer) " + config.lower,
                     "pass an existing directory as --lower");
  }
  bool fresh = ::mkdir(config.upper.c_str(), 0700) == 0;
  if (!fresh && errno != EEXIST) {
    return sys_error("mkdir(\"" + config.upper + "\") for the upper layer",
                     "pass a writable directory as --upper");
  }
  UniqueFd upper(::open(config.upper.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!upper) {
    return sys_error("opening the upper layer " + config.upper,
                     "the upper layer must be a real directory, not a symlink");
  }
  struct stat lst, ust;
  if (::fstat(lower.get(), &lst) != 0 || ::fstat(upper.get(), &ust) != 0) {
    return sys_error("fstat of the layers");
  }
  if (lst.st_dev == ust.st_dev && lst.st_ino == ust.st_ino) {
    return make_error("--lower and --upper are the same directory (" + config.upper + ")",
                      "the upper layer must be the session's own directory");
  }
  int uerr = 0;
  if (fresh || list_dir(upper.get(), &uerr).empty()) {
    // The view's root shows the upper root's attributes: start them as the workspace's.
    (void)!::fchown(upper.get(), lst.st_uid, lst.st_gid);
    ::fchmod(upper.get(), lst.st_mode & 07777);
    timespec times[2] = {lst.st_atim, lst.st_mtim};
    ::futimens(upper.get(), times);
  }
  remove_temps(upper.get());
  Usage usage = scan_usage(upper.get());
  UniqueFd upper_path(::open(config.upper.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd lower_path(::fcntl(lower.get(), F_DUPFD_CLOEXEC, 0));
  if (!upper_path || !lower_path) {
    return sys_error("opening the layer roots");
  }
  IdMap ids;
  if (config.agent) {
    if (config.policy.mode != policy::WorkspaceMode::Cow) {
      return make_error(
          "an agent's ids (--agent-ids) make the workspace the agent's own copy, "
          "which only the cow mode is",
          "leave --agent-ids out for this policy's filesystem.mode");
    }
    Ids owner = config.owner.value_or(Ids{lst.st_uid, lst.st_gid});
    // A root daemon gives the agent's objects the owner's ids; any other daemon can give them
    // only its own (the ids its creates and copy-ups get anyway).
    Ids stored = ::geteuid() == 0 ? owner : Ids{::geteuid(), ::getegid()};
    ids = IdMap(*config.agent, owner, stored);
  }
  std::unique_ptr<CowFs> fs(
      new CowFs(std::move(config), std::move(lower), std::move(upper), usage, ids));
  fs->table_.init_root(std::move(upper_path), std::move(lower_path), {ust.st_dev, ust.st_ino},
                       {lst.st_dev, lst.st_ino});
  return fs;
}

Status CowFs::snapshot_to(const std::string& dest_dir) {
  std::string tmp = dest_dir + ".tmp-" + std::to_string(::getpid());
  remove_tree_at(AT_FDCWD, tmp);
  if (::mkdir(tmp.c_str(), 0700) != 0) {
    return sys_error("mkdir(\"" + tmp + "\") for a snapshot");
  }
  UniqueFd dst(::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dst) {
    return sys_error("open(\"" + tmp + "\")");
  }
  {
    // Writers pause for the copy so the snapshot is one point in time.
    std::unique_lock lk(layer_mu_);
    if (int rc = copy_tree(upper_root_.get(), dst.get()); rc != 0) {
      errno = -rc;
      Error e = sys_error("copying the upper layer into " + tmp);
      remove_tree_at(AT_FDCWD, tmp);
      return e;
    }
  }
  // Built under a temp name and renamed: a crash never leaves a half snapshot under its name.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dest_dir.c_str(), RENAME_NOREPLACE) != 0) {
    Error e = sys_error("rename(\"" + tmp + "\", \"" + dest_dir + "\")",
                        errno == EEXIST ? "a snapshot of that name exists; pick another name" : "");
    remove_tree_at(AT_FDCWD, tmp);
    return e;
  }
  return {};
}

}  // namespace cordon::fusefs
