// Reading the cgroup layout (/proc/self/mountinfo, /proc/self/cgroup) and small cgroupfs file I/O
// shared by the v1 and v2 backends.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "base/unique_fd.h"
#include "launcher/limits/limits_backend.h"

namespace cordon::launcher::limits_detail {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_field(const std::string& s) {
  auto oct = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && oct(s[i + 1]) && oct(s[i + 2]) && oct(s[i + 3])) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
      continue;
    }
    out += s[i];
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

std::vector<CgroupMount> read_cgroup_mounts(const std::string& mountinfo_text) {
  std::vector<CgroupMount> mounts;
  std::istringstream in(mountinfo_text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string w;
    while (ls >> w) {
      f.push_back(w);
    }
    // id parent maj:min root mount_point options [optional...] - fstype source super_options
    size_t dash = 0;
    for (size_t i = 6; i < f.size(); ++i) {
      if (f[i] == "-") {
        dash = i;
        break;
      }
    }
    if (dash == 0 || dash + 2 >= f.size()) {
      continue;
    }
    const std::string& fstype = f[dash + 1];
    if (fstype != "cgroup" && fstype != "cgroup2") {
      continue;
    }
    CgroupMount m;
    m.root = unescape_mount_field(f[3]);
    m.mount_point = unescape_mount_field(f[4]);
    m.fstype = fstype;
    if (fstype == "cgroup" && dash + 3 < f.size()) {
      for (const auto& opt : split(f[dash + 3], ',')) {
        if (opt != "rw" && opt != "ro" && opt.find('=') == std::string::npos &&
            opt != "clone_children" && opt != "noprefix" && opt != "xattr" &&
            opt != "cpuset_v2_mode") {
          m.controllers.push_back(opt);
        }
      }
    }
    mounts.push_back(std::move(m));
  }
  return mounts;
}

std::string own_cgroup_path(const std::string& proc_cgroup_text, const std::string& controller) {
  std::istringstream in(proc_cgroup_text);
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-id:controller-list:path — the path may itself contain ':'.
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) {
      continue;
    }
    std::string id = line.substr(0, a);
    std::string ctrls = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (controller.empty()) {
      if (id == "0" && ctrls.empty()) {
        return path;
      }
      continue;
    }
    for (const auto& c : split(ctrls, ',')) {
      if (c == controller) {
        return path;
      }
    }
  }
  return "";
}

std::string cgroup_dir(const CgroupMount& m, const std::string& own_path) {
  if (own_path.empty() || own_path[0] != '/') {
    return "";
  }
  std::string rel;
  if (m.root == "/") {
    rel = own_path;
  } else if (own_path == m.root) {
    rel = "/";
  } else if (own_path.compare(0, m.root.size() + 1, m.root + "/") == 0) {
    rel = own_path.substr(m.root.size());
  } else {
    return "";  // our cgroup is outside what this mount shows (e.g. a container's view)
  }
  if (rel == "/") {
    return m.mount_point;
  }
  // "/sys/fs/cgroup/memory" + "/a/b"; a deleted cgroup shows " (deleted)" and cannot be used.
  if (rel.find(" (deleted)") != std::string::npos) {
    return "";
  }
  return m.mount_point + rel;
}

Result<std::string> read_small_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return sys_error("open(\"" + path + "\", O_RDONLY)");
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return sys_error("read(\"" + path + "\")");
    }
    if (n == 0) {
      break;
    }
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) {
      return make_error("read(\"" + path + "\"): larger than 1 MiB, not a cgroup/proc file");
    }
  }
  return out;
}

Status write_file(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return sys_error("open(\"" + path + "\", O_WRONLY)");
  }
  // cgroupfs takes each write(2) as one command; a short write would be a different value.
  ssize_t n = ::write(fd.get(), value.data(), value.size());
  if (n < 0) {
    return sys_error("write(\"" + path + "\", \"" + value + "\")");
  }
  if (static_cast<size_t>(n) != value.size()) {
    return make_error("write(\"" + path + "\", \"" + value + "\"): short write");
  }
  return {};
}

uint64_t keyed_counter(const std::string& text, const std::string& key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string line = text.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    if (line.compare(0, key.size() + 1, key + " ") == 0) {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
    }
    if (eol == std::string::npos) {
      break;
    }
    pos = eol + 1;
  }
  return 0;
}

std::string format_bytes(uint64_t n) {
  static const char* units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (u < 5 && n != 0 && n % 1024 == 0) {
    n /= 1024;
    ++u;
  }
  return std::to_string(n) + units[u];
}

}  // namespace cordon::launcher::limits_detail
