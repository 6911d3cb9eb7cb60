// Spawning, stopping and cleaning up after cordon-fs for a cow session (see cowfs_sidecar.h).
#include "launcher/sidecars/cowfs_sidecar.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "fusefs/workflow.h"
#include "launcher/companion.h"
#include "launcher/plan.h"
#include "launcher/session/session.h"
#include "launcher/session/session_store.h"
#include "record/chain_head.h"

namespace cordon::launcher {
namespace {

// cordon-fs must be mounted and answering within this; it normally takes a few milliseconds.
constexpr int kReadyTimeoutMs = 10000;
// After SIGTERM the daemon unmounts and exits; past this it is killed.
constexpr int kStopGraceMs = 3000;

std::string dir_of(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

bool executable(const std::string& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; }

bool in_path(const char* prog) {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && executable(dir + "/" + prog)) {
      return true;
    }
    if (end == std::string::npos) {
      break;
    }
    start = end + 1;
  }
  return false;
}

std::string read_tail(const std::string& path, size_t max) {
  std::ifstream f(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() > max) {
    s = "..." + s.substr(s.size() - max);
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
    s.pop_back();
  }
  return s;
}

std::string wait_status_text(int st) {
  if (WIFEXITED(st)) {
    return "exit " + std::to_string(WEXITSTATUS(st));
  }
  return "signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
}

// Where a daemon keeps its mount, log and pid: the cow view's at <session>/mnt, cordon-fs.log
// and cordon-fs.pid; view N's at <session>/views/N, N.log and N.pid.
struct DaemonFiles {
  std::string mountpoint, log, pidfile;
};
DaemonFiles daemon_files(const std::string& session_dir, int view_index) {
  if (view_index < 0) {
    return {session_dir + "/mnt", session_dir + "/cordon-fs.log", session_dir + "/cordon-fs.pid"};
  }
  std::string base = session_dir + "/views/" + std::to_string(view_index);
  return {base, base + ".log", base + ".pid"};
}

// Whether the daemon recorded in `pidfile` is still running.
bool daemon_alive(const std::string& pidfile) {
  std::ifstream f(pidfile);
  long pid = 0;
  if (!(f >> pid) || pid <= 0) {
    return false;
  }
  // "PID (COMM) STATE ...": a zombie (Z) or dead (X) daemon serves nothing.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) {
    return false;
  }
  size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= line.size()) {
    return false;
  }
  char state = line[close + 2];
  return line.substr(open + 1, close - open - 1) == "cordon-fs" && state != 'Z' && state != 'X';
}

void detach(const std::string& mnt) {
  if (::umount2(mnt.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0 || errno != EPERM) {
    return;
  }
  // Not root: the mount was made through fusermount3, which also takes it down.
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execlp("fusermount3", "fusermount3", "-u", "-z", "--", mnt.c_str(), nullptr);
    ::_exit(127);
  }
  if (pid > 0) {
    int st;
    ::waitpid(pid, &st, 0);
  }
}

}  // namespace

std::string find_cowfs_binary() {
  if (const char* env = std::getenv("CORDON_FS_BIN"); env != nullptr && *env != '\0') {
    return env;  // tests and packagers; taken as given, so a bad one fails loudly at spawn
  }
  return find_companion("cordon-fs", "fusefs", std::string(CORDON_LIBEXECDIR) + "/cordon-fs", X_OK)
      .value_or("");
}

std::string cowfs_unavailable_reason() {
  const char* forced = std::getenv("CORDON_COW_BACKEND");
  if (forced != nullptr && std::strcmp(forced, "overlay") == 0) {
    return "CORDON_COW_BACKEND=overlay";
  }
  return cordon_fs_unavailable_reason();
}

namespace {

// Root of a user namespace that does not own the mount namespace it runs in (`unshare -U`
// without -m, some container set-ups) may not mount anything there, FUSE included, and the
// host's setuid fusermount3 has no privilege inside a user namespace either.
bool root_without_mount_namespace() {
  if (::geteuid() != 0) {
    return false;
  }
  UniqueFd mnt(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  UniqueFd owner(mnt ? ::ioctl(mnt.get(), NS_GET_USERNS) : -1);
  if (!owner && errno == EPERM) {
    return true;  // the owner is an ancestor of our user namespace, out of our reach
  }
  struct stat own {
  }, mine{};
  if (!owner || ::fstat(owner.get(), &own) != 0 || ::stat("/proc/self/ns/user", &mine) != 0) {
    return false;  // no nsfs ioctls: an old kernel, where the mount itself will say why
  }
  return own.st_ino != mine.st_ino || own.st_dev != mine.st_dev;
}

}  // namespace

std::string cordon_fs_unavailable_reason() {
  if (find_cowfs_binary().empty()) {
    return "cordon-fs was not found beside cordon nor in " CORDON_LIBEXECDIR;
  }
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    return "/dev/fuse is not readable and writable by uid " + std::to_string(::geteuid()) + " (" +
           std::strerror(errno) + "; as root: chmod 0666 /dev/fuse, the distribution default)";
  }
  if (root_without_mount_namespace()) {
    return "uid 0 of a user namespace that does not own this mount namespace may not mount FUSE "
           "(unshare -m as well, or give the container its own mount namespace)";
  }
  if (::geteuid() != 0 && !in_path("fusermount3")) {
    return "fusermount3 is not in PATH (apt-get install fuse3)";
  }
  // An ordinary user mounts through the setuid fusermount3, which no_new_privs disarms (a
  // container's allowPrivilegeEscalation: false sets it): its mount would fail with EPERM.
  if (::geteuid() != 0 && ::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1) {
    return "no_new_privs is set (a container's allowPrivilegeEscalation: false, or setpriv "
           "--no-new-privs), so the setuid fusermount3 cannot mount FUSE for uid " +
           std::to_string(::geteuid());
  }
  // Without CAP_SYS_ADMIN in the bounding set (a container's capabilities: drop: [ALL], podman
  // --cap-drop=ALL) the setuid fusermount3 runs as uid 0 with no capability, and its mount fails
  // with EPERM just the same.
  if (::geteuid() != 0 && ::prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0) {
    return "CAP_SYS_ADMIN is not in the capability bounding set (a container's capabilities: "
           "drop: [ALL], podman --cap-drop=ALL), so the setuid fusermount3 cannot mount FUSE for "
           "uid " +
           std::to_string(::geteuid()) +
           "; in a container with its own user namespace add it there: podman --cap-add "
           "SYS_ADMIN, Kubernetes capabilities.add: [SYS_ADMIN] with hostUsers: false and "
           "allowPrivilegeEscalation: true";
  }
  return "";
}

CowFsProcess& CowFsProcess::operator=(CowFsProcess&& o) noexcept {
  if (this != &o) {
    stop();
    child_ = std::move(o.child_);
    ready_ = std::move(o.ready_);
    mountpoint_ = std::move(o.mountpoint_);
    binary_ = std::move(o.binary_);
    log_ = std::move(o.log_);
    exit_ = std::move(o.exit_);
    early_ = std::move(o.early_);
    o.exit_.reset();
    o.early_.reset();
  }
  return *this;
}

void CowFsProcess::begin_stop() {
  if (exit_ || early_ || child_.pid() <= 0) {
    return;
  }
  CowFsExit e;
  // Already gone before we asked: the view failed while the session ran (ENOTCONN inside).
  if (auto st = child_.exited()) {
    e.died_early = true;
    e.how = wait_status_text(*st);
  } else {
    child_.signal(SIGTERM);
  }
  early_ = e;
}

CowFsExit CowFsProcess::stop() {
  if (exit_ || child_.pid() <= 0) {
    return exit_.value_or(CowFsExit{});
  }
  begin_stop();
  CowFsExit e = *early_;
  if (!e.died_early) {
    // SIGTERM went out in begin_stop(): what is left is the wait, then SIGKILL.
    if (!child_.wait_for(std::chrono::milliseconds(kStopGraceMs))) {
      child_.signal(SIGKILL);
    }
    if (int st = child_.stop(std::chrono::milliseconds(kStopGraceMs)); st != -1) {
      e.how = wait_status_text(st);
    }
  }
  // cordon-fs detaches its mount on SIGTERM; after a SIGKILL (ours or anyone's) it is still there.
  detach(mountpoint_);
  ::rmdir(mountpoint_.c_str());
  ::unlink(pidfile_.c_str());
  ::unlink((dir_of(mountpoint_) + "/control.sock").c_str());  // left behind by a SIGKILL
  exit_ = e;
  return e;
}

Result<CowFsProcess> spawn_cowfs(const CowFsSpawn& s) {
  const DaemonFiles files = daemon_files(s.session_dir, s.view_index);
  const std::string& mnt = files.mountpoint;
  const std::string& log = files.log;
  const std::string& pidfile = files.pidfile;
  if (s.view_index >= 0 && ::mkdir(dir_of(mnt).c_str(), 0700) != 0 && errno != EEXIST) {
    return sys_error("mkdir(\"" + dir_of(mnt) + "\") for cordon-fs views");
  }
  if (::mkdir(mnt.c_str(), 0700) != 0 && errno != EEXIST) {
    return sys_error("mkdir(\"" + mnt + "\") for the cordon-fs mount");
  }
  UniqueFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log_fd) {
    return sys_error("open(\"" + log + "\")");
  }
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    return sys_error("pipe2() for cordon-fs --ready-fd");
  }
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);

  // Fixed fd numbers in the daemon: 3 = ready pipe, 4 = events.jsonl, 5 = its head.
  std::vector<std::string> args = {
      s.binary,    "--mountpoint", mnt,          "--policy", s.session_dir + "/policy.json",
      "--session", s.session_id,   "--ready-fd", "3",        "-f"};
  if (s.direct_dir.empty()) {
    args.insert(args.end(),
                {"--lower", s.lower, "--upper", s.session_dir + "/upper", "--control",
                 s.session_dir + "/control.sock", "--snapshots", s.session_dir + "/snapshots",
                 "--agent-ids", std::to_string(s.agent_uid) + ":" + std::to_string(s.agent_gid)});
  } else {
    args.insert(args.end(), {"--direct", "--upper", s.direct_dir});
    if (!s.view_root.empty()) {
      args.insert(args.end(), {"--view-root", s.view_root});
    }
  }
  if (!s.home.empty()) {
    args.insert(args.end(), {"--home", s.home});
  }
  if (s.events_fd >= 0) {
    args.insert(args.end(), {"--events-fd", "4"});
    if (s.events_head_fd >= 0) {
      args.insert(args.end(), {"--events-head-fd", "5"});
    }
  }
  if (s.allow_other) {
    args.push_back("--allow-other");
  }
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  // Sources moved above the target numbers (0-5) first, so no dup2 below clobbers another's
  // source (events.jsonl's fd may well be 3 in cordon).
  auto high = [](int fd) { return UniqueFd(fd < 0 ? -1 : ::fcntl(fd, F_DUPFD_CLOEXEC, 10)); };
  UniqueFd log_hi = high(log_fd.get()), ready_hi = high(ready_w.get()),
           events_hi = high(s.events_fd), head_hi = high(s.events_head_fd);
  if (!log_hi || !ready_hi || (s.events_fd >= 0 && !events_hi) ||
      (s.events_head_fd >= 0 && !head_hi)) {
    return sys_error("fcntl(F_DUPFD_CLOEXEC) for cordon-fs's fds");
  }

  // fork, not posix_spawn: the daemon needs PR_SET_PDEATHSIG. Only async-signal-safe calls below.
  pid_t pid = ::fork();
  if (pid < 0) {
    return sys_error("fork() for cordon-fs");
  }
  if (pid == 0) {
    // If cordon dies, the daemon unmounts the view and exits (its SIGTERM handler).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    if (::getppid() != parent) {
      ::_exit(1);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setsid();  // the terminal's ^C goes to the program, not to the filesystem under it
    int null = ::open("/dev/null", O_RDONLY);
    if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(log_hi.get(), 1) < 0 ||
        ::dup2(log_hi.get(), 2) < 0 || ::dup2(ready_hi.get(), 3) < 0 ||
        (events_hi && ::dup2(events_hi.get(), 4) < 0) ||
        (events_hi && head_hi && ::dup2(head_hi.get(), 5) < 0)) {
      ::_exit(126);
    }
    ::close_range(6, ~0u, 0);
    int pf = ::open(pidfile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (pf >= 0) {
      char num[24];
      int len = 0;
      char rev[24];
      for (pid_t v = ::getpid(); v > 0; v /= 10) {
        rev[len++] = static_cast<char>('0' + v % 10);
      }
      for (int i = 0; i < len; ++i) {
        num[i] = rev[len - 1 - i];
      }
      num[len++] = '\n';
      (void)!::write(pf, num, static_cast<size_t>(len));
      ::close(pf);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }

  CowFsProcess proc;
  proc.child_ = ChildProcess(pid);
  proc.mountpoint_ = mnt;
  if (proc.child_.pidfd() < 0) {
    // wait_ready() polls the pidfd: without one a daemon that dies would go unseen.
    Error e = sys_error("pidfd_open(cordon-fs pid " + std::to_string(pid) + ")");
    proc.child_.stop(std::chrono::milliseconds(0));
    proc.child_ = ChildProcess();  // nothing left for the destructor to unmount
    return e;
  }
  ready_w.reset();
  proc.ready_ = std::move(ready_r);
  proc.binary_ = s.binary;
  proc.log_ = log;
  proc.pidfile_ = pidfile;
  return proc;
}

Status CowFsProcess::wait_ready() {
  if (!ready_) {
    return {};
  }
  pollfd p[2] = {{ready_.get(), POLLIN, 0}, {child_.pidfd(), POLLIN, 0}};
  int n;
  do {
    n = ::poll(p, 2, kReadyTimeoutMs);
  } while (n < 0 && errno == EINTR);
  char byte = 0;
  if (n > 0 && (p[0].revents & POLLIN) != 0 && ::read(ready_.get(), &byte, 1) == 1) {
    ready_.reset();
    return {};
  }
  ready_.reset();
  CowFsExit how = stop();
  exit_->died_early = false;  // reported as this error, not as a failure during the session
  std::string why =
      n == 0 ? "did not become ready within " + std::to_string(kReadyTimeoutMs / 1000) + " s"
             : "exited before mounting (" + how.how + ")";
  std::string tail = read_tail(log_, 600);
  return make_error("cordon-fs (" + binary_ + ") " + why + (tail.empty() ? "" : ": " + tail),
                    "the workspace is never shown without it; run with --mode ro or --mode rw, "
                    "or set CORDON_COW_BACKEND=overlay for the kernel overlayfs copy-on-write");
}

Status write_cow_record(const std::string& session_dir, const CowRecord& r) {
  nlohmann::json j = {{"workspace", r.workspace}, {"backend", r.backend}};
  if (r.workspace_id) {
    j["workspace_dev"] = r.workspace_id->dev;
    j["workspace_ino"] = r.workspace_id->ino;
  }
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::string path = session_dir + "/cow.json";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) {
    return sys_error("open(\"" + path + "\", O_CREAT|O_EXCL)");
  }
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return sys_error("write(\"" + path + "\")");
  }
  return {};
}

Result<CowRecord> read_cow_record(int session_dir_fd) {
  auto text = store::read_file(session_dir_fd, "cow.json", 1 << 16);
  if (!text.ok()) {
    return std::move(text).error();
  }
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("workspace") ||
      !j["workspace"].is_string() || !j.contains("backend") || !j["backend"].is_string()) {
    return make_error("cow.json is not a cow record");
  }
  CowRecord r{j["workspace"].get<std::string>(), j["backend"].get<std::string>(), std::nullopt};
  if (j.contains("workspace_dev") || j.contains("workspace_ino")) {
    if (!j["workspace_dev"].is_number_unsigned() || !j["workspace_ino"].is_number_unsigned()) {
      return make_error("cow.json's workspace_dev/workspace_ino are not numbers");
    }
    r.workspace_id = fusefs::WorkspaceIdentity{j["workspace_dev"].get<uint64_t>(),
                                               j["workspace_ino"].get<uint64_t>()};
  }
  return r;
}

Result<CowFsProcess> start_cow_backend(const Session& session, LaunchPlan& plan) {
  if (plan.mode != policy::WorkspaceMode::Cow) {
    return CowFsProcess();
  }
  const SessionPaths& p = session.paths();
  // The directory the program will work on, as the review commands must find it again.
  ASSIGN_OR_RETURN(UniqueFd ws, fusefs::open_dir_nofollow(plan.workspace));
  ASSIGN_OR_RETURN(fusefs::WorkspaceIdentity id, fusefs::identity_of(ws.get()));
  TRY(write_cow_record(p.dir, {plan.workspace, plan.cow_fuse ? "cordon-fs" : "overlay", id}));
  if (!plan.cow_fuse) {
    return CowFsProcess();
  }
  detach_stale_cow_mounts(sessions_root());
  UniqueFd events(::open(p.events.c_str(), O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
  if (!events) {
    return sys_error("open(\"" + p.events + "\", O_APPEND) for cordon-fs");
  }
  ASSIGN_OR_RETURN(UniqueFd head,
                   record::open_head_file(AT_FDCWD, p.events + std::string(record::kHeadSuffix)));
  CowFsSpawn s;
  s.binary = find_cowfs_binary();
  s.lower = plan.workspace;
  s.session_dir = p.dir;
  s.session_id = session.id();
  s.events_fd = events.get();
  s.events_head_fd = head.get();
  // The daemon runs as us; a sandbox of another uid reaches the view only with allow_other
  // (root may set it; the session directory's 0700 keeps everyone else out on the host).
  s.allow_other = plan.ids.uid != ::geteuid();
  s.agent_uid = plan.ids.uid;
  s.agent_gid = plan.ids.gid;
  s.home = plan.home;
  ASSIGN_OR_RETURN(CowFsProcess proc, spawn_cowfs(s));
  plan.cow_mount = proc.mountpoint();
  return proc;
}

std::optional<uint64_t> count_cowfs_changes(const std::string& lower, const std::string& upper) {
  auto changes = fusefs::diff_layers(lower, upper);
  if (!changes.ok()) {
    return std::nullopt;
  }
  return changes->size();
}

namespace {

// One daemon's mount, when the daemon is gone.
bool detach_stale(const std::string& session_dir, const DaemonFiles& files) {
  const std::string& mnt = files.mountpoint;
  // The daemon's liveness first: a stat of a live but stopped daemon's mount would hang.
  if (daemon_alive(files.pidfile)) {
    return false;
  }
  struct stat st {
  }, parent{};
  if (::lstat(session_dir.c_str(), &parent) != 0) {
    return false;
  }
  // A mount whose daemon died answers ENOTCONN (over FUSE's io_uring transport ECONNABORTED or
  // ECANCELED while the kernel still tears the rings down); one unmounted already is a plain
  // directory.
  bool dead = ::lstat(mnt.c_str(), &st) != 0
                  ? errno == ENOTCONN || errno == ECONNABORTED || errno == ECANCELED
                  : st.st_dev != parent.st_dev;
  if (!dead) {
    return false;
  }
  detach(mnt);
  ::rmdir(mnt.c_str());
  return true;
}

}  // namespace

bool cowfs_daemon_alive(const std::string& session_dir) {
  return daemon_alive(daemon_files(session_dir, -1).pidfile);
}

bool detach_stale_cow_mount(const std::string& session_dir) {
  bool any = detach_stale(session_dir, daemon_files(session_dir, -1));
  // Views are numbered from 0 without gaps; one past the last has no pid file.
  for (int i = 0;; ++i) {
    DaemonFiles v = daemon_files(session_dir, i);
    struct stat st {};
    if (::lstat(v.pidfile.c_str(), &st) != 0 && ::lstat(v.mountpoint.c_str(), &st) != 0) {
      break;
    }
    any = detach_stale(session_dir, v) || any;
  }
  return any;
}

void detach_stale_cow_mounts(const std::string& sessions_root) {
  char real[4096];
  if (::realpath(sessions_root.c_str(), real) == nullptr) {
    return;
  }
  const std::string prefix = std::string(real) + "/";
  std::ifstream mi("/proc/self/mountinfo");
  std::string line;
  std::vector<std::string> stale;
  while (std::getline(mi, line)) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPEROPTS"
    if (line.find(" - fuse.cordon ") == std::string::npos) {
      continue;
    }
    size_t a = 0;
    for (int field = 0; field < 4 && a != std::string::npos; ++field) {
      a = line.find(' ', a + 1);
    }
    if (a == std::string::npos) {
      continue;
    }
    size_t b = line.find(' ', a + 1);
    std::string mp = line.substr(a + 1, b - a - 1);  // octal escapes: such paths are skipped
    if (mp.rfind(prefix, 0) != 0) {
      continue;
    }
    if (mp.size() > 4 && mp.compare(mp.size() - 4, 4, "/mnt") == 0) {
      stale.push_back(mp.substr(0, mp.size() - 4));
    } else if (size_t v = mp.rfind("/views/"); v != std::string::npos && v > prefix.size()) {
      stale.push_back(mp.substr(0, v));
    }
  }
  for (const auto& dir : stale) {
    detach_stale_cow_mount(dir);
  }
}

}  // namespace cordon::launcher
