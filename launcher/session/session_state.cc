// A session's state from its record: liveness, end, pending changes, size (session_state.h).
#include "launcher/session/session_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/session/session_store.h"
#include "launcher/sidecars/cowfs_sidecar.h"

namespace cordon::launcher {
namespace {

constexpr size_t kMaxLastLine = 64u << 10;  // EventLog's own line limit

int64_t mtime_at(int dir_fd, const char* name) {
  struct stat st;
  int flags = *name == '\0' ? AT_EMPTY_PATH : AT_SYMLINK_NOFOLLOW;
  return ::fstatat(dir_fd, name, &st, flags) == 0 ? static_cast<int64_t>(st.st_mtim.tv_sec) : 0;
}

bool recorded_end(int dir_fd) {
  if (store::open_file(dir_fd, "summary.json").ok()) {
    return true;
  }
  auto events = store::open_file(dir_fd, "events.jsonl");
  if (!events.ok()) {
    return false;
  }
  auto last = store::parse_event(store::read_last_line(events->get(), kMaxLastLine));
  return last.is_object() && last.value("kind", "") == "session.end" &&
         last.value("source", "") == "launcher";
}

// Whether upper/ holds anything: a commit or a discard leaves it empty. Unreadable counts as
// holding something, so a session whose layer cannot be checked is never taken for a clean one.
bool upper_holds_changes(int dir_fd) {
  int fd = ::openat(dir_fd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return errno != ENOENT;
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return true;
  }
  bool any = false;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") {
      any = true;
      break;
    }
  }
  bool failed = !any && errno != 0;
  ::closedir(d);
  return any || failed;
}

// Disk usage beneath a directory, on its own filesystem, without following symlinks. Iterative,
// so a deep tree cannot exhaust the stack; bounded in entries.
void measure(int top_fd, SessionState& s) {
  struct stat top;
  if (::fstat(top_fd, &top) != 0) {
    return;
  }
  s.bytes += static_cast<uint64_t>(top.st_blocks) * 512;
  std::vector<UniqueFd> todo;
  todo.emplace_back(::dup(top_fd));
  uint64_t seen = 0;
  bool top_level = true;
  while (!todo.empty()) {
    UniqueFd dir = std::move(todo.back());
    todo.pop_back();
    if (!dir) {
      continue;
    }
    DIR* d = ::fdopendir(dir.release());
    if (d == nullptr) {
      continue;
    }
    while (const dirent* e = ::readdir(d)) {
      std::string_view n = e->d_name;
      // mnt/ is where cordon-fs mounts the view: never stat a mount its daemon may not answer.
      if (n == "." || n == ".." || (top_level && n == "mnt")) {
        continue;
      }
      if (++seen > kMaxMeasured) {
        s.bytes_more = true;
        ::closedir(d);
        return;
      }
      struct stat st;
      if (::fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          st.st_dev != top.st_dev) {
        continue;
      }
      s.bytes += static_cast<uint64_t>(st.st_blocks) * 512;
      if (S_ISDIR(st.st_mode)) {
        todo.emplace_back(
            ::openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      }
    }
    ::closedir(d);
    top_level = false;
  }
}

}  // namespace

SessionState read_session_state(int dir_fd, const std::string& dir_path, bool with_size) {
  SessionState s;
  s.running = !store::try_lock_session(dir_fd) || cowfs_daemon_alive(dir_path);
  s.ended = recorded_end(dir_fd);
  s.last_write = std::max(
      {mtime_at(dir_fd, "summary.json"), mtime_at(dir_fd, "events.jsonl"), mtime_at(dir_fd, "")});
  s.pending = upper_holds_changes(dir_fd);
  if (with_size) {
    measure(dir_fd, s);
  }
  return s;
}

}  // namespace cordon::launcher
