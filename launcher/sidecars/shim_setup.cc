// Wiring libcordon_preload.so into `cordon run`: find the library, bind it and the collector's
// socket into the sandbox, run the collector on a thread between clone and the program's end.
#include "launcher/sidecars/shim_setup.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

#include "launcher/companion.h"
#include "preload_shim/collector/collector.h"

namespace cordon::launcher {
namespace {

constexpr char kLibraryName[] = "libcordon_preload.so";

bool is_regular_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// As root: where the per-session socket directories live (see prepare_shim_from_parent).
constexpr char kRootRuntimeDir[] = "/run/cordon-shim";

}  // namespace

bool shim_enabled() {
  const char* v = std::getenv("CORDON_SHIM");
  return v == nullptr || std::strcmp(v, "off") != 0;
}

Result<std::string> find_preload_library() {
  if (const char* env = std::getenv("CORDON_PRELOAD_LIB"); env != nullptr && *env != '\0') {
    if (!is_regular_file(env)) {
      return make_error(std::string("CORDON_PRELOAD_LIB=") + env + " is not a readable file",
                        "point it at libcordon_preload.so, or unset it");
    }
    return std::string(env);
  }
  std::vector<std::string> tried;
  if (auto p = find_companion(kLibraryName, "preload_shim",
                              std::string(CORDON_LIBEXECDIR) + "/" + kLibraryName, R_OK, &tried)) {
    char real[PATH_MAX];
    return std::string(::realpath(p->c_str(), real) != nullptr ? real : p->c_str());
  }
  std::string list = join_tried(tried);
  return make_error(
      "the preload shim " + std::string(kLibraryName) + " was not found (looked at " + list + ")",
      "build or install it (target cordon_preload), set CORDON_PRELOAD_LIB to its "
      "path, or run with CORDON_SHIM=off to start without process attribution");
}

namespace {

// True when `uid` can reach and read `path` by the permission bits alone: as root, the sandbox's
// id (nobody, the sudo user) needs every directory on the way to the library searchable.
bool reachable_by(const std::string& path, uid_t uid) {
  auto ok = [&](const std::string& p, mode_t other, mode_t owner) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      return false;
    }
    return (st.st_mode & other) != 0 || (st.st_uid == uid && (st.st_mode & owner) != 0);
  };
  for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1)) {
    if (!ok(path.substr(0, i), S_IXOTH, S_IXUSR)) {
      return false;
    }
  }
  return ok(path, S_IROTH, S_IRUSR);
}

Status copy_file(const std::string& from, const std::string& to) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) {
    return sys_error("open(\"" + from + "\")");
  }
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!out) {
    return sys_error("open(\"" + to + "\", O_CREAT|O_EXCL)");
  }
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(in.get(), buf, sizeof buf);
    if (n < 0) {
      return sys_error("read(\"" + from + "\")");
    }
    if (n == 0) {
      return {};
    }
    if (::write(out.get(), buf, static_cast<size_t>(n)) != n) {
      return sys_error("write(\"" + to + "\")");
    }
  }
}

}  // namespace

Result<ShimSession> ShimSession::prepare(const std::string& runtime_dir, bool own_dir,
                                         const std::string& events_path,
                                         const std::string& session_id,
                                         const record::RecordLimits& limits,
                                         const std::string& library, const IdPlan& ids) {
  ShimSession s;
  if (own_dir) {
    if (::mkdir(runtime_dir.c_str(), 0711) != 0) {
      return sys_error("mkdir(\"" + runtime_dir + "\", 0711) for the shim collector's socket");
    }
    s.runtime_dir_ = runtime_dir;
  }
  s.socket_path_ = runtime_dir + "/shim.sock";
  ASSIGN_OR_RETURN(auto log, record::EventLog::open(events_path, session_id, "shim", limits));
  ASSIGN_OR_RETURN(s.collector_, preload_shim::Collector::listen(s.socket_path_, std::move(log)));
  // Only the sandbox's id may connect (as root that is not root: chown first).
  if (!ids.rootless && ::chown(s.socket_path_.c_str(), ids.uid, ids.gid) != 0) {
    return sys_error("chown(\"" + s.socket_path_ + "\", " + std::to_string(ids.uid) + ")");
  }
  if (::chmod(s.socket_path_.c_str(), 0600) != 0) {
    return sys_error("chmod(\"" + s.socket_path_ + "\", 0600)");
  }
  s.library_path_ = library;
  if (!ids.rootless && !reachable_by(library, ids.uid)) {
    // The sandbox's id could not open it through the bind's source path: bind a copy instead.
    std::string copy = runtime_dir + "/libcordon_preload.so";
    TRY(copy_file(library, copy));
    s.library_copy_ = copy;
    s.library_path_ = copy;
  }
  s.stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s.stop_fd_) {
    return sys_error("eventfd() for the shim collector");
  }
  return s;
}

ShimSession::ShimSession(ShimSession&&) noexcept = default;

ShimSession& ShimSession::operator=(ShimSession&& o) noexcept {
  if (this != &o) {
    stop();
    remove_runtime_files();
    collector_ = std::move(o.collector_);
    stop_fd_ = std::move(o.stop_fd_);
    socket_path_ = std::move(o.socket_path_);
    library_path_ = std::move(o.library_path_);
    runtime_dir_ = std::exchange(o.runtime_dir_, {});
    library_copy_ = std::exchange(o.library_copy_, {});
    thread_ = std::move(o.thread_);
  }
  return *this;
}

ShimSession::~ShimSession() {
  stop();
  remove_runtime_files();
}

void ShimSession::remove_runtime_files() {
  collector_.reset();  // unlinks the socket
  if (!library_copy_.empty()) {
    ::unlink(library_copy_.c_str());
    library_copy_.clear();
  }
  if (!runtime_dir_.empty()) {
    ::rmdir(runtime_dir_.c_str());
    runtime_dir_.clear();
  }
}

Status ShimSession::add_to_plan(LaunchPlan& plan) const {
  bool found = false;
  for (auto& f : plan.etc_files) {
    if (f.path == "ld.so.preload") {
      f.content = std::string(kShimLibraryInSandbox) + "\n";
      found = true;
    }
  }
  if (!found) {
    plan.etc_files.push_back({"ld.so.preload", std::string(kShimLibraryInSandbox) + "\n", 0644});
  }
  // Last in the mount list: /run/cordon lives in the sandbox's root tmpfs, which becomes read-only
  // only after every mount is in place.
  plan.mounts.push_back({MountKind::BindRo, library_path_, kShimLibraryInSandbox});
  plan.mounts.push_back({MountKind::BindRo, socket_path_, kShimSocketInSandbox});
  return {};
}

Status ShimSession::start() {
  if (thread_.joinable()) {
    return {};
  }
  preload_shim::Collector* c = collector_.get();
  int stop = stop_fd_.get();
  try {
    thread_ = std::thread([c, stop] {
      // Exception firewall: run() reports failures as a Status; nothing may leave a thread.
      try {
        (void)c->run(stop);
      } catch (...) {
      }
    });
  } catch (const std::system_error& e) {
    return make_error(std::string("starting the shim collector thread: ") + e.what());
  }
  return {};
}

void ShimSession::stop() {
  if (!thread_.joinable()) {
    return;
  }
  uint64_t one = 1;
  if (::write(stop_fd_.get(), &one, sizeof one) != sizeof one) {
    // An eventfd write only fails at a counter overflow, which one write cannot cause.
  }
  thread_.join();
}

Result<std::unique_ptr<ShimSession>> prepare_shim_from_parent(const std::string& session_dir,
                                                              const std::string& events_path,
                                                              const std::string& session_id,
                                                              const record::RecordLimits& limits,
                                                              const IdPlan& ids) {
  if (!shim_enabled()) {
    return std::unique_ptr<ShimSession>();
  }
  ASSIGN_OR_RETURN(std::string library, find_preload_library());
  // The bind sources are looked up by the sandbox's id (the child switches ids before it composes
  // the root). Rootless that id is the invoking user, who owns the session directory. As root it
  // is not, and the session directory is root's 0700: the socket goes to a 0711 directory of its
  // own under /run.
  std::string dir = session_dir;
  bool own = false;
  if (!ids.rootless) {
    struct stat st {};
    if (::lstat(kRootRuntimeDir, &st) != 0) {
      if (::mkdir(kRootRuntimeDir, 0711) != 0 && errno != EEXIST) {
        return sys_error(std::string("mkdir(\"") + kRootRuntimeDir + "\", 0711)");
      }
    } else if (!S_ISDIR(st.st_mode) || st.st_uid != 0) {
      return make_error(std::string(kRootRuntimeDir) + " is not a directory owned by root",
                        "remove it; cordon recreates it");
    }
    dir = std::string(kRootRuntimeDir) + "/" + session_id;
    own = true;
  }
  ASSIGN_OR_RETURN(ShimSession s,
                   ShimSession::prepare(dir, own, events_path, session_id, limits, library, ids));
  return std::make_unique<ShimSession>(std::move(s));
}

void ShimSession::set_decoys(std::vector<preload_shim::Collector::DecoyId> decoys) {
  if (collector_) {
    collector_->set_decoys(std::move(decoys));
  }
}

uint64_t ShimSession::events_written() const {
  return collector_ ? collector_->stats().events.load() : 0;
}

}  // namespace cordon::launcher
