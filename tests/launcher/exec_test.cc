// `cordon run --detach`, `cordon exec`, `cordon stop`: programs run one after another in one
// sandbox, each with the hardening of a run's program, and the session ends cleanly.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

// A detached session of the fixture's workspace, stopped (if still running) at the end.
class Detached {
 public:
  Detached(SandboxFixture& f, std::vector<std::string> flags = {}) : f_(f) {
    std::vector<std::string> argv = {cordon_bin(),  "run",  "--detach", "-q",
                                     "--workspace", f.ws(), "--mode",   "cow"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    RunSpec spec;
    spec.env = f.env();
    spec.cwd = f.ws();
    spec.deadline = std::chrono::seconds(30);
    start_ = run_program(argv, spec);
    id_ = start_.out.substr(0, start_.out.find('\n'));
  }
  ~Detached() {
    if (!id_.empty()) {
      (void)f_.cordon_out({"stop", id_});
    }
  }
  const std::string& id() const { return id_; }
  const RunResult& start() const { return start_; }
  RunResult exec(const std::vector<std::string>& cmd, RunSpec spec = {}) const {
    std::vector<std::string> argv = {cordon_bin(), "exec", id_, "--"};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    spec.env = f_.env();
    if (spec.cwd.empty()) {
      spec.cwd = f_.ws();
    }
    spec.deadline = std::chrono::seconds(30);
    return run_program(argv, spec);
  }
  std::string dir() const { return f_.state_dir() + "/sessions/" + id_; }

 private:
  SandboxFixture& f_;
  RunResult start_;
  std::string id_;
};

// The lines of /proc/self/status that say how a process is confined.
std::string confinement(const std::string& status) {
  std::string out;
  for (const auto& l : lines_of(status)) {
    for (const char* key : {"Seccomp:", "NoNewPrivs:", "CapEff:", "CapPrm:", "CapBnd:"}) {
      if (l.rfind(key, 0) == 0) {
        out += l + "\n";
      }
    }
  }
  return out;
}

std::vector<nlohmann::json> events_of(const std::string& events_path, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& l : lines_of(read_text(events_path))) {
    auto ev = nlohmann::json::parse(l, nullptr, false);
    if (ev.is_object() && ev.value("kind", "") == kind) {
      out.push_back(ev);
    }
  }
  return out;
}

TEST(Exec, ReturnsTheCommandsStatusAndOutput) {
  SandboxFixture f;
  Detached d(f);
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  ASSERT_EQ(d.id().size(), 22u) << d.start().out;
  auto r = d.exec({"/bin/sh", "-c", "echo to-out; echo to-err >&2; exit 7"});
  EXPECT_EQ(r.exit_code(), 7) << r.err;
  EXPECT_EQ(r.out, "to-out\n");
  EXPECT_NE(r.err.find("to-err"), std::string::npos) << r.err;
  // stdin is the caller's.
  RunSpec in;
  in.stdin_data = "piped line\n";
  auto c = d.exec({"cat"}, in);
  EXPECT_EQ(c.exit_code(), 0) << c.err;
  EXPECT_EQ(c.out, "piped line\n");
  // env(1)/timeout(1) conventions.
  EXPECT_EQ(d.exec({"/bin/sh", "-c", "kill -TERM $$"}).exit_code(), 128 + SIGTERM);
  auto nf = d.exec({"no-such-command-here"});
  EXPECT_EQ(nf.exit_code(), 127);
  EXPECT_NE(nf.err.find("no-such-command-here"), std::string::npos) << nf.err;
}

TEST(Exec, TheSmallCordonExecBinaryDoesTheSame) {
  SandboxFixture f;
  Detached d(f, {"--name", "small"});
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  RunSpec spec;
  spec.env = f.env();
  spec.cwd = f.ws();
  spec.stdin_data = "in\n";
  auto r = run_program({build_path("launcher/cordon-exec"), "-e", "GREETING=hi", "small", "--",
                        "/bin/sh", "-c", "read x; echo $GREETING-$x; exit 5"},
                       spec);
  EXPECT_EQ(r.exit_code(), 5) << r.err;
  EXPECT_EQ(r.out, "hi-in\n");
  auto bad = run_program({build_path("launcher/cordon-exec"), "no-such-name", "true"}, spec);
  EXPECT_EQ(bad.exit_code(), 125);
  EXPECT_NE(bad.err.find("no running session is named no-such-name"), std::string::npos) << bad.err;
}

TEST(Exec, SignalsReachTheProgramAndACallerGoneTakesItsProgram) {
  SandboxFixture f;
  Detached d(f);
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  Background interrupted({cordon_bin(), "exec", d.id(), "--", "/bin/sh", "-c",
                          "trap 'echo got-int; exit 9' INT; echo ready; sleep 20 & wait"},
                         f.env(), f.ws());
  ASSERT_NE(interrupted.read_until("ready\n").find("ready"), std::string::npos);
  ::kill(interrupted.pid(), SIGINT);
  EXPECT_EQ(interrupted.wait(std::chrono::seconds(10)), 9);
  EXPECT_NE(interrupted.text().find("got-int"), std::string::npos) << interrupted.text();

  Background killed({cordon_bin(), "exec", d.id(), "--", "/bin/sh", "-c", "echo ready; sleep 30"},
                    f.env(), f.ws());
  ASSERT_NE(killed.read_until("ready\n").find("ready"), std::string::npos);
  ::kill(killed.pid(), SIGKILL);
  killed.wait(std::chrono::seconds(10));
  // Nobody waits for it any more: the program is killed, and its end recorded.
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto ends = events_of(d.dir() + "/events.jsonl", "exec.end");
    ended = ends.size() == 2 && ends[1].value("signal", 0) == SIGKILL;
  }
  EXPECT_TRUE(ended) << read_text(d.dir() + "/events.jsonl");
}

TEST(Exec, TwoExecsShareTheWorkspaceAndTheRecordAttributesBoth) {
  SandboxFixture f;
  Detached d(f);
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  auto w = d.exec({"/bin/sh", "-c", "echo shared-content > note.txt"});
  ASSERT_EQ(w.exit_code(), 0) << w.err;
  auto r = d.exec({"cat", "note.txt"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "shared-content\n");
  // cow: the workspace itself is untouched until a commit.
  EXPECT_NE(::access((f.ws() + "/note.txt").c_str(), F_OK), 0);
  auto starts = events_of(d.dir() + "/events.jsonl", "exec.start");
  auto ends = events_of(d.dir() + "/events.jsonl", "exec.end");
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(starts[0]["argv"][2], "echo shared-content > note.txt");
  EXPECT_EQ(starts[1]["argv"], nlohmann::json({"cat", "note.txt"}));
  EXPECT_EQ(starts[0]["uid"], ::geteuid());
  EXPECT_NE(starts[0]["pid"], starts[1]["pid"]);
  EXPECT_EQ(ends[1]["exec_id"], starts[1]["exec_id"]);
  EXPECT_EQ(ends[1]["exit_code"], 0);
}

TEST(Exec, HasTheHardeningOfARunsProgram) {
  SandboxFixture f;
  write_text(f.home() + "/secret.txt", "host secret\n", 0644);
  const std::string probe =
      "grep -E '^(Seccomp|NoNewPrivs|Cap(Eff|Prm|Bnd)):' /proc/self/status; "
      "cat " +
      f.home() + "/secret.txt || echo denied";
  auto run = f.run({"-q", "--mode", "cow"}, {"/bin/sh", "-c", probe});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Detached d(f);
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  auto ex = d.exec({"/bin/sh", "-c", probe});
  ASSERT_EQ(ex.exit_code(), 0) << ex.err;
  EXPECT_EQ(confinement(ex.out), confinement(run.out));
  EXPECT_NE(ex.out.find("Seccomp:\t2"), std::string::npos) << ex.out;
  EXPECT_NE(ex.out.find("NoNewPrivs:\t1"), std::string::npos) << ex.out;
  EXPECT_NE(ex.out.find("CapEff:\t0000000000000000"), std::string::npos) << ex.out;
  EXPECT_EQ(ex.out.find("host secret"), std::string::npos) << ex.out;
  EXPECT_NE(ex.out.find("denied"), std::string::npos) << ex.out;
  // A write outside the grants is refused alike.
  auto wr = d.exec({"/bin/sh", "-c", "echo x > /usr/cordon-exec-probe"});
  EXPECT_NE(wr.exit_code(), 0);
  EXPECT_NE(::access("/usr/cordon-exec-probe", F_OK), 0);
}

TEST(Exec, TheControlSocketIsOutOfTheSandboxsReach) {
  SandboxFixture f;
  Detached d(f);
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  const std::string sock = d.dir() + "/exec.sock";
  struct stat st {};
  ASSERT_EQ(::stat(sock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto seen = d.exec({"/bin/sh", "-c", "test -e " + sock + " && echo visible || echo hidden"});
  EXPECT_EQ(seen.out, "hidden\n") << seen.err;
}

TEST(Exec, AProgramInsideCannotExecEvenWhereItSeesTheSocket) {
  SandboxFixture f;
  // The policy shows the state directory and cordon itself: only the control socket's own
  // checks stand between the program and a second exec.
  const std::string bin_dir = cordon_bin().substr(0, cordon_bin().rfind('/'));
  Detached d(f, {"--read", f.state_dir(), "--read", bin_dir});
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  auto r = d.exec({"/bin/sh", "-c",
                   "CORDON_STATE_DIR=" + f.state_dir() + " " + cordon_bin() + " exec " + d.id() +
                       " -- echo inner-ran; echo status=$?"});
  EXPECT_NE(r.out.find("status=125"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("inner-ran"), std::string::npos) << r.out;
  // Rootless, the program has the owner's uid and reaches the socket: the ancestry check
  // refuses it. As root it runs as another uid, which the 0700 session directory stops first.
  const char* why = ::geteuid() == 0 ? "ermission denied" : "cannot control a session";
  EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  // Only the outer exec started a program.
  EXPECT_EQ(events_of(d.dir() + "/events.jsonl", "exec.start").size(), 1u);
}

// The ways around an ancestry check: a caller 300 processes deep, one in the background whose
// parent has gone, and a program of another session. Each is in a sandbox's pid namespace, and
// each is refused (the caller is judged at connect time, by a pidfd, before anything is read).
TEST(Exec, NoProgramOfAnySandboxCanExecHoweverItCalls) {
  SandboxFixture f;
  const std::string bin_dir = cordon_bin().substr(0, cordon_bin().rfind('/'));
  Detached a(f, {"--read", f.state_dir(), "--read", bin_dir});
  ASSERT_EQ(a.start().exit_code(), 0) << a.start().err;
  Detached b(f, {"--read", f.state_dir(), "--read", bin_dir});
  ASSERT_EQ(b.start().exit_code(), 0) << b.start().err;
  const std::string exec_b =
      "CORDON_STATE_DIR=" + f.state_dir() + " " + cordon_bin() + " exec " + b.id() + " -- ";
  // From a: into b directly; from an orphaned background caller; through a chain of 300 shells.
  const std::string deep = "n=0; f() { n=$((n+1)); if [ $n -lt 300 ]; then f; else " + exec_b +
                           "touch from-deep </dev/null; echo deep=$?; fi; }; f";
  auto r = a.exec({"/bin/sh", "-c",
                   exec_b + "touch from-a </dev/null; echo cross=$?; (" + exec_b +
                       "touch from-gone </dev/null & ); sleep 1; " + deep},
                  {});
  EXPECT_NE(r.out.find("cross=125"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("deep=125"), std::string::npos) << r.out << r.err;
  // Only the outer exec ran in a, nothing in b.
  EXPECT_EQ(events_of(a.dir() + "/events.jsonl", "exec.start").size(), 1u);
  EXPECT_EQ(events_of(b.dir() + "/events.jsonl", "exec.start").size(), 0u);
  if (::geteuid() != 0) {
    // Rootless the program has the owner's uid: refused by its pid namespace, and said so.
    EXPECT_GE(events_of(b.dir() + "/events.jsonl", "exec.refused").size(), 2u);
    EXPECT_NE(r.err.find("cannot control a session"), std::string::npos) << r.err;
  }
}

// A variable the session sets itself (a credential's placeholder, a decoy, cordon's own proxy)
// is not replaced by -e: the real value of a credential must not enter the sandbox this way.
TEST(Exec, ASessionsOwnVariableIsNotReplaced) {
  SandboxFixture f;
  Detached d(f);
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  std::vector<std::string> argv = {
      cordon_bin(), "exec", "-e", "HOME=/tmp/elsewhere", d.id(), "--", "/bin/sh", "-c", "echo ran"};
  RunSpec spec;
  spec.env = f.env();
  spec.cwd = f.ws();
  spec.deadline = std::chrono::seconds(30);
  auto r = run_program(argv, spec);
  EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;
  EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("-e HOME: the session sets this variable itself"), std::string::npos)
      << r.err;
  argv[3] = "MY_SETTING=1";
  argv.back() = "echo $MY_SETTING";
  auto ok = run_program(argv, spec);
  EXPECT_EQ(ok.exit_code(), 0) << ok.err;
  EXPECT_EQ(ok.out, "1\n");
}

// A terminal on standard input is not handed to the sandbox (no pty yet): a process the program
// left behind could read what is typed next.
TEST(Exec, ATerminalOnStandardInputIsRefused) {
  SandboxFixture f;
  Detached d(f);
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  auto r = d.exec({"/bin/sh", "-c", "echo ran"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;  // a pipe or /dev/null: fine
  const std::string script = "script -qec \"" + cordon_bin() + " exec " + d.id() +
                             " -- echo ran; echo status=\\$?\" /dev/null";
  RunSpec spec;
  spec.env = f.env();
  spec.cwd = f.ws();
  spec.deadline = std::chrono::seconds(30);
  auto t = run_program({"/bin/sh", "-c", script}, spec);
  EXPECT_NE(t.out.find("status=125"), std::string::npos) << t.out << t.err;
  EXPECT_NE(t.out.find("standard input is a terminal"), std::string::npos) << t.out;
}

TEST(Exec, AnotherUidCannotExecIntoTheSession) {
  CORDON_REQUIRE_ROOT();
  SandboxFixture f;
  Detached d(f);
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  RunSpec as_other;
  as_other.uid = SandboxFixture::kTestUid;
  as_other.gid = SandboxFixture::kTestUid;
  auto denied = d.exec({"/bin/echo", "other-ran"}, as_other);
  EXPECT_EQ(denied.exit_code(), 125) << denied.err;
  EXPECT_EQ(denied.out.find("other-ran"), std::string::npos);
  // With every directory and the socket opened up, the peer check still refuses the uid.
  ::chmod(f.state_dir().c_str(), 0755);
  ::chmod((f.state_dir() + "/sessions").c_str(), 0755);
  ::chmod(d.dir().c_str(), 0755);
  ::chmod((d.dir() + "/exec.sock").c_str(), 0666);
  auto refused = d.exec({"/bin/echo", "other-ran"}, as_other);
  EXPECT_EQ(refused.exit_code(), 125) << refused.err;
  EXPECT_EQ(refused.out.find("other-ran"), std::string::npos);
  EXPECT_NE(refused.err.find("does not own this session"), std::string::npos) << refused.err;
  EXPECT_EQ(events_of(d.dir() + "/events.jsonl", "exec.start").size(), 0u);
  EXPECT_EQ(events_of(d.dir() + "/events.jsonl", "exec.refused").size(), 1u);
}

TEST(Exec, StopEndsTheSessionAndItIsReviewedAsAnyOther) {
  SandboxFixture f;
  Detached d(f, {"--name", "review-me"});
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  auto w = d.exec({"/bin/sh", "-c", "echo from-exec > made.txt"});
  ASSERT_EQ(w.exit_code(), 0) << w.err;
  EXPECT_NE(f.cordon_out({"ls"}).find("running"), std::string::npos);
  EXPECT_EQ(f.cordon_out({"stop", "review-me"}), "");
  auto after = d.exec({"true"});
  EXPECT_EQ(after.exit_code(), 125);
  EXPECT_NE(after.err.find("not running"), std::string::npos) << after.err;
  EXPECT_EQ(f.cordon_out({"ls"}).find("running"), std::string::npos) << f.cordon_out({"ls"});
  auto stops = events_of(d.dir() + "/events.jsonl", "session.stop");
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0]["reason"], "cordon stop");
  EXPECT_EQ(events_of(d.dir() + "/events.jsonl", "session.end").size(), 1u);
  EXPECT_NE(f.cordon_out({"diff", d.id(), "--stat"}).find("made.txt"), std::string::npos);
  auto commit = f.cordon_out({"commit", d.id()});
  EXPECT_EQ(read_text(f.ws() + "/made.txt"), "from-exec\n") << commit;
}

TEST(Exec, TheIdleTimeoutEndsTheSession) {
  SandboxFixture f;
  Detached d(f, {"--idle-timeout", "1s"});
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  ASSERT_EQ(d.exec({"true"}).exit_code(), 0);
  // An exec running longer than the timeout holds the session open.
  auto slow = d.exec({"/bin/sh", "-c", "sleep 1.5; echo still-here"});
  EXPECT_EQ(slow.out, "still-here\n") << slow.err;
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ended = events_of(d.dir() + "/events.jsonl", "session.end").size() == 1;
  }
  EXPECT_TRUE(ended);
  auto stops = events_of(d.dir() + "/events.jsonl", "session.stop");
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0]["reason"], "idle timeout");
  EXPECT_EQ(d.exec({"true"}).exit_code(), 125);
}

TEST(Exec, ClearErrors) {
  SandboxFixture f;
  auto ask = f.cordon_out({"run", "--detach", "--ask", "--workspace", f.ws()});
  EXPECT_NE(ask.find("--detach: not with --ask"), std::string::npos) << ask;
  auto cmd = f.cordon_out({"run", "--detach", "--workspace", f.ws(), "--", "true"});
  EXPECT_NE(cmd.find("without a program"), std::string::npos) << cmd;
  auto name = f.cordon_out({"run", "--name", "x1", "--workspace", f.ws(), "--", "true"});
  EXPECT_NE(name.find("add --detach"), std::string::npos) << name;
  auto unknown = f.cordon_out({"exec", "no-such-session", "--", "true"});
  EXPECT_NE(unknown.find("no running session is named no-such-session"), std::string::npos)
      << unknown;
  // A session that ran without --detach is known but cannot be joined.
  ASSERT_EQ(f.run({"-q", "--mode", "ro"}, {"true"}).exit_code(), 0);
  auto plain = f.cordon_out({"exec", "last", "--", "true"});
  EXPECT_NE(plain.find("is not running"), std::string::npos) << plain;
  // Two running sessions cannot share a name.
  Detached d(f, {"--name", "twin"});
  ASSERT_EQ(d.start().exit_code(), 0) << d.start().err;
  Detached twin(f, {"--name", "twin"});
  EXPECT_EQ(twin.start().exit_code(), 125);
  EXPECT_NE(twin.start().err.find("is running under that name"), std::string::npos)
      << twin.start().err;
}

}  // namespace
}  // namespace cordon::testing
