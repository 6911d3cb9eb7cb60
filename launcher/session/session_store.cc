// Safe reads of the session record: directory fds, O_NOFOLLOW, regular files only, bounded sizes.
#include "launcher/session/session_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace cordon::launcher::store {

Result<UniqueFd> open_root(const std::string& root) {
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return sys_error("open(\"" + root + "\", O_DIRECTORY)");
  }
  return UniqueFd(fd);
}

Result<std::vector<std::string>> list_sessions(int root_fd) {
  // dup: closedir() closes the fd fdopendir() was given, and the caller keeps root_fd.
  int fd = ::openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return sys_error("openat(sessions root, \".\")");
  }
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    Error e = sys_error("fdopendir(sessions root)");
    ::close(fd);
    return e;
  }
  struct Entry {
    std::string id;
    int64_t ns;  // policy.json mtime: orders sessions started within the same second
  };
  std::vector<Entry> entries;
  errno = 0;
  while (struct dirent* d = ::readdir(dir)) {
    std::string_view name = d->d_name;
    if (!is_session_id(name)) {
      continue;  // tmp files, stray entries: not sessions
    }
    if (d->d_type != DT_DIR && d->d_type != DT_UNKNOWN) {
      continue;
    }
    struct stat st;
    int64_t ns = 0;
    if (::fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
      continue;
    }
    std::string pol = std::string(name) + "/policy.json";
    if (::fstatat(dirfd(dir), pol.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    entries.push_back({std::string(name), ns});
  }
  ::closedir(dir);
  // The id starts with its UTC time, so string order is time order to the second.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    int c = a.id.compare(0, 15, b.id, 0, 15);
    if (c != 0) {
      return c < 0;
    }
    if (a.ns != b.ns) {
      return a.ns < b.ns;
    }
    return a.id < b.id;
  });
  std::vector<std::string> ids;
  ids.reserve(entries.size());
  for (auto& e : entries) {
    ids.push_back(std::move(e.id));
  }
  return ids;
}

bool try_lock_session(int dir_fd) {
  while (::flock(dir_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

Result<UniqueFd> open_session_dir(int root_fd, std::string_view id) {
  std::string name(id);
  int fd = ::openat(root_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return sys_error("openat(sessions root, \"" + name + "\", O_DIRECTORY|O_NOFOLLOW)");
  }
  return UniqueFd(fd);
}

Result<UniqueFd> open_file(int dir_fd, const char* name) {
  int fd = ::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return sys_error(std::string("openat(session dir, \"") + name + "\", O_NOFOLLOW)");
  }
  UniqueFd f(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return sys_error(std::string("fstat(") + name + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    return make_error(std::string(name) + " in the session directory is not a regular file",
                      "the session record was tampered with; inspect it by hand");
  }
  return f;
}

Result<std::string> read_file(int dir_fd, const char* name, size_t limit) {
  ASSIGN_OR_RETURN(UniqueFd fd, open_file(dir_fd, name));
  std::string data;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return sys_error(std::string("read(") + name + ")");
    }
    if (n == 0) {
      break;
    }
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > limit) {
      return make_error(std::string(name) + " is larger than " + std::to_string(limit) + " bytes");
    }
  }
  return data;
}

namespace {
// pread until `len` bytes or EOF; short on error.
std::string pread_all(int fd, off_t off, size_t len) {
  std::string out(len, '\0');
  size_t got = 0;
  while (got < len) {
    ssize_t n = ::pread(fd, out.data() + got, len - got, off + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}
}  // namespace

std::string read_head(int fd, size_t max) { return pread_all(fd, 0, max); }

std::string read_last_line(int fd, size_t max) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    return {};
  }
  size_t size = static_cast<size_t>(st.st_size);
  size_t len = std::min(size, max);
  std::string tail = pread_all(fd, static_cast<off_t>(size - len), len);
  while (!tail.empty() && tail.back() == '\n') {
    tail.pop_back();
  }
  size_t nl = tail.rfind('\n');
  if (nl != std::string::npos) {
    return tail.substr(nl + 1);
  }
  // No newline inside the window: the whole window is the line only if it starts the file.
  return len == size ? tail : std::string();
}

nlohmann::json parse_event(std::string_view line) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : line) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) {
        return nlohmann::json(nlohmann::json::value_t::discarded);
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return nlohmann::json::parse(line, nullptr, false);
}

Result<bool> for_each_line(int fd, size_t max_bytes, const LineFn& emit) {
  std::string buf;        // the start of a line that spans chunks
  bool skipping = false;  // inside an over-long line: drop bytes up to its newline
  size_t number = 0;
  size_t total = 0;
  char chunk[65536];
  for (;;) {
    size_t want = sizeof chunk;
    if (max_bytes != 0) {
      if (total >= max_bytes) {
        return true;  // the partial line in buf is not emitted: it may continue past the limit
      }
      want = std::min(want, max_bytes - total);
    }
    ssize_t n = ::read(fd, chunk, want);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return sys_error("read(events.jsonl)");
    }
    if (n == 0) {
      break;
    }
    total += static_cast<size_t>(n);
    std::string_view data(chunk, static_cast<size_t>(n));
    while (!data.empty()) {
      size_t nl = data.find('\n');
      if (nl == std::string_view::npos) {
        if (!skipping) {
          buf.append(data);
          if (buf.size() > kMaxLine) {
            skipping = true;
            buf.clear();
          }
        }
        break;
      }
      ++number;
      if (skipping) {
        emit(number, std::string_view(), false);
      } else if (buf.empty()) {
        emit(number, data.substr(0, nl), true);  // the common case: no copy
      } else {
        buf.append(data.substr(0, nl));
        emit(number, std::string_view(buf), true);
      }
      buf.clear();
      skipping = false;
      data.remove_prefix(nl + 1);
    }
  }
  if (!buf.empty() || skipping) {
    ++number;
    emit(number, std::string_view(buf), !skipping);  // a writer died mid-line
  }
  return false;
}

}  // namespace cordon::launcher::store
