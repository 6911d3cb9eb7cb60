// Attribution: many processes connecting at once, each net.connect record names the right
// process (pid, exe, argv) and the local port the server actually saw.
#include <gtest/gtest.h>

#include <set>

#include "tests/preload_shim/loopback_server.h"
#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

constexpr int kClients = 20;
constexpr char kClientScript[] =
    "import os, socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "s.sendall(('%d %s\\n' % (os.getpid(), sys.argv[2])).encode())\n"
    "s.recv(16)\n"
    "s.close()\n";

TEST(ShimAttribution, ConcurrentPythonClientsAreEachAttributed) {
  CORDON_REQUIRE(access("/usr/bin/python3", X_OK) == 0, "/usr/bin/python3");
  LoopbackServer server(kClients, "bye\n");
  ASSERT_GT(server.port(), 0);
  ShimSession session;
  std::string script = "for i in $(seq 1 " + std::to_string(kClients) +
                       "); do /usr/bin/python3 -c \"$CLIENT\" " + std::to_string(server.port()) +
                       " client-$i & done; wait";
  RunSpec spec;
  spec.env = session.env({std::string("CLIENT=") + kClientScript});
  RunResult r = run_program({"/bin/bash", "-c", script}, spec);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  server.wait_done();

  // What the server saw: peer port -> "pid tag".
  std::map<int, std::pair<int, std::string>> by_pid;  // pid -> (peer port, tag)
  for (const auto& [port, line] : server.seen()) {
    auto sp = line.find(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    by_pid[std::stoi(line.substr(0, sp))] = {port, line.substr(sp + 1)};
  }
  ASSERT_EQ(by_pid.size(), static_cast<size_t>(kClients));

  auto evs = session.events();
  std::string remote = "127.0.0.1:" + std::to_string(server.port());
  std::set<int> attributed;
  for (const auto& e : of_kind(evs, "net.connect")) {
    if (e.value("remote", "") != remote) {
      continue;
    }
    ASSERT_TRUE(e.contains("pid")) << "a net.connect without the process's pid: " << e.dump();
    int pid = e["pid"];
    ASSERT_TRUE(by_pid.count(pid)) << "event for a pid the server never saw: " << e.dump();
    const auto& [peer_port, tag] = by_pid[pid];
    EXPECT_EQ(e["local"], "127.0.0.1:" + std::to_string(peer_port)) << e.dump();
    EXPECT_EQ(e["argv"], nlohmann::json::array({"/usr/bin/python3", "-c", kClientScript,
                                                std::to_string(server.port()), tag}))
        << e.dump();
    EXPECT_NE(e.value("exe", "").find("python3"), std::string::npos) << e.dump();
    EXPECT_EQ(e["cred"]["pid"], pid) << "self-reported pid differs from the kernel's";
    EXPECT_FALSE(e.contains("errno")) << e.dump();
    attributed.insert(pid);
  }
  EXPECT_EQ(attributed.size(), static_cast<size_t>(kClients));
  // Each client also announced itself with its argv, and bash's fork+exec was seen.
  int starts = 0;
  for (const auto& e : of_kind(evs, "proc.start")) {
    if (by_pid.count(e["pid"].get<int>())) {
      ++starts;
      EXPECT_EQ(e["shim_session"], "test-session");
    }
  }
  EXPECT_EQ(starts, kClients);
  EXPECT_EQ(session.collector().stats().malformed.load(), 0u);
  EXPECT_EQ(session.collector().stats().dropped.load(), 0u);
}

}  // namespace
}  // namespace cordon::testing
