// The shim must not change behaviour: real programs give identical output with and without it
// (and the shim did run: each run produced events).
#include <gtest/gtest.h>

#include "tests/preload_shim/loopback_server.h"
#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

struct Outcome {
  int code;
  std::string out, err;
};

// Runs argv twice, plain and shimmed, in fresh copies of the same working directory layout.
class Twice {
 public:
  Twice(std::vector<std::string> argv, std::vector<std::string> extra_env = {},
        std::string setup = {})
      : argv_(std::move(argv)), extra_(std::move(extra_env)), setup_(std::move(setup)) {}

  void check(size_t min_events = 1) {
    Outcome plain = run(false);
    Outcome shimmed = run(true);
    EXPECT_EQ(plain.code, 0) << plain.err;
    EXPECT_EQ(shimmed.code, plain.code);
    EXPECT_EQ(shimmed.out, plain.out);
    EXPECT_EQ(shimmed.err, plain.err);
    EXPECT_GE(events_.size(), min_events) << "the shim did not run";
  }
  const std::vector<nlohmann::json>& events() const { return events_; }

 private:
  Outcome run(bool with_shim) {
    TempDir cwd;
    RunSpec spec;
    spec.cwd = cwd.path();
    std::vector<std::string> extra = extra_;
    extra.push_back("HOME=" + cwd.path());
    spec.deadline = std::chrono::seconds(180);
    if (!setup_.empty()) {
      RunSpec s = spec;
      s.env = base_env(extra);
      EXPECT_EQ(run_program({"/bin/bash", "-c", setup_}, s).exit_code(), 0);
    }
    std::unique_ptr<ShimSession> session;
    if (with_shim) {
      session = std::make_unique<ShimSession>();
      spec.env = session->env(extra);
    } else {
      spec.env = base_env(extra);
    }
    RunResult r = run_program(argv_, spec);
    EXPECT_FALSE(r.timed_out) << argv_[0];
    if (session) {
      events_ = session->events();
    }
    return {r.exit_code(), r.out, r.err};
  }

  std::vector<std::string> argv_;
  std::vector<std::string> extra_;
  std::string setup_;
  std::vector<nlohmann::json> events_;
};

TEST(ShimTransparency, BashScript) {
  Twice t({"/bin/bash", "-c",
           "set -e; x=$(echo hi | tr a-z A-Z); echo $x; for i in 1 2 3; do echo $i > f$i; done; "
           "cat f1 f2 f3 | sort -r; ls; (exec 3>g; echo three >&3); cat g; "
           "printf '%s\\n' \"$(wc -l < /etc/passwd)\" >/dev/null; echo err >&2; exit 0"});
  t.check(5);
}

TEST(ShimTransparency, Python) {
  CORDON_REQUIRE(access("/usr/bin/python3", X_OK) == 0, "/usr/bin/python3");
  Twice t(
      {"/usr/bin/python3", "-c",
       "import json, os, socket, subprocess, threading\n"
       "open('a.txt', 'w').write('x' * 100)\n"
       "print(len(open('a.txt').read()))\n"
       "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout, end='')\n"
       "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n"
       "def serve():\n"
       "    c, _ = srv.accept(); c.sendall(c.recv(100).upper()); c.close()\n"
       "th = threading.Thread(target=serve); th.start()\n"
       "c = socket.create_connection(srv.getsockname()); c.sendall(b'ping'); print(c.recv(100)); "
       "th.join()\n"
       "print(sorted(os.listdir('.')))\n"
       "print(json.dumps({'fds_ok': os.open('/dev/null', os.O_RDONLY) < 100}))\n"});
  t.check(3);
  EXPECT_FALSE(of_kind(t.events(), "net.listen").empty());
}

TEST(ShimTransparency, GitInitAndCommit) {
  Twice t(
      {"/bin/bash", "-c",
       "git init -q -b main repo && cd repo && echo hello > a.txt && mkdir d && echo x > d/b && "
       "git add -A && git commit -q -m first && echo more >> a.txt && git commit -q -am second && "
       "git log --format='%H %s' && git status --short && git show --stat HEAD | tail -3"},
      {"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=T",
       "GIT_COMMITTER_EMAIL=t@example.test", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
       "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z", "GIT_CONFIG_NOSYSTEM=1"});
  t.check(5);
}

TEST(ShimTransparency, CurlToLoopbackServer) {
  // Two servers with identical replies, one per run.
  const std::string reply =
      "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n";
  LoopbackServer a(1, reply, true), b(1, reply, true);
  // The port differs between runs, so run curl by hand with a script that hides it.
  std::string script = "curl -sS -i \"http://127.0.0.1:$PORT/x\"";
  RunSpec plain;
  plain.env = base_env({"PORT=" + std::to_string(a.port())});
  RunResult p = run_program({"/bin/bash", "-c", script}, plain);
  ShimSession session;
  RunSpec shimmed;
  shimmed.env = session.env({"PORT=" + std::to_string(b.port())});
  RunResult s = run_program({"/bin/bash", "-c", script}, shimmed);
  EXPECT_EQ(p.exit_code(), 0) << p.err;
  EXPECT_EQ(s.exit_code(), 0) << s.err;
  EXPECT_EQ(s.out, p.out);
  EXPECT_EQ(s.err, p.err);
  EXPECT_NE(p.out.find("hello"), std::string::npos);
  bool seen = false;
  for (const auto& e : of_kind(session.events(), "net.connect")) {
    if (e["remote"] == "127.0.0.1:" + std::to_string(b.port())) {
      seen = true;
      EXPECT_EQ(e["exe"], "/usr/bin/curl");
      EXPECT_EQ(e["argv"][0], "curl");
      int local_port = std::stoi(e["local"].get<std::string>().substr(10));
      EXPECT_EQ(b.seen().count(local_port), 1u) << "local port not what the server saw";
    }
  }
  EXPECT_TRUE(seen);
}

TEST(ShimTransparency, MultithreadedProgram) {
  Twice t({shim_program("shim_mt_work")}, {"CORDON_SHIM_CONNECT_EVENTS=all"});
  t.check(10);
  EXPECT_EQ(of_kind(t.events(), "net.connect").size(), 8u * 20u);
  EXPECT_EQ(of_kind(t.events(), "net.dns").size(), 8u * 20u);
}

// By default a loopback destination is reported once per process (it never reaches the proxy, so
// the join does not need each connect): 160 connects from 8 threads, one record.
TEST(ShimTransparency, LoopbackConnectsAreReportedOncePerDestinationByDefault) {
  Twice t({shim_program("shim_mt_work")});
  t.check(10);
  EXPECT_EQ(of_kind(t.events(), "net.connect").size(), 1u);
  EXPECT_EQ(of_kind(t.events(), "net.dns").size(), 8u * 20u);
}

TEST(ShimTransparency, ProgramThatClosesEveryFdAndReusesOurs) {
  Twice t({shim_program("shim_close_all")}, {"CORDON_SHIM_CONNECT_EVENTS=all"});
  t.check(2);
  // After the program took the shim's descriptor number, the shim reconnected on its own fd.
  size_t later = 0;
  for (const auto& e : of_kind(t.events(), "net.connect")) {
    if (e["remote"] == "127.0.0.1:7002") {
      ++later;
    }
  }
  EXPECT_EQ(later, 100u);
}

TEST(ShimTransparency, ErrnoIsPreservedOnSuccessAndFailure) {
  Twice t({shim_program("shim_errno_check")}, {"CORDON_SHIM_CONNECT_EVENTS=all"});
  t.check(5);
  auto connects = of_kind(t.events(), "net.connect");
  ASSERT_EQ(connects.size(), 3u);
  EXPECT_FALSE(connects[0].contains("errno"));
  EXPECT_EQ(connects[1]["errno"], 115);  // EINPROGRESS
  EXPECT_EQ(connects[2]["errno"], 111);  // ECONNREFUSED
  EXPECT_EQ(of_kind(t.events(), "net.listen").size(), 1u);
  EXPECT_EQ(of_kind(t.events(), "net.bind").size(), 1u);
}

TEST(ShimTransparency, SignalHandlerCallingHookedFunctions) {
  Twice t({shim_program("shim_signal_open")}, {"CORDON_SHIM_FS_EVENTS=all"});
  t.check(100);
}

TEST(ShimTransparency, Node) {
  // .ci/setup installs nodejs; elsewhere the test skips (and fails in CI's strict root run).
  CORDON_REQUIRE(access("/usr/bin/node", X_OK) == 0, "node (apt-get install nodejs)");
  Twice t({"/usr/bin/node", "-e",
           "const fs=require('fs'),net=require('net'),cp=require('child_process');"
           "fs.writeFileSync('n.txt','node');console.log(fs.readFileSync('n.txt','utf8'));"
           "console.log(cp.execSync('echo child').toString().trim());"
           "const s=net.createServer(c=>{c.end('pong')}).listen(0,'127.0.0.1',()=>{"
           "const c=net.connect(s.address().port,'127.0.0.1');let d='';"
           "c.on('data',x=>d+=x);c.on('end',()=>{console.log(d);s.close()})});"});
  t.check(2);
  EXPECT_FALSE(of_kind(t.events(), "net.connect").empty()) << "node's connect was not seen";
}

TEST(ShimTransparency, GoProgramUsingCgo) {
  // .ci/setup installs golang-go; elsewhere the test skips (and fails in CI's strict root run).
  CORDON_REQUIRE(access("/usr/bin/go", X_OK) == 0, "go (apt-get install golang-go)");
  TempDir build;
  RunSpec spec;
  spec.cwd = build.path();
  spec.deadline = std::chrono::seconds(300);
  spec.env = base_env({"CGO_ENABLED=1", "GOFLAGS=-mod=mod", "GO111MODULE=off",
                       "GOCACHE=" + build.path() + "/cache", "HOME=" + build.path()});
  RunResult b = run_program({"/bin/bash", "-c",
                             "cp " + source_path("tests/preload_shim/programs/cgo_main.go") +
                                 " main.go && go build -o cgo_prog main.go"},
                            spec);
  ASSERT_EQ(b.exit_code(), 0) << b.err;
  RunResult ldd = run_program({"ldd", build / "cgo_prog"});
  ASSERT_NE(ldd.out.find("libc.so"), std::string::npos) << "not dynamically linked: " << ldd.out;
  Twice t({build / "cgo_prog"});
  t.check(1);
  // Go's runtime makes its own syscalls; the shim sees the process and what goes through libc.
  EXPECT_FALSE(of_kind(t.events(), "proc.start").empty());
}

}  // namespace
}  // namespace cordon::testing
