// A real cordon-fs mount for tests: lower/upper/mnt in a fresh dir on tmpfs, the daemon started
// from the build tree, unmounted and reaped at scope exit.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace cordon::fusefs::testing {

// Deterministic pseudo-random bytes for content checks (n bytes; a seed per file).
inline std::string pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

// Cold caches: sync, then drop the page cache, dentries and inodes (root only).
inline void drop_caches() {
  ::sync();
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "3", 1), 1);
  ::close(fd);
}

// Heavy file workloads belong on tmpfs, never the root ext4 (see COMMON.md); CI may set its own.
inline const bool kScratchOnTmpfs = (::setenv("CORDON_TEST_TMP", "/dev/shm", 0), true);

// A test that cannot mount says why: CORDON_REQUIRE(fuse_available(), kFuseWhy).
inline constexpr const char* kFuseWhy =
    "FUSE: /dev/fuse read-write for this uid (chmod 0666 /dev/fuse) and fusermount3";

inline bool fuse_available() {
  struct stat st;
  if (::stat("/dev/fuse", &st) != 0) {
    return false;
  }
  // Non-root mounts go through fusermount3, which opens /dev/fuse with the caller's permissions.
  return ::geteuid() == 0 ||
         (::access("/dev/fuse", R_OK | W_OK) == 0 && ::access("/usr/bin/fusermount3", X_OK) == 0);
}

inline void write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A listing of a tree: "path type mode size content-hash" lines, sorted, never following symlinks;
// optionally with each entry's mtime and its uid:gid.
inline std::string tree_manifest(const std::string& root, bool with_mtime = false,
                                 bool with_owner = false) {
  std::vector<std::string> lines;
  namespace fs = std::filesystem;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::none, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) {
      lines.push_back("ERROR " + ec.message());
      break;
    }
    std::string p = it->path().string().substr(root.size());
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0) {
      lines.push_back(p + " lstat-failed");
      continue;
    }
    std::ostringstream l;
    l << p << " " << std::oct << st.st_mode << std::dec;
    if (S_ISREG(st.st_mode)) {
      std::string data = read_file(it->path().string());
      l << " " << data.size() << " " << std::hash<std::string>()(data);
    } else if (S_ISLNK(st.st_mode)) {
      l << " -> " << fs::read_symlink(it->path(), ec).string();
    }
    if (with_mtime) {
      l << " " << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec;
    }
    if (with_owner) {
      l << " " << st.st_uid << ":" << st.st_gid;
    }
    lines.push_back(l.str());
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (auto& l : lines) {
    out += l + "\n";
  }
  return out;
}

// Starts cordon-fs with `argv` (its --ready-fd is 3, its output goes to `log`), as `uid`:`gid`
// when given, and waits until it has mounted. Returns its pid (-1 when none started), with
// *error saying why when it did not become ready.
inline pid_t start_cordon_fs(const std::vector<std::string>& argv, const std::string& log,
                             std::string* error, std::optional<uid_t> uid = std::nullopt,
                             std::optional<gid_t> gid = std::nullopt) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    *error = "pipe2 failed";
    return -1;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(ready[1], 3);  // dup2 clears O_CLOEXEC on the copy
    int logfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(logfd, 1);
    ::dup2(logfd, 2);
    if (uid && (::setgroups(0, nullptr) != 0 || ::setresgid(*gid, *gid, *gid) != 0 ||
                ::setresuid(*uid, *uid, *uid) != 0)) {
      ::_exit(126);
    }
    std::vector<char*> a;
    for (auto& s : argv) {
      a.push_back(const_cast<char*>(s.c_str()));
    }
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  ::close(ready[1]);
  pollfd p = {ready[0], POLLIN, 0};
  char c = 0;
  bool ok = ::poll(&p, 1, 20000) == 1 && ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  if (!ok) {
    *error = "cordon-fs did not become ready: " + read_file(log);
    return pid;  // still to be stopped by the caller
  }
  return pid;
}

class MountedFs {
 public:
  // `policy_json`: written to a file and passed as --policy ("" = the embedded default policy).
  explicit MountedFs(const std::string& policy_json = "", bool make_dirs = true)
      : lower_(dir_ / "lower"),
        upper_(dir_ / "upper"),
        mnt_(dir_ / "mnt"),
        events_(dir_ / "events.jsonl"),
        control_(dir_ / "control.sock"),
        policy_(policy_json.empty() ? "" : dir_ / "policy.json") {
    if (make_dirs) {
      ::mkdir(lower_.c_str(), 0755);
    }
    ::mkdir(mnt_.c_str(), 0755);
    if (!policy_.empty()) {
      write_file(policy_, policy_json);
    }
  }
  ~MountedFs() { stop(); }

  // The daemon runs as this unprivileged user (a rootless cordon-fs; start() as root): the
  // fixture's directories become theirs, except a lower made before this call.
  void run_daemon_as(uid_t uid, gid_t gid) {
    daemon_uid_ = uid;
    daemon_gid_ = gid;
    for (const std::string& p : {dir_.path(), mnt_}) {
      (void)!::chown(p.c_str(), uid, gid);
    }
  }
  // A lower layer elsewhere (an existing directory the test did not make).
  void use_lower(const std::string& path) { lower_ = path; }

  // Starts the daemon and waits until it is mounted. Returns "" or a description of the failure.
  std::string start(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {cordon::testing::build_path("fusefs/cordon-fs"),
                                     "--lower",
                                     lower_,
                                     "--upper",
                                     upper_,
                                     "--mountpoint",
                                     mnt_,
                                     "--events",
                                     events_,
                                     "--control",
                                     control_,
                                     "--session",
                                     "test",
                                     "--ready-fd",
                                     "3",
                                     "-f"};
    if (!policy_.empty()) {
      argv.push_back("--policy");
      argv.push_back(policy_);
    }
    for (auto& e : extra) {
      argv.push_back(e);
    }
    std::string error;
    pid_ = start_cordon_fs(argv, dir_ / "daemon.log", &error, daemon_uid_, daemon_gid_);
    if (!error.empty()) {
      stop();
    }
    return error;
  }

  // Unmounts (like the launcher would) and waits for the daemon to exit. Returns its status.
  int stop() {
    if (pid_ <= 0) {
      return -1;
    }
    cordon::testing::run_program({"fusermount3", "-u", "-z", mnt_},
                                 {.deadline = std::chrono::seconds(20)});
    int status = -1;
    for (int i = 0; i < 200; i++) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  // kill -9 of the daemon: leaves the mount dead (ENOTCONN) until unmounted.
  void crash() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    cordon::testing::run_program({"fusermount3", "-u", "-z", mnt_},
                                 {.deadline = std::chrono::seconds(20)});
  }

  // Sends one control request line, returns the reply line.
  std::string control(const std::string& json) {
    auto r = cordon::testing::run_program({"python3", "-c",
                                           "import socket,sys\n"
                                           "s=socket.socket(socket.AF_UNIX)\n"
                                           "s.connect(sys.argv[1])\n"
                                           "s.sendall((sys.argv[2]+'\\n').encode())\n"
                                           "b=b''\n"
                                           "while not b.endswith(b'\\n'):\n"
                                           "  c=s.recv(65536)\n"
                                           "  if not c: break\n"
                                           "  b+=c\n"
                                           "print(b.decode(),end='')\n",
                                           control_, json},
                                          {.deadline = std::chrono::seconds(60)});
    return r.out;
  }

  std::string events() const { return read_file(events_); }
  std::string lower(const std::string& rel = "") const {
    return rel.empty() ? lower_ : lower_ + "/" + rel;
  }
  std::string upper(const std::string& rel = "") const {
    return rel.empty() ? upper_ : upper_ + "/" + rel;
  }
  std::string mnt(const std::string& rel = "") const {
    return rel.empty() ? mnt_ : mnt_ + "/" + rel;
  }
  std::string base(const std::string& rel) const { return dir_ / rel; }
  pid_t pid() const { return pid_; }

 private:
  cordon::testing::TempDir dir_;
  std::string lower_, upper_, mnt_, events_, control_, policy_;
  std::optional<uid_t> daemon_uid_;
  std::optional<gid_t> daemon_gid_;
  pid_t pid_ = -1;
};

}  // namespace cordon::fusefs::testing
