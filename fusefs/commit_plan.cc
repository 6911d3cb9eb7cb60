// Selection and validation of a commit, before the workspace is touched.
#include "fusefs/commit_plan.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "fusefs/commit_journal.h"
#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {
namespace {

std::string normalized(std::string o) {
  while (o.size() > 1 && o.back() == '/') {
    o.pop_back();
  }
  while (o.rfind("./", 0) == 0) {
    o = o.substr(2);
  }
  return o.empty() ? "." : o;
}

bool at_or_below(const std::string& path, const std::string& top) {
  return top == "." || path == top || path.rfind(top + "/", 0) == 0;
}

// The PATH argument that asks for `c`, and whether it names a protected change explicitly: the
// path itself, or a directory above it that is protected itself (".git/hooks", ".vscode").
bool selected(const Change& c, const CommitOptions& o, bool* names_protected) {
  *names_protected = false;
  if (o.only.empty()) {
    return true;
  }
  bool any = false;
  for (const auto& raw : o.only) {
    std::string top = normalized(raw);
    if (!at_or_below(c.path, top)) {
      continue;
    }
    any = true;
    if (top != "." &&
        (c.path == top || (o.policy != nullptr && o.policy->protect_rule(top, true)))) {
      *names_protected = true;
    }
  }
  return any;
}

// Why a change cannot be applied whatever was asked, or "" when it can.
std::string unsupported(const Change& c, size_t lower_len) {
  auto [dir, base] = split_path(c.path);
  if (base.starts_with(".cordon-commit-")) {
    return "the name is reserved for cordon's commit staging";
  }
  if (lower_len + 1 + c.path.size() >= PATH_MAX) {
    return "the path is " + std::to_string(c.path.size()) +
           " bytes, too long for the workspace (PATH_MAX " + std::to_string(PATH_MAX) + ")";
  }
  if (c.kind == ChangeKind::Deleted) {
    return "";
  }
  if (c.type == 's') {
    return "a unix socket: only the process that bound it could use it; sockets are not committed";
  }
  if (c.type == 'c' || c.type == 'b') {
    return "a device node: device nodes are never committed";
  }
  return "";
}

// The origin record of `path` in the upper layer: "ino size mtime_ns" of the real file when the
// session first touched it (cordon-fs format only).
bool read_origin(int upper_root, const std::string& path, std::string* out) {
  auto [parent, name] = split_path(path);
  std::string p = parent.empty() ? origin_name(name) : parent + "/" + origin_name(name);
  UniqueFd fd(open_beneath(upper_root, p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    return false;
  }
  char buf[128];
  ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) {
    return false;
  }
  out->assign(buf, static_cast<size_t>(n));
  while (!out->empty() && out->back() == '\n') {
    out->pop_back();
  }
  return true;
}

// "ino size mtime_ns mode uid gid": a chmod or chown on the host changes neither size nor mtime,
// and a commit must not silently undo it.
std::string origin_of(const struct stat& st) {
  return std::to_string(st.st_ino) + " " + std::to_string(st.st_size) + " " +
         std::to_string(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec) +
         " " + std::to_string(st.st_mode & 07777) + " " + std::to_string(st.st_uid) + " " +
         std::to_string(st.st_gid);
}

// Whether `record` describes `st`. Records of older sessions (and an undo's validated lines)
// hold only "ino size mtime_ns": those three are compared.
bool same_origin(const std::string& record, const struct stat& st) {
  std::string now = origin_of(st);
  if (std::count(record.begin(), record.end(), ' ') == 2) {
    size_t third = now.find(' ', now.find(' ', now.find(' ') + 1) + 1);
    now.resize(third);
  }
  return record == now;
}

// Strictly before: a change in the same clock tick as the session's start counts as after it
// (timestamps come from a coarse clock; a tie is not proof of "before").
bool before(const timespec& t, const timespec& since) {
  return t.tv_sec < since.tv_sec || (t.tv_sec == since.tv_sec && t.tv_nsec < since.tv_nsec);
}

// lstat of `rel` under the workspace root without following any symlink on the way.
bool real_stat(int lower_root, const std::string& rel, struct stat* st) {
  UniqueFd fd(open_beneath(lower_root, rel, O_PATH | O_NOFOLLOW));
  return fd && stat_fd(fd.get(), st) == 0;
}

class Planner {
 public:
  Planner(int lower_root, int upper_root, const std::string& lower_path, const CommitOptions& o)
      : lower_(lower_root), upper_(upper_root), lower_len_(lower_path.size()), o_(o) {}

  Result<CommitPlan> run(std::vector<Change> changes) {
    TRY(load_validated());
    for (auto& c : changes) {
      plan_.index[c.path] = plan_.entries.size();
      plan_.entries.push_back({std::move(c)});
    }
    choose();
    hold_unreachable();
    hold_partial_removals();
    mark_covered();
    for (auto& e : plan_.entries) {
      if (e.state == EntryState::Apply) {
        check(e);
      }
    }
    return std::move(plan_);
  }

 private:
  void hold(PlannedEntry& e, std::string why) {
    e.state = EntryState::Held;
    e.why = std::move(why);
  }

  void choose() {
    for (auto& e : plan_.entries) {
      bool named = false;
      if (!selected(e.change, o_, &named)) {
        e.state = EntryState::Skip;
      } else if (std::string why = unsupported(e.change, lower_len_); !why.empty()) {
        hold(e, why);
      } else if (e.change.is_protected && !o_.include_protected && !named) {
        hold(e, "protected (" + e.change.protect_rule +
                    "): it would run code on the host; name it, or use --include-protected");
      }
    }
  }

  // A change inside a new directory needs that directory: held with it (parents sort first).
  void hold_unreachable() {
    for (auto& e : plan_.entries) {
      if (e.state != EntryState::Apply) {
        continue;
      }
      for (std::string dir = split_path(e.change.path).first; !dir.empty();
           dir = split_path(dir).first) {
        const PlannedEntry* p = plan_.find(dir);
        if (p != nullptr && CommitPlan::creates_directory(p->change) &&
            p->state != EntryState::Apply) {
          hold(e, "its new directory " + dir + " is not committed");
          break;
        }
      }
    }
  }

  // A directory is removed (deleted, or replaced by a file) only with everything beneath it.
  void hold_partial_removals() {
    for (const auto& e : plan_.entries) {
      if (e.state == EntryState::Apply) {
        continue;
      }
      for (std::string dir = split_path(e.change.path).first; !dir.empty();
           dir = split_path(dir).first) {
        auto it = plan_.index.find(dir);
        if (it == plan_.index.end()) {
          continue;
        }
        PlannedEntry& p = plan_.entries[it->second];
        if (CommitPlan::removes_directory(p.change) && p.state == EntryState::Apply) {
          hold(p, "it removes a directory holding changes that are not committed (" +
                      e.change.path + ")");
        }
      }
    }
  }

  void mark_covered() {
    for (auto& e : plan_.entries) {
      for (std::string dir = split_path(e.change.path).first; !dir.empty();
           dir = split_path(dir).first) {
        const PlannedEntry* p = plan_.find(dir);
        if (p != nullptr && p->state == EntryState::Apply &&
            (CommitPlan::creates_directory(p->change) ||
             CommitPlan::removes_directory(p->change))) {
          e.covered = true;
          break;
        }
      }
    }
  }

  void conflict(const PlannedEntry& e, const std::string& why) {
    plan_.conflicts.push_back(e.change.path + ": " + why);
  }

  // The real workspace at the change's path, against what the session saw.
  void check(PlannedEntry& e) {
    const Change& c = e.change;
    auto [dir, base] = split_path(c.path);
    if (!e.covered && !parent_ok(dir)) {
      conflict(e, "its directory is no longer a directory in the workspace");
      return;
    }
    e.real_exists = real_stat(lower_, c.path, &e.real);
    if (c.kind == ChangeKind::Added) {
      if (e.real_exists) {
        conflict(e, "created in the workspace since the session started");
      }
      return;
    }
    if (!e.real_exists) {
      conflict(e, "deleted in the workspace since the session read it");
      return;
    }
    bool dir_mode_only = c.kind == ChangeKind::Modified && c.type == 'd' && c.old_type == 'd';
    // What the session saw: cordon-fs's origin record of a file it copied up, or what an earlier,
    // undone commit validated and put back.
    std::string origin;
    bool recorded = !S_ISDIR(e.real.st_mode) && o_.format == LayerFormat::CordonFs &&
                    read_origin(upper_, c.path, &origin);
    if (!recorded) {
      auto it = validated_.find(c.path);
      recorded = it != validated_.end();
      origin = recorded ? it->second : "";
    }
    if (recorded) {
      if (!same_origin(origin, e.real)) {
        conflict(e, "changed in the workspace since the session read it");
      }
      return;
    }
    // No record of what the session saw: anything changed since it started is a conflict. A
    // directory's ctime moves when an entry is added to or removed from it (docs/new.md written
    // on the host after the session deleted docs).
    if (dir_mode_only) {
      return;
    }
    if (o_.since) {
      if (!before(e.real.st_ctim, *o_.since)) {
        conflict(e, "changed in the workspace since the session started");
      }
    } else if (o_.format == LayerFormat::CordonFs && c.kind == ChangeKind::Modified &&
               !S_ISDIR(e.real.st_mode)) {
      // cordon-fs records every real file the session shadows; none here, and no start time to
      // go by: the real file appeared after the session made its own.
      conflict(e, "created in the workspace since the session started");
    }
  }

  Status load_validated() {
    if (o_.session_dir.empty()) {
      return {};
    }
    std::string path = o_.session_dir + "/" + kCommitValidated;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) {
      return errno == ENOENT ? Status() : Status(sys_error("opening " + path));
    }
    std::string text;
    char buf[65536];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;) {
      text.append(buf, static_cast<size_t>(n));
    }
    ASSIGN_OR_RETURN(validated_, parse_validated(text));
    return {};
  }

  bool parent_ok(const std::string& dir) {
    if (dir.empty()) {
      return true;
    }
    auto it = parents_.find(dir);
    if (it != parents_.end()) {
      return it->second;
    }
    const PlannedEntry* p = plan_.find(dir);
    bool ok = false;
    if (p != nullptr && p->state == EntryState::Apply && CommitPlan::creates_directory(p->change)) {
      ok = true;  // made by the commit itself
    } else {
      UniqueFd fd(open_beneath(lower_, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW));
      ok = fd.valid();
    }
    parents_[dir] = ok;
    return ok;
  }

  int lower_, upper_;
  size_t lower_len_;
  const CommitOptions& o_;
  CommitPlan plan_;
  std::map<std::string, bool> parents_;
  std::map<std::string, std::string> validated_;  // path -> "ino size mtime_ns"
};

}  // namespace

std::pair<std::string, std::string> split_path(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return {"", path};
  }
  return {path.substr(0, slash), path.substr(slash + 1)};
}

const PlannedEntry* CommitPlan::find(const std::string& path) const {
  auto it = index.find(path);
  return it == index.end() ? nullptr : &entries[it->second];
}

bool CommitPlan::removes_directory(const Change& c) {
  return (c.kind == ChangeKind::Deleted && c.type == 'd') ||
         (c.kind == ChangeKind::Modified && c.old_type == 'd' && c.type != 'd');
}

bool CommitPlan::creates_directory(const Change& c) {
  return c.type == 'd' &&
         (c.kind == ChangeKind::Added || (c.kind == ChangeKind::Modified && c.old_type != 'd'));
}

Result<CommitPlan> plan_commit(int lower_root, int upper_root, const std::string& lower_path,
                               std::vector<Change> changes, const CommitOptions& opts) {
  return Planner(lower_root, upper_root, lower_path, opts).run(std::move(changes));
}

}  // namespace cordon::fusefs
