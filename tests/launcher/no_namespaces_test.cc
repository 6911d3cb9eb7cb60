// `cordon run --no-namespaces`: labelled advisory, a disallowed connect from a dynamic client is
// refused by the shim and logged, an allowed host is reached through cordon-netproxy.
#include "launcher/no_namespaces.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "launcher/sandbox/landlock.h"
#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/sink_netns.h"

namespace cordon::testing {
namespace {

using nlohmann::json;

// A loopback HTTP server answering every request with a fixed body; bounded in time.
class Upstream {
 public:
  Upstream() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      timeval tv{0, 200000};
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      for (int i = 0; i < 300 && !stop_; ++i) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
          continue;
        }
        ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char buf[4096];
        (void)!::recv(c, buf, sizeof buf, 0);
        std::string body = "upstream-ok";
        std::string resp = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                           "\r\nConnection: close\r\n\r\n" + body;
        (void)!::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
        ::close(c);
        ++served_;
      }
    });
  }
  ~Upstream() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int served() const { return served_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> served_{0};
  std::thread thread_;
};

std::vector<json> newest_session_events(SandboxFixture& f) {
  std::string root;
  for (const auto& kv : f.env()) {
    if (kv.rfind("CORDON_STATE_DIR=", 0) == 0) root = kv.substr(17) + "/sessions";
  }
  std::string newest;
  if (DIR* d = ::opendir(root.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n > newest) newest = n;
    }
    ::closedir(d);
  }
  std::vector<json> out;
  std::ifstream in(root + "/" + newest + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

TEST(NoNamespaces, IsLabelledAdvisoryInHelp) {
  RunResult r = run_program({cordon_bin(), "run", "--help"});
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_NE(r.out.find("--no-namespaces"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ADVISORY"), std::string::npos) << r.out;
}

TEST(NoNamespaces, RefusesDisallowedConnectAndReachesAllowedHostThroughTheProxy) {
  CORDON_REQUIRE_ROOT();  // the sink namespace that catches a leak needs root
  SinkNetns sink;
  ASSERT_TRUE(sink.ok());
  Upstream up;
  ASSERT_NE(up.port(), 0);
  SandboxFixture f;
  std::string port = std::to_string(up.port());
  write_text(f.home() + "/p.json", R"({"version": 1, "network": {"allow": ["upstream.test:)" +
                                       port + R"("], "resolve": {"upstream.test": "127.0.0.1"}}})");
  RunResult r = f.run(
      {"--no-namespaces", "-q", "--policy", f.home() + "/p.json"},
      {"/bin/sh", "-c",
       "curl -s --max-time 10 http://upstream.test:" + port +
           "/x; echo; "
           "python3 -c 'import socket\ntry:\n  socket.create_connection((\"198.51.100.7\", 80), "
           "timeout=3); print(\"connected\")\nexcept OSError as e: print(\"refused\", e.errno)'; "
           "curl -s -o /dev/null -w '%{http_code}\\n' --max-time 10 http://other.test:" +
           port + "/"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "upstream-ok\nrefused 13\n403\n") << r.err;
  EXPECT_NE(r.err.find("ADVISORY"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cordon: connect to 198.51.100.7:80 refused (not in network.allow)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(up.served(), 1);  // only the allowed request reached it
  EXPECT_EQ(sink.hits(), 0);
  bool shim_deny = false, proxy_allow = false, proxy_refused = false;
  for (const auto& e : newest_session_events(f)) {
    std::string src = e.value("source", ""), kind = e.value("kind", "");
    if (src == "shim" && kind == "net.connect" && e.value("decision", "") == "deny" &&
        e.value("remote", "") == "198.51.100.7:80") {
      shim_deny = true;
      EXPECT_EQ(e.value("exe", ""), "/usr/bin/python3.11") << e;
      EXPECT_TRUE(e.contains("pid")) << e;
    }
    if (src == "netproxy" && kind == "net.connect" && e.value("name", "") == "upstream.test") {
      proxy_allow = true;
    }
    if (src == "netproxy" && kind == "net.refused" && e.value("name", "") == "other.test") {
      proxy_refused = true;
    }
  }
  EXPECT_TRUE(shim_deny);
  EXPECT_TRUE(proxy_allow);
  EXPECT_TRUE(proxy_refused);
}

// Without a mount namespace nothing hides the host's files: Landlock grants reads only beneath the
// system directories, the workspace, /tmp and the policy's paths.
TEST(NoNamespaces, LandlockKeepsTheProgramToItsPlacesAndTheCowWorkspaceReadOnly) {
  CORDON_REQUIRE(launcher::landlock_abi() > 0, "the kernel has no Landlock");
  CORDON_REQUIRE_ROOT();  // a world-readable directory outside /tmp and $HOME to aim at
  std::string dir = "/srv/cordon-nn-" + std::to_string(::getpid());
  ::mkdir("/srv", 0755);
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  write_text(dir + "/secret", "s3cret", 0644);
  SandboxFixture f;
  f.make_workspace_owned();
  RunResult r = f.run({"--no-namespaces", "-q", "--mode", "cow"},
                      {"/bin/sh", "-c",
                       "cat " + dir +
                           "/secret; echo cat=$?; echo x > ws-file; echo w=$?; "
                           "echo t > $TMPDIR/t && rm $TMPDIR/t && echo tmp-ok; "
                           "echo t > /tmp/cordon-nn-$$; echo slash-tmp=$?"});
  ::unlink((dir + "/secret").c_str());
  ::rmdir(dir.c_str());
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "cat=1\nw=2\ntmp-ok\nslash-tmp=2\n") << r.err;
  EXPECT_EQ(r.out.find("s3cret"), std::string::npos);
  EXPECT_NE(r.err.find("copy-on-write needs a mount namespace"), std::string::npos) << r.err;
}

// Landlock cannot say "the workspace except **/.env": the shim decides filesystem.deny on every
// hooked open of a dynamically linked program, however the path is spelled. A static binary is not
// stopped: that is the stated limit of the advisory mode, asserted here so it stays documented.
TEST(NoNamespaces, ShimRefusesDeniedWorkspaceFilesToDynamicProgramsButNotToStaticOnes) {
  SandboxFixture f;
  f.make_workspace_owned();
  char buf[PATH_MAX];
  ASSERT_NE(::realpath(f.ws().c_str(), buf), nullptr);
  const std::string ws = buf;
  write_text(ws + "/.env", "SECRET=1\n");
  write_text(ws + "/ok.txt", "hello\n");
  ASSERT_EQ(::mkdir((ws + "/x").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(".env", (ws + "/link-env").c_str()), 0);
  // A static reader/writer: `sread FILE` prints FILE, `sread FILE TEXT` creates it.
  write_text(f.home() + "/sread.c",
             "#include <stdio.h>\nint main(int c, char** v) {\n"
             "  FILE* f = fopen(v[1], c > 2 ? \"w\" : \"r\");\n  if (!f) return 1;\n"
             "  if (c > 2) { fputs(v[2], f); fclose(f); return 0; }\n"
             "  char b[64]; while (fgets(b, sizeof b, f)) fputs(b, stdout);\n  return 0;\n}\n");
  RunResult cc = run_program({"gcc", "-static", "-O1", "-o", ws + "/sread", f.home() + "/sread.c"});
  ASSERT_EQ(cc.exit_code(), 0) << cc.err;
  write_text(f.home() + "/p.json",
             R"({"version": 1, "filesystem": {"deny": ["**/.env", "**/*.secret"]}})");
  RunResult r = f.run(
      {"--no-namespaces", "-q", "--mode", "rw", "--policy", f.home() + "/p.json"},
      {"/bin/sh", "-c",
       "cat .env; echo direct=$?; cat " + ws +
           "/.env; echo abs=$?; cat ./x/../.env; echo dotdot=$?; cat .//.env; echo slashes=$?; "
           "cat link-env; echo link=$?; "
           "python3 -c 'import os\nd = os.open(\"x\", os.O_RDONLY)\ntry:\n  os.open(\"../.env\", "
           "os.O_RDONLY, dir_fd=d); print(\"dirfd opened\")\nexcept OSError as e: print(\"dirfd\", "
           "e.errno)'; "
           "./sread later.secret created; echo static-create=$?; cat later.secret; echo later=$?; "
           "echo more > other.secret; echo shell-create=$?; "
           "./sread .env; echo static-read=$?; cat ok.txt"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out,
            "direct=1\nabs=1\ndotdot=1\nslashes=1\nlink=1\ndirfd 13\nstatic-create=0\n"
            "later=1\nshell-create=2\nSECRET=1\nstatic-read=0\nhello\n")
      << r.err;
  EXPECT_NE(r.err.find("cordon: read of " + ws + "/.env refused (filesystem.deny[0]: **/.env)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cordon: read of " + ws + "/later.secret refused (filesystem.deny[1]"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cordon: create of " + ws + "/other.secret refused"), std::string::npos)
      << r.err;
  struct stat st {};
  EXPECT_NE(::lstat((ws + "/other.secret").c_str(), &st), 0);

  bool direct = false, link = false, dirfd = false, later = false;
  for (const auto& e : newest_session_events(f)) {
    if (e.value("source", "") != "shim" || e.value("kind", "") != "fs.refused") {
      continue;
    }
    EXPECT_EQ(e.value("decision", ""), "deny") << e;
    // Who did it: checked by the collector, or only claimed when the process (a cat lives about
    // a millisecond) was gone before it could be checked.
    const json& who = e.contains("claimed") ? e["claimed"] : e;
    EXPECT_NE(who.value("exe", ""), ws + "/sread") << "a static binary cannot be seen: " << e;
    std::string req = e.value("requested", "");
    if (req == ".env" && who.value("exe", "") == "/usr/bin/cat") {
      direct = true;
      EXPECT_EQ(e.value("path", ""), ".env") << e;
      EXPECT_EQ(e.value("rule", ""), "filesystem.deny[0]") << e;
      EXPECT_EQ(who["argv"], json::array({"cat", ".env"})) << e;
      EXPECT_TRUE(who.contains("pid")) << e;
    }
    if (req == "link-env") {
      link = true;
      EXPECT_EQ(e.value("path", ""), ".env") << e;
      EXPECT_EQ(e.value("host_path", ""), ws + "/.env") << e;
    }
    if (req == "../.env") {
      dirfd = true;
      EXPECT_EQ(who.value("exe", ""), "/usr/bin/python3.11") << e;
      EXPECT_EQ(e.value("path", ""), ".env") << e;
    }
    if (req == "later.secret") {
      later = true;
      EXPECT_EQ(e.value("rule", ""), "filesystem.deny[1]") << e;
    }
  }
  EXPECT_TRUE(direct);
  EXPECT_TRUE(link);
  EXPECT_TRUE(dirfd);
  EXPECT_TRUE(later);
}

// The default policy's secrets list applies too, and cow (read-only without namespaces) refuses
// writes in the shim with EROFS, as cordon-fs does in ro mode.
TEST(NoNamespaces, DefaultDenyListAndReadOnlyWorkspaceApplyInTheShim) {
  SandboxFixture f;
  f.make_workspace_owned();
  write_text(f.ws() + "/key.pem", "-----BEGIN-----\n");
  write_text(f.ws() + "/ok.txt", "hello\n");
  RunResult r = f.run({"--no-namespaces", "-q", "--mode", "cow"},
                      {"python3", "-c",
                       "import errno\n"
                       "for p, m in (('key.pem', 'r'), ('ok.txt', 'r'), ('new.txt', 'w')):\n"
                       "  try:\n    open(p, m).close(); print(p, 'ok')\n"
                       "  except OSError as e: print(p, errno.errorcode[e.errno])\n"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "key.pem EACCES\nok.txt ok\nnew.txt EROFS\n") << r.err;
  EXPECT_NE(r.err.find("refused (filesystem.mode: the workspace is read-only)"), std::string::npos)
      << r.err;
}

// What cordon hands the shim: the patterns in policy order (the shim's rule index is the policy's),
// refused at start rather than cut when they cannot be handed over whole.
TEST(NoNamespaces, ShimFileRulesAreHandedOverWholeOrNotAtAll) {
  auto pat = [](const std::string& t) {
    return *policy::PathPattern::parse(t, "/home/u", nullptr);
  };
  policy::FilesystemPolicy fs;
  fs.deny = {pat("**/.env"), pat("~/.ssh")};
  fs.deny_write = {pat("locked.txt")};
  fs.protect = {};
  auto enc = launcher::shim_fs_rules(fs, "/w s", false);
  ASSERT_TRUE(enc.ok()) << enc.error().to_string();
  EXPECT_EQ(*enc,
            "cordon-fs-rules 1\nworkspace /w s\nmode ro\nstyle eacces\ndeny r **/.env\n"
            "deny a /home/u/.ssh\ndeny_write r locked.txt\n");
  fs.deny.push_back(pat("a\nb"));
  auto nl = launcher::shim_fs_rules(fs, "/w", true);
  ASSERT_FALSE(nl.ok());
  EXPECT_NE(nl.error().to_string().find("filesystem.deny[2]"), std::string::npos)
      << nl.error().to_string();
  fs.deny.pop_back();
  for (int i = 0; i < 600; ++i) fs.protect.push_back(pat("p" + std::to_string(i)));
  auto big = launcher::shim_fs_rules(fs, "/w", true);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().to_string().find("at most 512"), std::string::npos)
      << big.error().to_string();
}

// Without namespaces the program is supervised as a sandbox's init is: the same exit statuses
// (timeout(1)'s 124, 127 for a missing program, 128+N for a signal), the same timeout text.
TEST(NoNamespaces, EndsWithTheExitStatusesOfANamespacedRun) {
  SandboxFixture f;
  auto code = [&](std::vector<std::string> flags, const std::string& script) {
    flags.insert(flags.begin(), {"--no-namespaces", "-q"});
    return f.run(flags, {"/bin/sh", "-c", script});
  };
  EXPECT_EQ(code({}, "exit 7").exit_code(), 7);
  EXPECT_EQ(code({}, "kill -KILL $$").exit_code(), 128 + SIGKILL);
  RunResult missing = f.run({"--no-namespaces", "-q"}, {"/nonexistent/program"});
  EXPECT_EQ(missing.exit_code(), 127) << missing.err;
  RunResult late = code({"--timeout", "1s"}, "sleep 30");
  EXPECT_EQ(late.exit_code(), 124) << late.err;
  EXPECT_NE(late.err.find("timeout (1s) reached"), std::string::npos) << late.err;
  // What the program leaves running ends with the run, as it would with its pid namespace, even
  // rootless where no cgroup holds it and after setsid.
  RunResult bg = code({}, "sleep 60 >/dev/null 2>&1 & echo $!; setsid sh -c 'sleep 61 & echo $!'");
  std::istringstream pids(bg.out);
  int left = 0;
  for (pid_t pid; pids >> pid;) {
    ++left;
    if (::kill(pid, 0) == 0 || errno != ESRCH) {
      ADD_FAILURE() << "pid " << pid << " outlived the run";
      ::kill(pid, SIGKILL);
    }
  }
  EXPECT_EQ(left, 2) << bg.out << bg.err;
}

// SIGTERM and SIGHUP sent to cordon reach the program (which may end as it likes); cordon itself
// survives them to write the record, and exits with the program's status.
TEST(NoNamespaces, ForwardsSignalsToTheProgram) {
  for (int sig : {SIGTERM, SIGHUP}) {
    SandboxFixture f;
    f.make_workspace_owned();
    std::string name = sig == SIGTERM ? "TERM" : "HUP";
    RunResult r;
    std::thread t([&] {
      r = f.run({"--no-namespaces", "-q", "--mode", "rw"},
                {"/bin/sh", "-c",
                 "trap 'echo got-" + name + "; exit 3' " + name +
                     "; echo $PPID > ppid.tmp && mv ppid.tmp ppid; "
                     "for i in $(seq 300); do sleep 0.1; done; echo not-signalled"});
    });
    pid_t cordon = 0;
    for (int i = 0; i < 200 && cordon == 0; ++i) {
      std::ifstream in(f.ws() + "/ppid");
      if (!(in >> cordon)) {
        cordon = 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (cordon > 0) {
      ::kill(cordon, sig);
    }
    t.join();
    ASSERT_GT(cordon, 0) << r.err;
    EXPECT_EQ(r.exit_code(), 3) << name << ": " << r.err;
    EXPECT_EQ(r.out, "got-" + name + "\n") << r.err;
  }
}

// Credentials need the sandbox (a placeholder in its environment, TLS inspection to put the
// value back): the advisory mode refuses them before anything runs, never passing the value on.
TEST(NoNamespaces, RefusesCredentialsBeforeAnythingRuns) {
  SandboxFixture f;
  write_text(f.home() + "/p.json",
             R"({"network": {"allow": ["api.test:443"], "credentials": [{"env": "NN_TOKEN",
                 "hosts": ["api.test"]}]}})");
  RunSpec spec;
  f.env().push_back("NN_TOKEN=ghp_nn0000000000000000000000000000000000");
  RunResult r = f.run({"--no-namespaces", "-q", "--policy", f.home() + "/p.json"},
                      {"/bin/sh", "-c", "echo ran; echo $NN_TOKEN"}, spec);
  EXPECT_EQ(r.exit_code(), 125) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("network.credentials: --no-namespaces cannot keep"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace cordon::testing
