// Shared by the launcher's sandbox tests: runs the built `cordon run` with a controlled
// environment (a fake $HOME, a private session store), and knows what to expect for the ids
// depending on whether the suite runs as root or as an ordinary user.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace cordon::testing {

inline std::string cordon_bin() { return build_path("launcher/cordon"); }

// cordon-fs can mount for this user (root, or read-write /dev/fuse and fusermount3): the
// read-write workspace and write grants with rules inside are served through cordon-fs views,
// which cordon refuses to do without (it never holds those rules for existing files only).
inline bool fs_views_here() {
  return ::geteuid() == 0 ||
         (::access("/dev/fuse", R_OK | W_OK) == 0 && ::access("/usr/bin/fusermount3", X_OK) == 0);
}

// The mode of a writable workspace this user can have with the default rules: rw where views
// run, else cow (on kernel overlayfs), where what the program writes stays in the session.
inline const char* writable_mode() { return fs_views_here() ? "rw" : "cow"; }

inline void write_text(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream(path) << content;
  ::chmod(path.c_str(), mode);
}

// The lines of `text`, without their newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    out.push_back(l);
  }
  return out;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// One sandbox run's surroundings: a workspace, a fake home and a session store, all temporary.
class SandboxFixture {
 public:
  SandboxFixture() {
    // TempDir makes 0755 dirs owned by the test's uid. As root, cordon maps the workspace owner
    // (root) to nobody, who could not write into it; rw tests chown it (see make_workspace_owned).
    env_ = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home_.path(), "LANG=C.UTF-8",
            "CORDON_STATE_DIR=" + state_.path()};
  }

  const std::string& ws() const { return ws_.path(); }
  const std::string& home() const { return home_.path(); }
  std::vector<std::string>& env() { return env_; }

  // As root, hand the workspace to an unprivileged uid so the sandbox (which runs as the
  // workspace owner) can write in it. Returns the uid the program will run as.
  uid_t make_workspace_owned() {
    if (::geteuid() == 0) {
      (void)!::chown(ws().c_str(), kTestUid, kTestUid);
      return kTestUid;
    }
    return ::geteuid();
  }
  // The uid the program runs as for a workspace left as created.
  static uid_t expected_uid_default() { return ::geteuid() == 0 ? 65534 : ::geteuid(); }

  // `cordon run [flags...] -- cmd...` in the workspace.
  RunResult run(const std::vector<std::string>& flags, const std::vector<std::string>& cmd,
                RunSpec spec = {}) const {
    std::vector<std::string> argv = {cordon_bin(), "run", "--workspace", ws()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    spec.env = env_;
    if (spec.cwd.empty()) {
      spec.cwd = ws();
    }
    return run_program(argv, spec);
  }
  // The common case: a writable workspace (writable_mode()), no summary, a shell snippet.
  RunResult sh(const std::string& script, std::vector<std::string> flags = {},
               RunSpec spec = {}) const {
    flags.insert(flags.begin(), {"-q", "--mode", writable_mode()});
    return run(flags, {"/bin/sh", "-c", script}, std::move(spec));
  }

  // The directory cordon keeps this fixture's sessions in (its CORDON_STATE_DIR).
  std::string state_dir() const { return state_.path(); }
  // `cordon ARGS...` with the fixture's environment: what it wrote to stdout, then to stderr.
  std::string cordon_out(const std::vector<std::string>& args) const {
    RunSpec spec;
    spec.env = env_;
    std::vector<std::string> argv{cordon_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_program(argv, spec);
    return r.out + r.err;
  }
  // The newest session's events of kind `kind`, as `cordon log last --json` prints them.
  std::vector<nlohmann::json> last_events(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    std::istringstream in(cordon_out({"log", "last", "--json"}));
    for (std::string line; std::getline(in, line);) {
      auto ev = nlohmann::json::parse(line, nullptr, false);
      if (ev.is_object() && ev.value("kind", "") == kind) {
        out.push_back(ev);
      }
    }
    return out;
  }

  static constexpr uid_t kTestUid = 4242;

 private:
  TempDir ws_, home_, state_;
  std::vector<std::string> env_;
};

// A cordon started in the background, for tests that signal it while it runs. With `piped_stdin`
// its stdin is a pipe the test writes with send() (else /dev/null). `in_child` runs in the child,
// in its own process group and `cwd`, just before execve.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             const std::string& cwd, bool piped_stdin = false,
             const std::function<void()>& in_child = {}) {
    int out[2], in[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || (piped_stdin && ::pipe2(in, O_CLOEXEC) != 0)) {
      return;
    }
    std::vector<char*> a, e;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(piped_stdin ? in[0] : ::open("/dev/null", O_RDONLY), 0);
      ::dup2(out[1], 1);
      if (::chdir(cwd.c_str()) != 0) ::_exit(120);
      if (in_child) in_child();
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
    if (piped_stdin) {
      ::close(in[0]);
      in_ = in[1];
    }
  }
  ~Background() {
    if (in_ >= 0) ::close(in_);
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }
  pid_t pid() const { return pid_; }
  void send(const std::string& s) { (void)!::write(in_, s.data(), s.size()); }
  // Reads stdout until `needle` appears (or EOF / deadline). Returns what was read so far.
  std::string read_until(const std::string& needle,
                         std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (text_.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char buf[4096];
        ssize_t n = ::read(out_, buf, sizeof buf);
        if (n <= 0) break;
        text_.append(buf, static_cast<size_t>(n));
      }
    }
    return text_;
  }
  // Waits for exit (bounded); returns the exit code, or -1.
  int wait(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    read_until("\x01never\x01", limit);  // drain to EOF
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  const std::string& text() const { return text_; }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  int status_ = -1;
  std::string text_;
};

}  // namespace cordon::testing
