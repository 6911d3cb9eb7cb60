// replace_file: write a temporary file beside the target, then rename it over.
#include "base/replace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/unique_fd.h"

namespace cordon {
namespace {

Status write_all(int fd, std::string_view data, const std::string& tmp) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return sys_error("write(\"" + tmp + "\")");
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

Status fill(UniqueFd fd, std::string_view data, const ReplaceOptions& opts,
            const std::string& tmp) {
  if ((opts.uid != static_cast<uid_t>(-1) || opts.gid != static_cast<gid_t>(-1)) &&
      ::fchown(fd.get(), opts.uid, opts.gid) != 0) {
    return sys_error("fchown(\"" + tmp + "\")");
  }
  if (::fchmod(fd.get(), opts.mode) != 0) {
    return sys_error("fchmod(\"" + tmp + "\")");
  }
  TRY(write_all(fd.get(), data, tmp));
  if (::fsync(fd.get()) != 0) {
    return sys_error("fsync(\"" + tmp + "\")");
  }
  // close() reports a deferred write error (NFS, a full disk): it is checked like the write.
  if (::close(fd.release()) != 0) {
    return sys_error("close(\"" + tmp + "\")");
  }
  return {};
}

}  // namespace

Status replace_file(const std::string& path, std::string_view data, const ReplaceOptions& opts) {
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  UniqueFd fd(::open(tmp.c_str(), flags, opts.mode & 0600));
  if (!fd && errno == EEXIST) {
    // Left by a crashed writer whose pid this process now has: ours to remove (unlink removes a
    // planted symlink itself, never its target).
    (void)::unlink(tmp.c_str());
    fd = UniqueFd(::open(tmp.c_str(), flags, opts.mode & 0600));
  }
  if (!fd) {
    return sys_error("open(\"" + tmp + "\", O_CREAT | O_EXCL)");
  }
  Status s = fill(std::move(fd), data, opts, tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = sys_error("rename(\"" + tmp + "\", \"" + path + "\")");
  }
  if (!s.ok()) {
    (void)::unlink(tmp.c_str());
  }
  return s;
}

}  // namespace cordon
