// Process records: exec* and the children's own start records; static binaries stay invisible.
#include <gtest/gtest.h>

#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

TEST(ShimExec, BashChildrenAreRecordedWithTheirArgv) {
  ShimSession session;
  RunSpec spec;
  spec.env = session.env();
  RunResult r = run_program({"/bin/bash", "-c", "ls /dev/null; cat /dev/null"}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "/dev/null\n");
  auto evs = session.events();

  int bash_pid = -1;
  for (const auto& e : of_kind(evs, "proc.start")) {
    if (e["exe"] == "/usr/bin/bash") {
      bash_pid = e["pid"];
      EXPECT_EQ(e["argv"],
                nlohmann::json::array({"/bin/bash", "-c", "ls /dev/null; cat /dev/null"}));
    }
  }
  ASSERT_GT(bash_pid, 0) << "no proc.start for bash";

  // bash forks for ls, and execs cat in place of itself for the last command.
  bool saw_ls = false, saw_cat = false;
  int ls_pid = -1;
  for (const auto& e : of_kind(evs, "proc.exec")) {
    EXPECT_EQ(e["exe"], "/usr/bin/bash") << "proc.exec is sent by the caller: " << e.dump();
    if (e["target_argv"] == nlohmann::json::array({"ls", "/dev/null"})) {
      saw_ls = true;
      ls_pid = e["pid"];
      EXPECT_EQ(e["ppid"], bash_pid);
      EXPECT_NE(e["pid"], bash_pid);
      EXPECT_EQ(e.value("path", ""), "/usr/bin/ls");
      EXPECT_EQ(e.value("via", ""), "execve");
    }
    if (e["target_argv"] == nlohmann::json::array({"cat", "/dev/null"})) {
      saw_cat = true;
      EXPECT_EQ(e.value("path", ""), "/usr/bin/cat");
    }
  }
  EXPECT_TRUE(saw_ls);
  EXPECT_TRUE(saw_cat);
  // The children announce themselves from their own images too.
  bool ls_started = false, cat_started = false;
  for (const auto& e : of_kind(evs, "proc.start")) {
    if (e["exe"] == "/usr/bin/ls") {
      ls_started = true;
      EXPECT_EQ(e["pid"], ls_pid);
      EXPECT_EQ(e["argv"], nlohmann::json::array({"ls", "/dev/null"}));
    }
    if (e["exe"] == "/usr/bin/cat") {
      cat_started = true;
      EXPECT_EQ(e["argv"], nlohmann::json::array({"cat", "/dev/null"}));
    }
  }
  EXPECT_TRUE(ls_started);
  EXPECT_TRUE(cat_started);
}

TEST(ShimExec, ArgvIsBoundedAndTheTruncationIsSaid) {
  ShimSession session;
  RunSpec spec;
  spec.env = session.env();
  std::vector<std::string> argv = {"/bin/echo"};
  for (int i = 0; i < 20; ++i) {
    argv.push_back(std::string(100, static_cast<char>('a' + i)));
  }
  RunResult r = run_program(argv, spec);
  ASSERT_EQ(r.exit_code(), 0);
  auto starts = of_kind(session.events(), "proc.start");
  ASSERT_EQ(starts.size(), 1u);
  const auto& a = starts[0]["argv"];
  size_t total = 0;
  for (const auto& s : a) {
    total += s.get<std::string>().size();
  }
  EXPECT_LE(a.size(), 8u);
  EXPECT_LE(total, 512u);
  EXPECT_EQ(a[0], "/bin/echo");
  EXPECT_EQ(starts[0]["argc"], 21);
}

TEST(ShimExec, StaticBinaryRunsAndProducesNoEvents) {
  ShimSession session;
  RunSpec spec;
  spec.env = session.env();
  RunResult r = run_program({shim_program("shim_static_connect")}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "static: connect=0 open=ok\n");
  // The shim cannot be loaded into a static binary: nothing is attributed to it (the launcher
  // reports such processes as unattributed rather than guessing).
  EXPECT_TRUE(session.events().empty());
  EXPECT_EQ(session.collector().stats().connections.load(), 0u);
}

}  // namespace
}  // namespace cordon::testing
