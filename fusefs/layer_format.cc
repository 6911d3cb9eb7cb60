// The two upper-layer formats a cow session can leave, read the same way.
#include "fusefs/layer_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {
namespace {

// overlayfs keeps its metadata under "trusted.overlay." by default and "user.overlay." with the
// userxattr mount option, which the fallback always uses (a user namespace cannot write
// trusted.*). Both are read: a root mount by hand would have written the trusted ones.
constexpr const char* kOverlayPrefixes[] = {"user.overlay.", "trusted.overlay."};

// The value of the overlay xattr `key` ("opaque", "redirect", ...) on fd, "" when absent.
std::string overlay_xattr(int fd, const char* key) {
  for (const char* prefix : kOverlayPrefixes) {
    std::string name = std::string(prefix) + key;
    char value[256];
    ssize_t n = ::fgetxattr(fd, name.c_str(), value, sizeof value);
    if (n >= 0) {
      return n == 0 ? std::string(1, '\0') : std::string(value, static_cast<size_t>(n));
    }
  }
  return {};
}

bool has_overlay_xattr_at(int dirfd, const std::string& name, const char* key) {
  // An O_PATH fd cannot read xattrs; a regular file of the layer opened read-only can.
  UniqueFd fd(open_beneath(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  return fd && !overlay_xattr(fd.get(), key).empty();
}

}  // namespace

const char* layer_format_name(LayerFormat f) {
  return f == LayerFormat::Overlay ? "overlay" : "cordon-fs";
}

Result<LayerFormat> parse_layer_format(std::string_view backend) {
  if (backend == "cordon-fs") {
    return LayerFormat::CordonFs;
  }
  if (backend == "overlay") {
    return LayerFormat::Overlay;
  }
  return make_error("unknown copy-on-write backend \"" + std::string(backend) + "\"",
                    "the session was written by another version of cordon");
}

UpperEntry classify_upper(LayerFormat f, int dirfd, const std::string& name, const struct stat& st,
                          std::string* target) {
  if (f == LayerFormat::CordonFs) {
    std::string_view t = whiteout_target(name);
    if (!t.empty()) {
      *target = std::string(t);
      return UpperEntry::Whiteout;
    }
    return is_reserved_name(name) ? UpperEntry::Internal : UpperEntry::User;
  }
  if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
    *target = name;
    return UpperEntry::Whiteout;
  }
  if (S_ISREG(st.st_mode) && st.st_size == 0 && has_overlay_xattr_at(dirfd, name, "whiteout")) {
    *target = name;
    return UpperEntry::Whiteout;
  }
  return UpperEntry::User;
}

bool is_opaque_dir(LayerFormat f, int dirfd) {
  if (f == LayerFormat::CordonFs) {
    struct stat st;
    return ::fstatat(dirfd, std::string(kOpaqueMarker).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  }
  // "y": opaque. "x": not opaque, only marks a directory that holds xattr whiteouts.
  return overlay_xattr(dirfd, "opaque") == "y";
}

Status check_overlay_features(LayerFormat f, int fd, const std::string& rel) {
  if (f != LayerFormat::Overlay) {
    return {};
  }
  for (const char* key : {"redirect", "metacopy"}) {
    if (!overlay_xattr(fd, key).empty()) {
      return make_error(
          "the layer entry " + rel + " uses overlayfs " + key + ", which cordon does not read back",
          "the session's upper/ was not written by cordon's overlay fallback; "
          "inspect it by hand");
    }
  }
  return {};
}

Status check_overlay_features_at(LayerFormat f, int dirfd, const std::string& name,
                                 const std::string& rel) {
  if (f != LayerFormat::Overlay) {
    return {};
  }
  // Through the directory fd's magic link: `name` is one component and is not followed, so the
  // lookup cannot leave the directory.
  char list[4096];
  std::string path = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
  ssize_t n = ::llistxattr(path.c_str(), list, sizeof list);
  // Overlayfs marks every copied-up file with an origin xattr: only the two features matter.
  bool listed = n < 0;  // ERANGE (a long list) or an error: the open below decides
  for (ssize_t i = 0; i < n && !listed;) {
    std::string_view key(list + i, ::strnlen(list + i, static_cast<size_t>(n - i)));
    for (const char* prefix : kOverlayPrefixes) {
      for (const char* feature : {"redirect", "metacopy"}) {
        listed = listed || key == std::string(prefix) + feature;
      }
    }
    i += static_cast<ssize_t>(key.size()) + 1;
  }
  if (!listed) {
    return {};
  }
  UniqueFd fd(open_beneath(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    return sys_error("opening the upper layer's " + rel);
  }
  return check_overlay_features(f, fd.get(), rel);
}

bool xattr_commits(std::string_view name) {
  return name.starts_with("user.") && !name.starts_with("user.overlay.");
}

int make_whiteout_at(LayerFormat f, int dirfd, const std::string& name) {
  if (f == LayerFormat::Overlay) {
    // A 0/0 character device: unprivileged users may make this one (Linux >= 5.8).
    if (::mknodat(dirfd, name.c_str(), S_IFCHR | 0600, makedev(0, 0)) != 0) {
      return errno == EEXIST ? 0 : -errno;
    }
    return 0;
  }
  std::string wh = whiteout_name(name);
  if (wh.size() > 255) {
    return -ENAMETOOLONG;  // documented limit: lower names over 251 bytes cannot be deleted
  }
  int fd = ::openat(dirfd, wh.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return errno == EEXIST ? 0 : -errno;
  }
  ::close(fd);
  return 0;
}

int make_merged(LayerFormat f, int dirfd, int lower_dirfd) {
  if (!is_opaque_dir(f, dirfd)) {
    return 0;
  }
  int err = 0;
  std::vector<std::string> upper_names = list_dir(dirfd, &err);
  if (err != 0) {
    return -err;
  }
  std::set<std::string> present(upper_names.begin(), upper_names.end());
  std::vector<std::string> lower_names = list_dir(lower_dirfd, &err);
  if (err != 0) {
    return -err;
  }
  for (const auto& n : lower_names) {
    if (present.count(n) == 0) {
      if (int rc = make_whiteout_at(f, dirfd, n); rc != 0) {
        return rc;
      }
    }
  }
  if (f == LayerFormat::CordonFs) {
    if (::unlinkat(dirfd, std::string(kOpaqueMarker).c_str(), 0) != 0 && errno != ENOENT) {
      return -errno;
    }
    return 0;
  }
  for (const char* prefix : kOverlayPrefixes) {
    std::string name = std::string(prefix) + "opaque";
    if (::fremovexattr(dirfd, name.c_str()) != 0 && errno != ENODATA && errno != EPERM) {
      return -errno;
    }
  }
  return 0;
}

}  // namespace cordon::fusefs
