// The interactive path, driven through a real pty: `cordon run -- bash -i` is a usable shell
// (arithmetic, window size, Ctrl-C, job control, exit status), with the pty allocated inside.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/host_procs.h"

namespace cordon::testing {
namespace {

// Waits (bounded) until a process whose command line contains `token` runs on the host; the
// sandbox's processes are visible from the host's /proc. Keys sent before the job runs would hit
// the shell's line editor instead of the job.
bool wait_for_process(const std::string& token) {
  for (int i = 0; i < 500; ++i) {
    if (!cordon::testing::host_pids_containing(token).empty()) return true;
    ::usleep(20000);
  }
  return false;
}

// Waits (bounded) until the process with `token` in its command line is in `state` (R, S, T...).
bool wait_for_state(const std::string& token, char state) {
  for (int i = 0; i < 500; ++i) {
    for (pid_t pid : cordon::testing::host_pids_containing(token)) {
      std::string line = cordon::testing::proc_file(pid, "stat");
      size_t paren = line.rfind(')');
      if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == state) {
        return true;
      }
    }
    ::usleep(20000);
  }
  return false;
}

class PtySession {
 public:
  PtySession(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             const std::string& cwd) {
    winsize ws{};
    ws.ws_row = 37;
    ws.ws_col = 101;
    std::vector<char*> a, e;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    pid_ = ::forkpty(&fd_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      if (::chdir(cwd.c_str()) != 0) ::_exit(120);
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
  }
  ~PtySession() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  void send(const std::string& s) { (void)!::write(fd_, s.data(), s.size()); }
  // Reads until `needle` appears after the current position; returns whether it did.
  bool expect(const std::string& needle, std::chrono::seconds limit = std::chrono::seconds(15)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      size_t at = buf_.find(needle, pos_);
      if (at != std::string::npos) {
        pos_ = at + needle.size();
        return true;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char b[4096];
      ssize_t n = ::read(fd_, b, sizeof b);
      if (n <= 0) return false;
      buf_.append(b, static_cast<size_t>(n));
    }
  }
  // Waits (bounded in time, not in iterations: once the pty hangs up poll returns at once) for
  // cordon to exit. Death by signal N shows as -N, a hang as -1000.
  int wait_exit(std::chrono::seconds limit = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      char b[4096];
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10) > 0) {
        ssize_t n = ::read(fd_, b, sizeof b);
        if (n > 0) buf_.append(b, static_cast<size_t>(n));
        if (n <= 0) ::usleep(10000);
      }
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
    }
    return -1000;
  }
  const std::string& output() const { return buf_; }
  int master() const { return fd_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  std::string buf_;
  size_t pos_ = 0;
};

TEST(Terminal, InteractiveBashThroughThePty) {
  SandboxFixture f;
  std::vector<std::string> env = f.env();
  env.push_back("TERM=dumb");
  PtySession s({cordon_bin(), "run", "-q", "--mode", writable_mode(), "--workspace", f.ws(), "--",
                "bash", "--norc", "--noprofile", "-i"},
               env, f.ws());
  s.send("PS1='cordon-prompt> '\n");
  ASSERT_TRUE(s.expect("cordon-prompt> ")) << s.output();
  s.send("echo $((6*7))\n");
  EXPECT_TRUE(s.expect("42\r\n")) << s.output();
  ASSERT_TRUE(s.expect("cordon-prompt> "));

  // The window size set on the outer terminal is the program's, from the start.
  s.send("stty size\n");
  EXPECT_TRUE(s.expect("37 101\r\n")) << s.output();
  ASSERT_TRUE(s.expect("cordon-prompt> "));

  // A resize of the outer terminal reaches the program (SIGWINCH -> TIOCSWINSZ on the master).
  winsize ws{};
  ws.ws_row = 50;
  ws.ws_col = 120;
  ::ioctl(s.master(), TIOCSWINSZ, &ws);
  s.send("stty size\n");
  EXPECT_TRUE(s.expect("50 120\r\n")) << s.output();
  ASSERT_TRUE(s.expect("cordon-prompt> "));

  // The terminal is the sandbox's own pty, and the shell has it as its controlling tty.
  s.send("tty; ps -o tty= -p $$\n");
  EXPECT_TRUE(s.expect("/dev/pts/0\r\npts/0\r\n")) << s.output();
  ASSERT_TRUE(s.expect("cordon-prompt> "));

  // Ctrl-C interrupts the foreground job through the pty's line discipline; the shell survives.
  s.send("sleep 100.25\n");
  ASSERT_TRUE(wait_for_process(std::string("sleep") + std::string(1, 0) + "100.25"));
  s.send(std::string(1, '\x03'));
  EXPECT_TRUE(s.expect("cordon-prompt> ", std::chrono::seconds(10))) << s.output();
  s.send("echo after-interrupt\n");
  EXPECT_TRUE(s.expect("after-interrupt\r\n")) << s.output();
  ASSERT_TRUE(s.expect("cordon-prompt> "));

  // Job control: Ctrl-Z stops the foreground job, fg resumes it.
  s.send("sleep 100.75\n");
  ASSERT_TRUE(wait_for_process(std::string("sleep") + std::string(1, 0) + "100.75"));
  s.send(std::string(1, '\x1a'));
  EXPECT_TRUE(s.expect("Stopped")) << s.output();
  ASSERT_TRUE(s.expect("cordon-prompt> "));
  // fg gives it the terminal back (bash does so before SIGCONT): once it runs, Ctrl-C ends it.
  s.send("fg\n");
  ASSERT_TRUE(wait_for_state(std::string("sleep") + std::string(1, 0) + "100.75", 'S'));
  s.send(std::string(1, '\x03'));
  ASSERT_TRUE(s.expect("cordon-prompt> ", std::chrono::seconds(10))) << s.output();
  s.send("jobs; echo no-jobs-left\n");
  EXPECT_TRUE(s.expect("\r\nno-jobs-left\r\n")) << s.output();
  ASSERT_TRUE(s.expect("cordon-prompt> "));

  s.send("exit 9\n");
  EXPECT_EQ(s.wait_exit(), 9) << s.output();
}

// Starts `cordon run -q --mode rw -- /bin/sh -c SCRIPT` in f's workspace with the pty `slave` as
// its controlling terminal and stdin/stdout/stderr.
pid_t start_on_terminal(SandboxFixture& f, int slave, const std::string& script) {
  std::vector<std::string> argv = {cordon_bin(),    "run",         "-q",   "--mode",
                                   writable_mode(), "--workspace", f.ws(), "--",
                                   "/bin/sh",       "-c",          script};
  std::vector<char*> a, e;
  for (auto& x : argv) a.push_back(const_cast<char*>(x.c_str()));
  a.push_back(nullptr);
  for (auto& x : f.env()) e.push_back(const_cast<char*>(x.c_str()));
  e.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    ::ioctl(slave, TIOCSCTTY, 0);
    for (int fd = 0; fd <= 2; ++fd) ::dup2(slave, fd);
    ::execve(a[0], a.data(), e.data());
    ::_exit(127);
  }
  return pid;
}

// Runs cordon on a pty whose slave the test keeps, so the outer terminal's mode can be read
// after cordon is gone. `signal_after_start`: SIGTERM cordon once the program runs.
termios outer_mode_after(const std::string& script, int signal_after_start, int* exit_code) {
  SandboxFixture f;
  int master = -1, slave = -1;
  termios t{};
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) {
    return t;
  }
  pid_t pid = start_on_terminal(f, slave, script);
  if (signal_after_start != 0) {
    // The program prints "running" once started; the pty master shows it.
    std::string seen;
    for (int i = 0; i < 1000 && seen.find("running") == std::string::npos; ++i) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) {
        char b[256];
        ssize_t n = ::read(master, b, sizeof b);
        if (n > 0) seen.append(b, static_cast<size_t>(n));
      }
    }
    termios during{};
    ::tcgetattr(slave, &during);
    EXPECT_EQ(during.c_lflag & (ICANON | ECHO), 0u) << "not raw while the program runs";
    ::kill(pid, signal_after_start);
  }
  int st = 0;
  for (int i = 0; i < 1500; ++i) {
    char b[256];
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 10) > 0) (void)!::read(master, b, sizeof b);
    if (::waitpid(pid, &st, WNOHANG) == pid) break;
  }
  *exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  ::tcgetattr(slave, &t);
  ::close(master);
  ::close(slave);
  return t;
}

// Runs `cordon run -q --mode rw -- sh -c SCRIPT` on a fresh pty whose line discipline already
// holds `typed_ahead` (canonical mode, as a shell leaves it) before cordon starts. Returns every
// byte cordon's side of the terminal wrote, and sets the exit code (-1000 on a hang).
std::string output_on_terminal(const std::string& typed_ahead, const std::string& script,
                               int* exit_code) {
  SandboxFixture f;
  *exit_code = -1000;
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) {
    return "openpty failed";
  }
  // Echo off on the outer terminal: what comes back is then only what cordon wrote.
  termios mode{};
  ::tcgetattr(slave, &mode);
  mode.c_lflag &= ~static_cast<tcflag_t>(ECHO);
  ::tcsetattr(slave, TCSANOW, &mode);
  (void)!::write(master, typed_ahead.data(), typed_ahead.size());
  pid_t pid = start_on_terminal(f, slave, script);
  ::close(slave);
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool exited = false;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 10) > 0) {
      char b[4096];
      ssize_t n = ::read(master, b, sizeof b);
      if (n > 0) {
        out.append(b, static_cast<size_t>(n));
        continue;
      }
      if (exited) break;  // EIO: every slave is closed and everything was read
    }
    int st = 0;
    if (!exited && ::waitpid(pid, &st, WNOHANG) == pid) {
      exited = true;
      *exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    }
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ::close(master);
  return out;
}

// script(1) with its own input at an end sends the terminal's EOF character, which the line
// discipline holds as an end-of-file mark; cordon's output is then exactly the program's.
TEST(Terminal, OutputIsByteExactWhenInputEndedBeforeTheStart) {
  int code = 0;
  EXPECT_EQ(output_on_terminal("\004", "echo hi", &code), "hi\r\n");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(output_on_terminal("", "echo hi", &code), "hi\r\n");
  EXPECT_EQ(code, 0);
}

// Lines typed before the program ran reach it unchanged, and an end-of-file typed after them
// ends its input: `od` prints exactly the line's bytes and exits (no NUL, no hang).
TEST(Terminal, InputTypedAheadReachesTheProgramExactly) {
  int code = 0;
  std::string out = output_on_terminal("ab\001c\n\004", "stty -echo; od -An -tx1 -v", &code);
  EXPECT_EQ(code, 0) << out;
  // The program's pty echoes what arrives before `stty -echo` runs; od's line is at the end.
  EXPECT_TRUE(out.ends_with(" 61 62 01 63 0a\r\n")) << out;
  EXPECT_EQ(out.find(" 00"), std::string::npos) << out;
}

// The report this is held to: script(1) around `cordon run -q -- echo hi` with no input prints
// exactly what bwrap or the bare program prints.
TEST(Terminal, UnderScriptTheOutputIsTheProgramsAlone) {
  SandboxFixture f;
  RunSpec spec;
  spec.env = f.env();
  spec.cwd = f.ws();
  RunResult r = run_program({"script", "-qec",
                             cordon_bin() + " run -q --mode " + writable_mode() + " --workspace " +
                                 f.ws() + " -- echo hi",
                             "/dev/null"},
                            spec);
  EXPECT_EQ(r.out, "hi\r\n") << r.err;
  EXPECT_EQ(r.exit_code(), 0) << r.err;
}

TEST(Terminal, RawModeIsRestoredAfterwards) {
  int code = -1;
  termios t = outer_mode_after("exit 0", 0, &code);
  EXPECT_EQ(code, 0);
  EXPECT_NE(t.c_lflag & ICANON, 0u);
  EXPECT_NE(t.c_lflag & ECHO, 0u);
}

TEST(Terminal, RawModeIsRestoredWhenCordonIsSignalled) {
  int code = -1;
  termios t = outer_mode_after("echo running; sleep 100", SIGTERM, &code);
  EXPECT_EQ(code, 128 + SIGTERM);  // forwarded to the program, which died of it
  EXPECT_NE(t.c_lflag & ICANON, 0u);
  EXPECT_NE(t.c_lflag & ECHO, 0u);
}

}  // namespace
}  // namespace cordon::testing
