// Looking detached sessions up by id or by name, for `cordon exec` and `cordon stop`.
#include "launcher/session/detached.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include "launcher/session/session.h"
#include "launcher/session/session_store.h"
#include "launcher/session_control.h"

namespace cordon::launcher {
namespace {

bool has_socket(int dir_fd) {
  struct stat st {};
  return ::fstatat(dir_fd, kExecSocketName, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode);
}

DetachedSession at(const std::string& root, const std::string& id) {
  std::string dir = root + "/" + id;
  return {id, dir, dir + "/" + kExecSocketName};
}

}  // namespace

std::optional<std::string> find_running_by_name(const std::string& root, const std::string& name) {
  auto root_fd = store::open_root(root);
  if (!root_fd.ok()) {
    return std::nullopt;
  }
  auto ids = store::list_sessions(root_fd->get());
  if (!ids.ok()) {
    return std::nullopt;
  }
  // Newest first, and a bounded walk: detached sessions are recent by nature.
  size_t seen = 0;
  for (auto it = ids->rbegin(); it != ids->rend() && seen < 10000; ++it, ++seen) {
    auto dir = store::open_session_dir(root_fd->get(), *it);
    if (!dir.ok() || !has_socket(dir->get())) {
      continue;
    }
    auto n = store::read_file(dir->get(), kSessionNameFile, 256);
    if (n.ok() && *n == name + "\n") {
      return *it;
    }
  }
  return std::nullopt;
}

Result<DetachedSession> find_detached(const std::string& root, const std::string& text) {
  if (text == "last" || store::is_id_text(text)) {
    auto id = resolve_session(root, text);
    if (id.ok()) {
      return at(root, *id);
    }
    if (text == "last" || !find_running_by_name(root, text)) {
      return std::move(id).error();
    }
  }
  if (auto id = find_running_by_name(root, text)) {
    return at(root, *id);
  }
  return make_error("no running session is named " + text + " or has that id",
                    "`cordon ls` lists the sessions");
}

}  // namespace cordon::launcher
