// cordon as pid 1 of a pid namespace, the way a container runs its entrypoint: started under
// `unshare --pid --fork` (as root) or `unshare -Ur --pid --fork` (an ordinary user, rootless).
// Orphans are reaped, signals reach the program, a SIGTERM ends the session with its record
// complete and its copy-on-write layer kept, and the exit statuses pass through unchanged.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/host_procs.h"

namespace cordon::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// `unshare ... cordon run --workspace WS FLAGS -- CMD`: cordon is the namespace's pid 1.
std::vector<std::string> as_pid1(const SandboxFixture& f, const std::vector<std::string>& flags,
                                 const std::vector<std::string>& cmd) {
  std::vector<std::string> a = {"/usr/bin/unshare"};
  if (::geteuid() != 0) {
    a.push_back("-Ur");  // rootless: a user namespace of one's own, as a pod without root has
  }
  a.insert(a.end(),
           {"--pid", "--fork", "--mount-proc", cordon_bin(), "run", "--workspace", f.ws()});
  a.insert(a.end(), flags.begin(), flags.end());
  a.push_back("--");
  a.insert(a.end(), cmd.begin(), cmd.end());
  return a;
}

// The host pid of the namespace's pid 1: unshare's only child. -1 if none appears in 10 s.
pid_t pid1_of(pid_t unshare) {
  const std::string children = std::to_string(unshare) + "/children";
  for (int i = 0; i < 1000; ++i) {
    std::istringstream in(proc_file(unshare, ("task/" + children).c_str()));
    pid_t p = -1;
    if (in >> p) {
      return p;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return -1;
}

// Each process of `pid1`'s pid namespace (seen from the host) that is a zombie: "PID (comm)".
std::vector<std::string> zombies_in_namespace_of(pid_t pid1) {
  std::vector<std::string> out;
  char ns[128] = {};
  const std::string link = "/proc/" + std::to_string(pid1) + "/ns/pid";
  if (::readlink(link.c_str(), ns, sizeof ns - 1) <= 0) {
    out.push_back("(pid 1 is gone)");
    return out;
  }
  DIR* d = ::opendir("/proc");
  if (d == nullptr) {
    out.push_back("(no /proc)");
    return out;
  }
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') {
      continue;
    }
    char other[128] = {};
    const std::string l = std::string("/proc/") + e->d_name + "/ns/pid";
    if (::readlink(l.c_str(), other, sizeof other - 1) <= 0 || std::string(other) != ns) {
      continue;
    }
    std::string stat = proc_file(static_cast<pid_t>(pid), "stat");
    size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') {
      out.push_back(stat.substr(0, close + 1));
    }
  }
  ::closedir(d);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += x + "\n";
  return s;
}

// The last line of `cordon log last --json`, parsed.
nlohmann::json last_record_event(const SandboxFixture& f) {
  std::istringstream in(f.cordon_out({"log", "last", "--json"}));
  nlohmann::json last;
  for (std::string line; std::getline(in, line);) {
    auto ev = nlohmann::json::parse(line, nullptr, false);
    if (ev.is_object()) {
      last = ev;
    }
  }
  return last;
}

int cordon_exit(SandboxFixture& f, const std::vector<std::string>& args, std::string* text) {
  RunSpec spec;
  spec.env = f.env();
  std::vector<std::string> argv{cordon_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_program(argv, spec);
  *text = r.out + r.err;
  return r.exit_code();
}

TEST(Pid1, OrphansOfTheEntrypointAreReaped) {
  SandboxFixture f;
  // The entrypoint wrapper leaves two children behind and execs cordon: when they end, pid 1
  // (cordon) is their parent, and only a reaper keeps them from staying zombies.
  std::vector<std::string> argv = {
      "/usr/bin/unshare",
      "--pid",
      "--fork",
      "--mount-proc",
      "/bin/sh",
      "-c",
      "sleep 0.2 & sleep 0.3 & exec \"$0\" run -q --mode cow --workspace \"$1\" -- "
      "/bin/sh -c 'echo started; sleep 3; echo done'",
      cordon_bin(),
      f.ws()};
  if (::geteuid() != 0) {
    argv.insert(argv.begin() + 1, "-Ur");
  }
  Background b(argv, f.env(), f.ws());
  ASSERT_NE(b.read_until("started").find("started"), std::string::npos) << b.text();
  const pid_t pid1 = pid1_of(b.pid());
  ASSERT_GT(pid1, 0);
  EXPECT_NE(proc_file(pid1, "status").find("NSpid:\t" + std::to_string(pid1) + "\t1\n"),
            std::string::npos)
      << proc_file(pid1, "status");
  std::this_thread::sleep_for(milliseconds(1500));  // both orphans ended a second ago
  auto zombies = zombies_in_namespace_of(pid1);
  EXPECT_TRUE(zombies.empty()) << joined(zombies);
  EXPECT_EQ(b.wait(), 0) << b.text();
  EXPECT_NE(b.text().find("done"), std::string::npos) << b.text();
}

TEST(Pid1, SignalsReachTheProgramAndSigtermEndsTheSessionCleanly) {
  SandboxFixture f;
  write_text(f.home() + "/p.json", R"({"version": 1, "process": {"kill_grace": "1s"}})");
  // The program answers each signal and ignores SIGTERM, so that only the grace's end stops it.
  std::string script =
      "for s in USR1 USR2 HUP INT QUIT TERM; do trap \"echo got-$s\" $s; done; "
      "echo kept > kept.txt; echo started; i=0; "
      "while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo not-stopped";
  Background b(as_pid1(f, {"-q", "--mode", "cow", "--policy", f.home() + "/p.json"},
                       {"/bin/sh", "-c", script}),
               f.env(), f.ws());
  ASSERT_NE(b.read_until("started").find("started"), std::string::npos) << b.text();
  const pid_t pid1 = pid1_of(b.pid());
  ASSERT_GT(pid1, 0);
  const std::pair<int, const char*> forwarded[] = {
      {SIGUSR1, "USR1"}, {SIGUSR2, "USR2"}, {SIGHUP, "HUP"}, {SIGINT, "INT"}, {SIGQUIT, "QUIT"}};
  for (auto [sig, name] : forwarded) {
    ::kill(pid1, sig);
    std::string want = std::string("got-") + name + "\n";
    EXPECT_NE(b.read_until(want, seconds(10)).find(want), std::string::npos) << name << b.text();
  }
  auto start = steady_clock::now();
  ::kill(pid1, SIGTERM);
  EXPECT_EQ(b.wait(), 128 + SIGTERM) << b.text();
  auto took = steady_clock::now() - start;
  EXPECT_NE(b.text().find("got-TERM\n"), std::string::npos) << b.text();
  EXPECT_EQ(b.text().find("not-stopped"), std::string::npos) << b.text();
  EXPECT_GE(took, milliseconds(900)) << "the program had its kill_grace";
  EXPECT_LT(took, seconds(15));

  auto last = last_record_event(f);
  EXPECT_EQ(last.value("kind", ""), "session.end") << last.dump();
  EXPECT_EQ(last.value("exit_code", -1), 128 + SIGTERM) << last.dump();
  std::string text;
  EXPECT_EQ(cordon_exit(f, {"log", "--verify", "last"}, &text), 0) << text;
  EXPECT_NE(text.find("verifies"), std::string::npos) << text;
  EXPECT_EQ(cordon_exit(f, {"diff", "last"}, &text), 0) << text;
  EXPECT_NE(text.find("added kept.txt"), std::string::npos) << text;
  EXPECT_NE(text.find("+kept"), std::string::npos) << text;
}

TEST(Pid1, ASecondSigtermEndsTheGraceAtOnce) {
  SandboxFixture f;
  write_text(f.home() + "/p.json", R"({"version": 1, "process": {"kill_grace": "60s"}})");
  std::string script =
      "trap 'echo got-TERM' TERM; echo started; i=0; "
      "while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo not-stopped";
  Background b(as_pid1(f, {"-q", "--mode", "cow", "--policy", f.home() + "/p.json"},
                       {"/bin/sh", "-c", script}),
               f.env(), f.ws());
  ASSERT_NE(b.read_until("started").find("started"), std::string::npos) << b.text();
  const pid_t pid1 = pid1_of(b.pid());
  ASSERT_GT(pid1, 0);
  auto start = steady_clock::now();
  ::kill(pid1, SIGTERM);
  ASSERT_NE(b.read_until("got-TERM").find("got-TERM"), std::string::npos) << b.text();
  ::kill(pid1, SIGTERM);
  EXPECT_EQ(b.wait(), 128 + SIGTERM) << b.text();
  EXPECT_LT(steady_clock::now() - start, seconds(15)) << "not the 60 s grace";
  auto last = last_record_event(f);
  EXPECT_EQ(last.value("kind", ""), "session.end") << last.dump();
  EXPECT_EQ(last.value("exit_code", -1), 128 + SIGTERM) << last.dump();
  std::string text;
  EXPECT_EQ(cordon_exit(f, {"log", "--verify", "last"}, &text), 0) << text;
}

TEST(Pid1, ExitStatusesPassThroughForTheJob) {
  SandboxFixture f;
  auto code = [&](const std::vector<std::string>& flags, const std::vector<std::string>& cmd) {
    RunSpec spec;
    spec.env = f.env();
    spec.cwd = f.ws();
    std::vector<std::string> all = {"-q", "--mode", "cow"};
    all.insert(all.end(), flags.begin(), flags.end());
    auto r = run_program(as_pid1(f, all, cmd), spec);
    return r.exit_code();
  };
  EXPECT_EQ(code({}, {"/bin/sh", "-c", "exit 0"}), 0);
  EXPECT_EQ(code({}, {"/bin/sh", "-c", "exit 3"}), 3);
  EXPECT_EQ(code({}, {"/bin/sh", "-c", "kill -TERM $$"}), 128 + SIGTERM);
  EXPECT_EQ(code({}, {"/bin/sh", "-c", "kill -KILL $$"}), 128 + SIGKILL);
  // The ones the Job fails at once (docs/kubernetes.md): timeout, cordon's own failure, not
  // executable, not found.
  EXPECT_EQ(code({"--timeout", "1s"}, {"/bin/sh", "-c", "sleep 30"}), 124);
  EXPECT_EQ(code({"--no-such-flag"}, {"/bin/true"}), 125);
  EXPECT_EQ(code({}, {"/etc"}), 126);
  EXPECT_EQ(code({}, {"no-such-command-p1d"}), 127);
}

}  // namespace
}  // namespace cordon::testing
