// Opening a cow session for review, in either layer format.
#include "launcher/session/cow_session.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fusefs/safe_io.h"
#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/session/session.h"
#include "launcher/session/session_archive.h"
#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"
#include "launcher/sidecars/cowfs_sidecar.h"
#include "policy/loader.h"

namespace cordon::launcher {

class EmptyDir {
 public:
  static Result<std::shared_ptr<EmptyDir>> make() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp == '/' ? tmp : "/tmp") + "/cordon-no-workspace-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      return sys_error("mkdtemp(\"" + templ + "\")");
    }
    return std::shared_ptr<EmptyDir>(new EmptyDir(templ));
  }
  ~EmptyDir() { ::rmdir(path_.c_str()); }
  EmptyDir(const EmptyDir&) = delete;
  EmptyDir& operator=(const EmptyDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit EmptyDir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

namespace {

// An imported session's marker: the workspace it was bound to ("" for none) and its origin. A
// marker that cannot be read binds nothing: the archive's word is never the fallback.
void read_import_marker(int dir_fd, CowSession* s) {
  s->imported = true;
  s->origin = s->workspace;
  s->workspace.clear();
  auto text = store::read_file(dir_fd, kImportedMarker, 1 << 16);
  auto j = text.ok() ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  if (!j.is_object()) {
    return;
  }
  if (j.contains("origin_workspace") && j["origin_workspace"].is_string()) {
    s->origin = j["origin_workspace"].get<std::string>();
  }
  if (j.contains("workspace") && j["workspace"].is_string()) {
    s->workspace = j["workspace"].get<std::string>();
  }
  if (j.contains("workspace_dev") && j["workspace_dev"].is_number_unsigned() &&
      j.contains("workspace_ino") && j["workspace_ino"].is_number_unsigned()) {
    s->workspace_id = fusefs::WorkspaceIdentity{j["workspace_dev"].get<uint64_t>(),
                                                j["workspace_ino"].get<uint64_t>()};
  }
}

Status collect_deletions(fusefs::LayerFormat f, int dir, const std::string& rel, int depth,
                         std::vector<std::string>* out) {
  if (depth > 2048) {
    return make_error("the upper layer nests deeper than 2048 levels at " + rel.substr(0, 200));
  }
  int dup = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);
  DIR* d = dup >= 0 ? ::fdopendir(dup) : nullptr;
  if (d == nullptr) {
    if (dup >= 0) {
      ::close(dup);
    }
    return sys_error("reading the upper layer's " + (rel.empty() ? "top directory" : rel));
  }
  std::vector<std::string> names;
  while (dirent* de = ::readdir(d)) {
    std::string_view n = de->d_name;
    if (n != "." && n != "..") {
      names.emplace_back(n);
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const std::string path = rel.empty() ? n : rel + "/" + n;
    struct stat st {};
    if (::fstatat(dir, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return sys_error("stat of the upper layer's " + path);
    }
    std::string target;
    auto kind = fusefs::classify_upper(f, dir, n, st, &target);
    if (kind == fusefs::UpperEntry::Whiteout) {
      out->push_back(rel.empty() ? target : rel + "/" + target);
    } else if (kind == fusefs::UpperEntry::User && S_ISDIR(st.st_mode)) {
      UniqueFd sub(fusefs::open_beneath(dir, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (!sub) {
        return sys_error("opening the upper layer's " + path);
      }
      if (fusefs::is_opaque_dir(f, sub.get())) {
        out->push_back(path + "/");
      }
      TRY(collect_deletions(f, sub.get(), path, depth + 1, out));
    }
  }
  return {};
}

// Seconds since the epoch at which process `pid` started, or -1.
int64_t process_start(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) {
    return -1;
  }
  // Fields after the command name (which may hold spaces and parentheses): state is field 3,
  // starttime field 22.
  size_t close = line.rfind(')');
  if (close == std::string::npos) {
    return -1;
  }
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  unsigned long long ticks = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) {
      ticks = std::strtoull(field.c_str(), nullptr, 10);
    }
  }
  std::ifstream boot("/proc/stat");
  long long btime = -1;
  while (std::getline(boot, line)) {
    if (line.rfind("btime ", 0) == 0) {
      btime = std::atoll(line.c_str() + 6);
    }
  }
  long hz = ::sysconf(_SC_CLK_TCK);
  return btime < 0 || hz <= 0
             ? -1
             : btime + static_cast<int64_t>(ticks / static_cast<unsigned long long>(hz));
}

// Whether an overlayfs session's program still runs: the overlay has no daemon to ask, so the
// session's init (session.start's init_pid) must be alive, be cordon, and have started with the
// session (a reused pid would not). A session with a summary has ended.
bool overlay_session_running(int dir_fd, const std::string& id) {
  if (::faccessat(dir_fd, "summary.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
    return false;
  }
  auto fd = store::open_file(dir_fd, "events.jsonl");
  if (!fd.ok()) {
    return false;
  }
  std::string head = store::read_head(fd->get(), 1 << 16);
  auto ev = store::parse_event(head.substr(0, head.find('\n')));
  if (ev.is_discarded() || !ev.is_object() || ev.value("kind", "") != "session.start" ||
      !ev.contains("init_pid") || !ev["init_pid"].is_number_integer()) {
    return false;
  }
  auto pid = ev["init_pid"].get<int64_t>();
  if (pid <= 0 || pid > 1 << 22 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM)) {
    return false;
  }
  char exe[4096];
  ssize_t n = ::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof exe - 1);
  std::string path = n > 0 ? std::string(exe, static_cast<size_t>(n)) : "";
  bool is_cordon = path.size() >= 7 && path.compare(path.size() - 7, 7, "/cordon") == 0;
  int64_t started = process_start(static_cast<pid_t>(pid));
  int64_t session = store::session_id_time(id);
  return (is_cordon || n <= 0) && started >= 0 && session >= 0 && started + 1 >= session;
}

}  // namespace

Result<CowSession> open_cow_session(const std::string& id_text, bool* refused) {
  *refused = false;
  // The layer walks hold a directory fd per level of the tree the sandbox made: allow as many
  // as the hard limit does, so a deep tree meets the walks' own depth bound, not EMFILE.
  struct rlimit nofile {};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  const std::string root = sessions_root();
  ASSIGN_OR_RETURN(std::string id, resolve_session(root, id_text));
  ASSIGN_OR_RETURN(UniqueFd root_fd, store::open_root(root));
  ASSIGN_OR_RETURN(UniqueFd dir_fd, store::open_session_dir(root_fd.get(), id));
  SessionPaths p = session_paths(root, id);
  auto rec = read_cow_record(dir_fd.get());
  if (!rec.ok()) {
    *refused = true;
    return make_error("session " + id + " has no copy-on-write layer (it ran with --mode ro or rw)",
                      "only cow sessions (the default mode) have changes to review");
  }
  auto format = fusefs::parse_layer_format(rec->backend);
  if (!format.ok()) {
    *refused = true;
    return std::move(format).error().with_context("session " + id);
  }
  CowSession s;
  s.id = id;
  s.dir = p.dir;
  s.upper = p.upper;
  s.snapshots = p.snapshots;
  s.control = p.control;
  s.workspace = rec->workspace;
  s.format = *format;
  if (::faccessat(dir_fd.get(), kImportedMarker, F_OK, AT_SYMLINK_NOFOLLOW) != 0) {
    s.workspace_id = rec->workspace_id;
  }
  struct stat st {};
  if (::fstatat(dir_fd.get(), kImportedMarker, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    read_import_marker(dir_fd.get(), &s);
  }
  if (s.workspace.empty()) {
    ASSIGN_OR_RETURN(s.empty_lower, EmptyDir::make());
    s.lower = s.empty_lower->path();
  } else {
    s.lower = s.workspace;
  }
  if (::fstatat(dir_fd.get(), "cow.json", &st, AT_SYMLINK_NOFOLLOW) == 0) {
    s.since = st.st_mtim;  // written once, before the program started
  }
  if (s.format == fusefs::LayerFormat::CordonFs) {
    s.live_control = connect_control(p.control).ok();
    s.running = s.live_control;
    if (!s.running) {
      detach_stale_cow_mount(p.dir);  // its daemon was SIGKILLed with cordon: clean up after it
    }
  } else {
    s.running = overlay_session_running(dir_fd.get(), id);
  }
  return s;
}

Result<std::vector<std::string>> layer_deletions(const CowSession& s) {
  UniqueFd upper(::open(s.upper.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!upper) {
    return sys_error("opening the upper layer " + s.upper);
  }
  std::vector<std::string> out;
  if (fusefs::is_opaque_dir(s.format, upper.get())) {
    out.push_back("./");
  }
  TRY(collect_deletions(s.format, upper.get(), "", 0, &out));
  return out;
}

std::string no_workspace_message(const CowSession& s) {
  return "session " + s.id + " was imported without a workspace (it ran on " +
         (s.origin.empty() ? std::string("an unknown directory") : s.origin) +
         ", a path of the machine that recorded it); cordon writes only to a directory you name: "
         "import the archive again with `cordon import FILE --as NEW-ID --workspace DIR`";
}

policy::FilesystemPolicy review_policy(const CowSession& s, std::string* note) {
  try {
    policy::FilesystemPolicy f = policy::load_policy_file(s.dir + "/policy.json").filesystem;
    if (s.imported) {
      // An archive's policy.json is its author's: it may add protected paths, never lift the
      // defaults a commit into the importer's directory holds back.
      for (auto& p : policy::default_protected()) {
        f.protect.push_back(std::move(p));
      }
    }
    return f;
  } catch (const std::exception& e) {
    *note = std::string("the session's policy.json is unreadable (") + e.what() +
            "); the default protected paths apply";
    policy::FilesystemPolicy f;
    f.protect = policy::default_protected();
    return f;
  }
}

Result<UniqueFd> open_session_workspace(const CowSession& s) {
  if (s.workspace.empty()) {
    // Imported, bound to no workspace: the empty directory it is compared with.
    return fusefs::open_dir_nofollow(s.lower);
  }
  return fusefs::open_workspace(s.workspace, s.workspace_id);
}

Result<UniqueFd> connect_control(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return make_error("control socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return sys_error("socket(AF_UNIX)");
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return sys_error("connect(\"" + path + "\")");
  }
  return fd;
}

std::string shown(const std::string& s) { return text::escaped(s, {.escape_backslash = true}); }

int say_failed(const std::string& cmd, const Error& e) {
  return fail_in(cmd, shown(e.to_string()));
}

int say_refused(const std::string& cmd, const std::string& msg) {
  say_in(cmd, shown(msg));
  return kReviewRefused;
}

}  // namespace cordon::launcher
