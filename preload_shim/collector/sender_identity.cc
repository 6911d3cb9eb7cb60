// /proc reads and kcmp behind the collector's kernel-verified sender identity.
#include "preload_shim/collector/sender_identity.h"

#include <fcntl.h>
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

#include "base/read_up_to.h"
#include "base/unique_fd.h"

namespace cordon::preload_shim {

namespace {

// Reads at most `max` bytes of a /proc file.
std::optional<std::string> read_proc(const std::string& path, size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  return fd ? read_up_to(fd.get(), max) : std::nullopt;
}

std::string proc_path(pid_t pid, const char* leaf) {
  return "/proc/" + std::to_string(pid) + "/" + leaf;
}

// Whitespace-separated decimal numbers after "Key:" up to the end of the line.
std::vector<int64_t> numbers(std::string_view line) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) {
      ++i;
    }
    size_t start = i;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9') {
      ++i;
    }
    if (i == start) {
      break;
    }
    int64_t v = 0;
    if (std::from_chars(line.data() + start, line.data() + i, v).ec != std::errc()) {
      break;
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

std::optional<StatusIds> parse_status(std::string_view text) {
  StatusIds ids;
  bool have_nspid = false;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.rfind("NSpid:", 0) == 0) {
      ids.nspid = numbers(line.substr(6));
      have_nspid = !ids.nspid.empty();
    } else if (line.rfind("PPid:", 0) == 0) {
      auto v = numbers(line.substr(5));
      if (v.size() == 1) {
        ids.ppid = v[0];
      }
    }
  }
  if (!have_nspid) {
    return std::nullopt;
  }
  return ids;
}

Argv parse_cmdline(std::string_view bytes, size_t max_args, size_t max_bytes) {
  Argv a;
  size_t used = 0;
  while (!bytes.empty()) {
    size_t nul = bytes.find('\0');
    std::string_view arg = bytes.substr(0, nul);
    bytes = nul == std::string_view::npos ? std::string_view() : bytes.substr(nul + 1);
    ++a.argc;
    if (a.args.size() < max_args && used < max_bytes) {
      arg = arg.substr(0, max_bytes - used);
      used += arg.size();
      a.args.emplace_back(arg);
    }
  }
  return a;
}

std::optional<uint32_t> parse_fdinfo_flags(std::string_view text) {
  size_t at = text.find("flags:");
  if (at == std::string_view::npos || (at != 0 && text[at - 1] != '\n')) {
    return std::nullopt;
  }
  std::string_view rest = text.substr(at + 6);
  size_t i = rest.find_first_not_of(" \t");
  if (i == std::string_view::npos) {
    return std::nullopt;
  }
  size_t end = rest.find_first_not_of("01234567", i);
  uint32_t v = 0;
  auto r = std::from_chars(rest.data() + i,
                           rest.data() + (end == std::string_view::npos ? rest.size() : end), v, 8);
  if (r.ec != std::errc() || r.ptr == rest.data() + i) {
    return std::nullopt;
  }
  return v;
}

std::optional<StatusIds> read_status(pid_t pid) {
  auto text = read_proc(proc_path(pid, "status"), 8192);
  return text ? parse_status(*text) : std::nullopt;
}

std::string read_exe(pid_t pid) {
  char buf[4096];
  ssize_t n = ::readlink(proc_path(pid, "exe").c_str(), buf, sizeof buf);
  return n > 0 && static_cast<size_t>(n) < sizeof buf ? std::string(buf, static_cast<size_t>(n))
                                                      : std::string();
}

std::optional<Argv> read_cmdline(pid_t pid, size_t max_args, size_t max_bytes) {
  // argc counts the arguments within what is read (64 KiB): enough for any record to say "more".
  auto bytes = read_proc(proc_path(pid, "cmdline"), 64 << 10);
  if (!bytes || bytes->empty()) {
    return std::nullopt;  // gone, or a zombie (its memory is gone)
  }
  if (bytes->back() == '\0') {
    bytes->pop_back();  // the terminator of the last argument, not an empty one after it
  }
  return parse_cmdline(*bytes, max_args, max_bytes);
}

bool holds_same_file(pid_t pid, int fd, int ours) {
  if (fd < 0 || ours < 0) {
    return false;
  }
  // 0: the same open file. The kernel compares the objects, so no other file can pass for it.
  if (::syscall(SYS_kcmp, ::getpid(), pid, KCMP_FILE, ours, fd) != 0) {
    return false;
  }
  auto info = read_proc("/proc/" + std::to_string(pid) + "/fdinfo/" + std::to_string(fd), 1024);
  if (!info) {
    return false;
  }
  auto flags = parse_fdinfo_flags(*info);
  return flags && (*flags & O_CLOEXEC) != 0;
}

size_t own_pidns_depth() {
  auto text = read_proc("/proc/self/status", 8192);
  auto ids = text ? parse_status(*text) : std::nullopt;
  return ids ? ids->nspid.size() : 1;
}

}  // namespace cordon::preload_shim
