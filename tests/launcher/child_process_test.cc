// ChildProcess against real children: stop with grace then SIGKILL, reap on destruction, moves.
#include "launcher/child_process.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>

namespace {

using cordon::launcher::ChildProcess;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A child running `script` in sh; "exec" in it keeps the pid the one ChildProcess holds.
pid_t spawn_sh(const char* script) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", script, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// A child that ignores SIGTERM from its first instruction on: the disposition is set around the
// fork, so no SIGTERM can come before it, and exec keeps it.
pid_t spawn_term_ignoring_sleep() {
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGTERM, &ign, &old);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::sigaction(SIGTERM, &old, nullptr);
  return pid;
}

// Whether `pid` is still a child of ours that nobody reaped.
bool unreaped(pid_t pid) {
  siginfo_t si{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

TEST(ChildProcess, StopEndsAChildThatObeysSigtermWithinTheGrace) {
  ChildProcess c(spawn_sh("exec sleep 30"));
  ASSERT_GT(c.pid(), 0);
  EXPECT_FALSE(c.exited());
  auto t0 = Clock::now();
  int st = c.stop(milliseconds(5000));
  EXPECT_LT(Clock::now() - t0, milliseconds(4000));
  ASSERT_TRUE(WIFSIGNALED(st)) << st;
  EXPECT_EQ(WTERMSIG(st), SIGTERM);
  EXPECT_EQ(c.exited(), st);
  EXPECT_FALSE(unreaped(c.pid()));
}

TEST(ChildProcess, StopKillsAChildThatIgnoresSigtermOnceTheGraceIsOver) {
  ChildProcess c(spawn_term_ignoring_sleep());
  ASSERT_GT(c.pid(), 0);
  auto t0 = Clock::now();
  int st = c.stop(milliseconds(400));
  auto took = Clock::now() - t0;
  EXPECT_GE(took, milliseconds(400));
  EXPECT_LT(took, milliseconds(5000));
  ASSERT_TRUE(WIFSIGNALED(st)) << st;
  EXPECT_EQ(WTERMSIG(st), SIGKILL);
  EXPECT_EQ(c.stop(), st) << "a second stop returns the first one's status";
}

TEST(ChildProcess, AnExitIsSeenAndReapedWithoutASignal) {
  ChildProcess c(spawn_sh("exit 7"));
  ASSERT_TRUE(c.wait_for(milliseconds(5000)));
  auto st = c.exited();
  ASSERT_TRUE(st);
  ASSERT_TRUE(WIFEXITED(*st));
  EXPECT_EQ(WEXITSTATUS(*st), 7);
  EXPECT_EQ(c.stop(), *st);
}

TEST(ChildProcess, DestructionStopsAndReapsTheChild) {
  pid_t pid;
  {
    ChildProcess c(spawn_sh("exec sleep 30"));
    pid = c.pid();
    ASSERT_TRUE(unreaped(pid) || ::kill(pid, 0) == 0);
  }
  EXPECT_FALSE(unreaped(pid));
  errno = 0;
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD) << "the child was left for someone else to reap";
}

TEST(ChildProcess, AMoveHandsTheChildOverAndAssignmentStopsTheOneHeld) {
  ChildProcess a(spawn_sh("exec sleep 30"));
  const pid_t first = a.pid();
  ChildProcess b(std::move(a));
  EXPECT_EQ(b.pid(), first);
  EXPECT_EQ(a.stop(), -1) << "the moved-from one holds nothing";  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(::kill(first, 0), 0) << "stopping the moved-from one reached the child";

  b = ChildProcess(spawn_sh("exec sleep 30"));
  EXPECT_NE(b.pid(), first);
  EXPECT_FALSE(unreaped(first));
  EXPECT_EQ(::waitpid(first, nullptr, WNOHANG), -1) << "the replaced child was not reaped";
}

}  // namespace
