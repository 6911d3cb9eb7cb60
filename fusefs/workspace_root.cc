// Opening the workspace by its recorded path without trusting any name on the way.
#include "fusefs/workspace_root.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "fusefs/safe_io.h"

namespace cordon::fusefs {

Result<WorkspaceIdentity> identity_of(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return sys_error("fstat of the workspace");
  }
  return WorkspaceIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

Result<UniqueFd> open_dir_nofollow(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return make_error("the workspace path " + path + " is not absolute");
  }
  UniqueFd root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) {
    return sys_error("open(\"/\")");
  }
  size_t start = path.find_first_not_of('/');
  if (start == std::string::npos) {
    return UniqueFd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  UniqueFd fd(open_beneath(root.get(), path.substr(start), O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  if (!fd) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return make_error("the workspace " + path +
                            " is reached through a symlink now; cordon does not follow one there",
                        "the workspace was replaced since the session: put the original directory "
                        "back at that path");
    }
    return sys_error("opening the workspace " + path);
  }
  return fd;
}

Result<UniqueFd> open_workspace(const std::string& path,
                                const std::optional<WorkspaceIdentity>& expected) {
  ASSIGN_OR_RETURN(UniqueFd fd, open_dir_nofollow(path));
  if (expected) {
    ASSIGN_OR_RETURN(WorkspaceIdentity now, identity_of(fd.get()));
    if (now.dev != expected->dev || now.ino != expected->ino) {
      return make_error("the workspace was replaced since the session: " + path +
                            " is another directory than the one the session ran on (device " +
                            std::to_string(expected->dev) + " inode " +
                            std::to_string(expected->ino) + ", now device " +
                            std::to_string(now.dev) + " inode " + std::to_string(now.ino) + ")",
                        "put the original directory back at that path");
    }
  }
  return fd;
}

}  // namespace cordon::fusefs
