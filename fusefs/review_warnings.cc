// Review warnings: modes, symlink targets, special files and scripts disguised as binary.
#include "fusefs/review_warnings.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/unique_fd.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {
namespace {

// The first bytes of `rel` under `root` (a regular file; never a symlink followed).
std::string head_of(int root, const std::string& rel) {
  UniqueFd fd(open_beneath(root, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    return "";
  }
  char buf[8000];
  ssize_t n = ::pread(fd.get(), buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }

// Whether what comes before the first NUL is a line or more of text (no other control bytes):
// a script made to look binary, not a real binary format.
bool text_before_nul(const std::string& s) {
  size_t nul = s.find('\0');
  if (nul == std::string::npos || s.find('\n') > nul) {
    return false;
  }
  for (size_t i = 0; i < nul; ++i) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x20 && b != '\n' && b != '\t' && b != '\r') {
      return false;
    }
  }
  return true;
}

// Whether the symlink at `path` with `target` resolves, lexically, outside the workspace.
bool leaves_workspace(const std::string& path, const std::string& target) {
  if (target.empty() || target[0] == '/') {
    return true;  // absolute: the host's path, whatever the workspace holds at that name
  }
  int depth = static_cast<int>(std::count(path.begin(), path.end(), '/'));  // of its directory
  size_t pos = 0;
  while (pos <= target.size()) {
    size_t end = target.find('/', pos);
    std::string seg = target.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (seg == "..") {
      if (--depth < 0) {
        return true;
      }
    } else if (!seg.empty() && seg != ".") {
      ++depth;
    }
    if (end == std::string::npos) {
      break;
    }
    pos = end + 1;
  }
  return false;
}

}  // namespace

std::vector<std::string> review_warnings(const Change& c, int lower_fd, int upper_fd) {
  std::vector<std::string> out;
  if (c.kind == ChangeKind::Deleted) {
    return out;
  }
  const bool same_type = c.kind == ChangeKind::Modified && c.old_type == c.type;
  if (c.type != 'l' && (c.mode & 0002) != 0 && !(same_type && (c.old_mode & 0002) != 0)) {
    out.push_back(same_type ? "world-writable now: anyone on the host may change it"
                            : "world-writable: anyone on the host may change it");
  }
  if (c.type == 'l') {
    // Read through its directory opened beneath the layer: no component is followed.
    size_t slash = c.path.rfind('/');
    UniqueFd dir(slash == std::string::npos ? ::fcntl(upper_fd, F_DUPFD_CLOEXEC, 0)
                                            : open_beneath(upper_fd, c.path.substr(0, slash),
                                                           O_PATH | O_DIRECTORY | O_NOFOLLOW));
    std::string base = slash == std::string::npos ? c.path : c.path.substr(slash + 1);
    char buf[PATH_MAX];
    ssize_t n = dir ? ::readlinkat(dir.get(), base.c_str(), buf, sizeof buf - 1) : -1;
    std::string target = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    if (n > 0 && leaves_workspace(c.path, target)) {
      out.push_back("symlink out of the workspace: whatever follows it reaches the host there");
    }
  }
  if (c.kind == ChangeKind::Modified && c.old_type == 'f' && (c.type == 'p' || c.type == 's')) {
    out.push_back(std::string(c.type == 'p' ? "a FIFO" : "a socket") +
                  " replaces a file: what reads it blocks or talks to a process");
  }
  if (c.type == 'f') {
    std::string now = head_of(upper_fd, c.path);
    if (has_nul(now)) {
      bool was_text = c.kind == ChangeKind::Modified && c.old_type == 'f' &&
                      !has_nul(head_of(lower_fd, c.path));
      if (now.rfind("#!", 0) == 0) {
        out.push_back("starts with #! but holds a NUL byte: shown as binary, runs as a script");
      } else if ((c.mode & 0111) != 0 && was_text) {
        out.push_back("executable text turned binary by a NUL byte: read it before running it");
      } else if (text_before_nul(now)) {
        // `python c.py` runs what follows the NUL too; the diff shows none of it.
        out.push_back("text with a NUL byte: shown as binary; interpreters still read it");
      }
    }
  }
  return out;
}

}  // namespace cordon::fusefs
