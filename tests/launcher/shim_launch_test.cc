// The preload shim inside `cordon run`: installed through the sandbox's /etc/ld.so.preload, events
// in the session's events.jsonl, and programs behaving exactly as they do without it.
#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

using nlohmann::json;

std::string state_dir(SandboxFixture& f) {
  for (const auto& kv : f.env()) {
    if (kv.rfind("CORDON_STATE_DIR=", 0) == 0) {
      return kv.substr(17);
    }
  }
  return {};
}

// Every event of the fixture's only (or newest) session.
std::vector<json> session_events(SandboxFixture& f) {
  std::string root = state_dir(f) + "/sessions";
  std::string newest;
  if (DIR* d = ::opendir(root.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n > newest) {
        newest = n;
      }
    }
    ::closedir(d);
  }
  std::vector<json> out;
  std::ifstream in(root + "/" + newest + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) {
      out.push_back(j);
    }
  }
  return out;
}

std::vector<json> shim_events(SandboxFixture& f, const std::string& kind) {
  std::vector<json> out;
  for (auto& e : session_events(f)) {
    if (e.value("source", "") == "shim" && e.value("kind", "") == kind) {
      out.push_back(e);
    }
  }
  return out;
}

// Runs `script` in the sandbox twice, without and then with the shim; returns {on, off}.
std::pair<RunResult, RunResult> run_both(SandboxFixture& f, const std::string& script,
                                         std::vector<std::string> flags = {}) {
  f.env().push_back("CORDON_SHIM=off");
  RunResult off = f.sh(script, flags);
  f.env().pop_back();
  // Session ids sort by second only: drop the unshimmed session so the next one is the newest.
  run_program({"/bin/sh", "-c", "rm -rf " + state_dir(f) + "/sessions/*"});
  RunResult on = f.sh(script, flags);
  return {on, off};
}

std::string copy_program(SandboxFixture& f, const std::string& name) {
  std::string dst = f.ws() + "/" + name;
  RunResult r = run_program({"cp", build_path("tests/preload_shim/" + name), dst});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return dst;
}

// Compiles a C program into the workspace with the host's gcc.
std::string compile(SandboxFixture& f, const std::string& name, const std::string& source,
                    std::vector<std::string> extra = {}) {
  std::string src = f.home() + "/" + name + ".c";
  write_text(src, source);
  std::vector<std::string> argv = {"gcc", "-O1", "-o", f.ws() + "/" + name, src};
  argv.insert(argv.end(), extra.begin(), extra.end());
  RunResult r = run_program(argv);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return f.ws() + "/" + name;
}

TEST(ShimLaunch, ScrubbedEnvironmentKeepsTheShimAndEventsCarryIdentity) {
  SandboxFixture f;
  // env -i clears LD_PRELOAD and every CORDON_* variable: ld.so.preload and the default socket
  // path must still bring the child's events in.
  RunResult r = f.sh("cat /etc/ld.so.preload; env -i /bin/cat /etc/hostname");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "/run/cordon/libcordon_preload.so\ncordon\n");
  bool found = false;
  for (const auto& e : shim_events(f, "proc.start")) {
    if (e.value("exe", "") == "/usr/bin/cat" && e["argv"] == json({"/bin/cat", "/etc/hostname"})) {
      found = true;
      // pid/ppid are the collector's reading of /proc; a sender that exited before it looked
      // (cat is quick) keeps only its own claim of them, labelled as such. The kernel's word on
      // the sender (cred) is always there.
      const json pids = e.contains("pid") ? e : e.value("claimed", json::object());
      EXPECT_TRUE(pids.contains("pid") && pids.contains("ppid")) << e;
      EXPECT_GT(pids.value("pid", 0), 1) << e;
      ASSERT_TRUE(e.contains("cred")) << e;
      EXPECT_GT(e["cred"].value("pid", 0), 1) << e;
      EXPECT_EQ(e["cred"]["uid"].get<uid_t>(), SandboxFixture::expected_uid_default()) << e;
      EXPECT_FALSE(e.value("session", "").empty());
    }
  }
  EXPECT_TRUE(found) << "no proc.start for the env -i child";
  // The exec that started it is recorded by its parent (env), with the target's argv.
  bool exec_seen = false;
  for (const auto& e : shim_events(f, "proc.exec")) {
    exec_seen = exec_seen || e.value("target_argv", json()) == json({"/bin/cat", "/etc/hostname"});
  }
  EXPECT_TRUE(exec_seen);
}

TEST(ShimLaunch, OffSwitchLeavesLdSoPreloadEmptyAndRecordsNothing) {
  SandboxFixture f;
  f.env().push_back("CORDON_SHIM=off");
  RunResult r = f.sh("stat -c %s /etc/ld.so.preload; /bin/true");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "0\n");
  EXPECT_TRUE(shim_events(f, "proc.start").empty());
}

TEST(ShimLaunch, ToolsProduceIdenticalOutputWithAndWithoutTheShim) {
  SandboxFixture f;
  f.make_workspace_owned();
  write_text(f.ws() + "/srv.py",
             "import http.server, socketserver, sys\n"
             "class H(http.server.BaseHTTPRequestHandler):\n"
             "    def do_GET(self):\n"
             "        b = b'payload-' + self.path.encode()\n"
             "        self.send_response(200); self.send_header('Content-Length', str(len(b)))\n"
             "        self.end_headers(); self.wfile.write(b)\n"
             "    def log_message(self, *a): pass\n"
             "s = socketserver.TCPServer(('127.0.0.1', 0), H)\n"
             "open('port', 'w').write(str(s.server_address[1]))\n"
             "s.handle_request(); s.handle_request()\n");
  const std::string script =
      "set -e\n"
      "python3 -c 'import hashlib,os,subprocess; "
      "print(hashlib.sha256(b\"x\").hexdigest()[:16], os.path.exists(\"/etc/hostname\"), "
      "subprocess.run([\"echo\",\"sub\"],capture_output=True).stdout)'\n"
      "node -e 'const cp=require(\"child_process\"); console.log(\"node\", 6*7, "
      "cp.execSync(\"echo kid\").toString().trim(), require(\"fs\").existsSync(\"/etc\"))'\n"
      "rm -rf g && git init -q g && cd g && git -c user.name=a -c user.email=a@b commit -q "
      "--allow-empty -m first && git log --format=%s && git status --short | wc -l && cd ..\n"
      "rm -f port; python3 srv.py & for i in $(seq 100); do [ -s port ] && break; sleep 0.05; "
      "done\n"
      "curl -s http://127.0.0.1:$(cat port)/a; echo; curl -s http://localhost:$(cat port)/b; "
      "echo; wait\n"
      "bash -c 'f() { echo \"bash $1 $((6*7))\"; }; f arg; for x in 1 2; do echo $x; done | tac'\n";
  auto [on, off] = run_both(f, script);
  ASSERT_EQ(off.exit_code(), 0) << off.err << off.out;
  EXPECT_EQ(on.exit_code(), 0) << on.err;
  EXPECT_EQ(on.out, off.out);
  EXPECT_EQ(on.err, off.err);
  EXPECT_NE(off.out.find("payload-/a\npayload-/b"), std::string::npos) << off.out;
  EXPECT_NE(off.out.find("node 42 kid true"), std::string::npos) << off.out;
  // The shim really was in each of them.
  std::set<std::string> exes;
  for (const auto& e : shim_events(f, "proc.start")) {
    exes.insert(e.value("exe", ""));
  }
  for (const char* exe :
       {"/usr/bin/python3.11", "/usr/bin/node", "/usr/bin/git", "/usr/bin/curl", "/usr/bin/bash"}) {
    EXPECT_TRUE(exes.count(exe)) << exe << " not seen by the shim";
  }
  bool curl_connect = false;
  for (const auto& e : shim_events(f, "net.connect")) {
    curl_connect = curl_connect || e.value("exe", "") == "/usr/bin/curl";
  }
  EXPECT_TRUE(curl_connect);
}

TEST(ShimLaunch, ThreadsForkVforkSignalsAndFdClosingAreUnchanged) {
  SandboxFixture f;
  f.make_workspace_owned();
  copy_program(f, "shim_mt_work");
  copy_program(f, "shim_close_all");
  copy_program(f, "shim_signal_open");
  compile(f, "forks",
          "#define _GNU_SOURCE\n#include <stdio.h>\n#include <unistd.h>\n#include <sys/wait.h>\n"
          "int main(void) {\n"
          "  setvbuf(stdout, NULL, _IONBF, 0);\n"
          "  pid_t p = fork();\n"
          "  if (p == 0) { execl(\"/bin/echo\", \"echo\", \"execl\", (char*)0); _exit(127); }\n"
          "  waitpid(p, NULL, 0);\n"
          "  p = vfork();\n"
          "  if (p == 0) { execlp(\"echo\", \"echo\", \"execlp\", (char*)0); _exit(127); }\n"
          "  waitpid(p, NULL, 0);\n"
          "  char* env[] = {\"X=execle\", 0};\n"
          "  p = fork();\n"
          "  if (p == 0) { execle(\"/bin/sh\", \"sh\", \"-c\", \"echo $X\", (char*)0, env); "
          "_exit(127); }\n"
          "  waitpid(p, NULL, 0);\n"
          "  p = vfork();\n"
          "  if (p == 0) { _exit(7); }\n"
          "  int st = 0; waitpid(p, &st, 0);\n"
          "  printf(\"vfork exit %d\\n\", WEXITSTATUS(st));\n"
          "  return 0;\n"
          "}\n");
  const std::string script = "./shim_mt_work; ./shim_close_all; ./shim_signal_open; ./forks";
  auto [on, off] = run_both(f, script);
  ASSERT_EQ(off.exit_code(), 0) << off.err;
  EXPECT_EQ(on.exit_code(), 0) << on.err;
  EXPECT_EQ(on.out, off.out);
  EXPECT_EQ(on.err, off.err);
  EXPECT_NE(off.out.find("execl\nexeclp\nexecle\nvfork exit 7\n"), std::string::npos) << off.out;
  // execl, execlp and execle each reached the shim with the target's argv.
  std::set<json> targets;
  for (const auto& e : shim_events(f, "proc.exec")) {
    targets.insert(e.value("target_argv", json()));
  }
  EXPECT_TRUE(targets.count(json({"echo", "execl"})));
  EXPECT_TRUE(targets.count(json({"echo", "execlp"})));
  EXPECT_TRUE(targets.count(json({"sh", "-c", "echo $X"})));
}

TEST(ShimLaunch, GoProgramUsingCgo) {
  SandboxFixture f;
  f.make_workspace_owned();
  std::string gohome = f.home() + "/go";
  RunResult b = run_program(
      {"/bin/sh", "-c",
       "cd " + f.home() + " && cp " + source_path("tests/preload_shim/programs/cgo_main.go") +
           " main.go && go mod init cgoprog >/dev/null 2>&1; CGO_ENABLED=1 go build -o " + f.ws() +
           "/cgo_prog main.go"},
      RunSpec{
          .env = std::vector<std::string>{"PATH=/usr/lib/go/bin:/usr/bin:/bin", "HOME=" + f.home(),
                                          "GOCACHE=" + gohome + "/cache", "GOPATH=" + gohome,
                                          "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local"},
          .deadline = std::chrono::seconds(240)});
  ASSERT_EQ(b.exit_code(), 0) << b.err << b.out;
  auto [on, off] = run_both(f, "./cgo_prog");
  ASSERT_EQ(off.exit_code(), 0) << off.err;
  EXPECT_EQ(on.exit_code(), 0) << on.err;
  EXPECT_EQ(on.out, off.out);
  EXPECT_NE(off.out.find("read=\"hello from server\" file=true child=\"child\" c=42"),
            std::string::npos)
      << off.out;
  bool seen = false;
  for (const auto& e : shim_events(f, "proc.start")) {
    seen = seen || e.value("exe", "").find("cgo_prog") != std::string::npos;
  }
  EXPECT_TRUE(seen) << "the cgo binary links libc dynamically: the shim must load in it; "
                    << run_program({"file", f.ws() + "/cgo_prog"}).out << on.err;
}

// Many processes connect at once to a server in the sandbox that records each peer's port and the
// pid the client claims; every shim net.connect record must name the process that made it. The
// server plays the proxy's part of the join: (local address of the client) -> process.
TEST(ShimLaunch, AttributionHoldsWithManyConcurrentConnections) {
  SandboxFixture f;
  f.make_workspace_owned();
  constexpr int kClients = 24;
  write_text(f.ws() + "/srv.py",
             "import socket, sys\n"
             "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(64)\n"
             "open('port', 'w').write(str(s.getsockname()[1]))\n"
             "out = []\n"
             "for _ in range(int(sys.argv[1])):\n"
             "    c, peer = s.accept(); out.append('%d %s' % (peer[1], c.recv(32).decode()))\n"
             "    c.close()\n"
             "open('seen', 'w').write('\\n'.join(out) + '\\n')\n");
  write_text(f.ws() + "/cli.py",
             "import socket, os, sys\n"
             "c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
             "c.sendall(str(os.getpid()).encode()); c.close()\n");
  std::string script = "python3 srv.py " + std::to_string(kClients) +
                       " & for i in $(seq 100); do [ -s port ] && break; sleep 0.05; done; "
                       "P=$(cat port); for i in $(seq " +
                       std::to_string(kClients) + "); do python3 cli.py $P & done; wait; cat seen";
  RunResult r = f.sh(script);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::map<int, int> pid_by_port;
  std::istringstream in(r.out);
  for (int port, pid; in >> port >> pid;) {
    pid_by_port[port] = pid;
  }
  ASSERT_EQ(pid_by_port.size(), static_cast<size_t>(kClients)) << r.out;
  int matched = 0;
  for (const auto& e : shim_events(f, "net.connect")) {
    std::string local = e.value("local", "");
    size_t colon = local.rfind(':');
    if (colon == std::string::npos || e.value("argv", json()).size() < 2 ||
        e["argv"][1] != "cli.py") {
      continue;
    }
    int port = std::stoi(local.substr(colon + 1));
    auto it = pid_by_port.find(port);
    ASSERT_NE(it, pid_by_port.end()) << "a connect from a port the server never saw: " << e;
    EXPECT_EQ(e["pid"].get<int>(), it->second) << e;
    ++matched;
  }
  EXPECT_EQ(matched, kClients);
}

}  // namespace
}  // namespace cordon::testing
