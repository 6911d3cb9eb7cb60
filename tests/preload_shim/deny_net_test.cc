// CORDON_SHIM_DENY_NET: the no-namespace mode's advisory refusal. The test builds its own sink:
// a network namespace where 198.51.100.1 is a local address with a listener, so a connect that
// escaped the shim would be accepted there (and counted) instead of going anywhere.
#include <gtest/gtest.h>

#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

constexpr char kOrchestrator[] = R"PY(
import json, os, socket, subprocess, sys
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
subprocess.run(["ip", "addr", "add", "198.51.100.1/32", "dev", "lo"], check=True)
sink = socket.socket()
sink.bind(("198.51.100.1", 80))
sink.listen(16)
sink.setblocking(False)
client_env = json.loads(sys.argv[1])
r = subprocess.run(sys.argv[2:], env=client_env, capture_output=True, text=True, timeout=60)
# A loopback handshake completes inside connect(): whatever got through is queued now.
arrived = 0
while True:
    try:
        c, _ = sink.accept()
        arrived += 1
        c.close()
    except BlockingIOError:
        break
print(json.dumps({"rc": r.returncode, "out": r.stdout, "err": r.stderr, "arrived": arrived}))
)PY";

bool can_unshare_net() {
  RunResult r = run_program({"unshare", "--net", "--map-root-user", "true"});
  return r.exit_code() == 0;
}

nlohmann::json run_in_sink(const std::vector<std::string>& client_env,
                           const std::vector<std::string>& client_argv) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& kv : client_env) {
    auto eq = kv.find('=');
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::vector<std::string> argv = {"unshare", "--net",       "--map-root-user", "/usr/bin/python3",
                                   "-c",      kOrchestrator, env.dump()};
  argv.insert(argv.end(), client_argv.begin(), client_argv.end());
  RunSpec spec;
  spec.env = base_env();
  RunResult r = run_program(argv, spec);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return nlohmann::json::parse(r.out.empty() ? "{}" : r.out);
}

TEST(ShimDenyNet, RefusesDocumentationAddressBeforeAnythingLeaves) {
  CORDON_REQUIRE(can_unshare_net(), "unshare --net --map-root-user (user namespaces)");
  std::vector<std::string> client = {shim_program("shim_net_client"), "198.51.100.1", "80", "2"};

  // Control: without the shim the sink receives both connections, so the sink does catch leaks.
  auto control = run_in_sink(base_env(), client);
  ASSERT_EQ(control["arrived"], 2) << control.dump();
  EXPECT_EQ(control["out"], "connect: ok\nconnect: ok\n");

  ShimSession session;
  auto denied = run_in_sink(session.env({"CORDON_SHIM_DENY_NET=1"}), client);
  EXPECT_EQ(denied["arrived"], 0) << "a refused connect reached the sink: " << denied.dump();
  EXPECT_EQ(denied["out"],
            "connect: errno=13 (Permission denied)\nconnect: errno=13 (Permission denied)\n");
  // One line per destination, however often it is tried.
  EXPECT_EQ(denied["err"], "cordon: connect to 198.51.100.1:80 refused (not in network.allow)\n");

  auto evs = of_kind(session.events(), "net.connect");
  ASSERT_EQ(evs.size(), 2u);
  for (const auto& e : evs) {
    EXPECT_EQ(e["decision"], "deny");
    EXPECT_EQ(e["rule"], "network.allow");
    EXPECT_EQ(e["remote"], "198.51.100.1:80");
    EXPECT_EQ(e["errno"], 13);
    EXPECT_FALSE(e.contains("local")) << "refused before a socket address was bound";
  }
}

TEST(ShimDenyNet, AllowlistLiteralsAndLoopbackPass) {
  CORDON_REQUIRE(can_unshare_net(), "unshare --net --map-root-user (user namespaces)");
  ShimSession session;
  auto allowed = run_in_sink(session.env({"CORDON_SHIM_DENY_NET=1",
                                          "CORDON_SHIM_NET_ALLOW=203.0.113.9:443,198.51.100.1:80"}),
                             {shim_program("shim_net_client"), "198.51.100.1", "80", "1"});
  EXPECT_EQ(allowed["arrived"], 1) << allowed.dump();
  EXPECT_EQ(allowed["out"], "connect: ok\n");
  EXPECT_EQ(allowed["err"], "");

  // Same address, another port: not in the list.
  auto other_port =
      run_in_sink(session.env({"CORDON_SHIM_DENY_NET=1", "CORDON_SHIM_NET_ALLOW=198.51.100.1:80"}),
                  {shim_program("shim_net_client"), "198.51.100.1", "81", "1"});
  EXPECT_EQ(other_port["out"], "connect: errno=13 (Permission denied)\n");
  EXPECT_EQ(other_port["err"],
            "cordon: connect to 198.51.100.1:81 refused (not in network.allow)\n");

  // IPv6 documentation range, formatted per RFC 5952 in the message.
  auto v6 = run_in_sink(session.env({"CORDON_SHIM_DENY_NET=1"}),
                        {shim_program("shim_net_client"), "2001:db8::1", "443", "1"});
  EXPECT_EQ(v6["out"], "connect: errno=13 (Permission denied)\n");
  EXPECT_EQ(v6["err"], "cordon: connect to [2001:db8::1]:443 refused (not in network.allow)\n");

  auto evs = of_kind(session.events(), "net.connect");
  int allows = 0;
  for (const auto& e : evs) {
    if (e["remote"] == "198.51.100.1:80") {
      EXPECT_EQ(e["decision"], "allow");
      ++allows;
    }
  }
  EXPECT_EQ(allows, 1);
}

TEST(ShimDenyNet, LoopbackIsNeverRefused) {
  ShimSession session;
  RunSpec spec;
  spec.env = session.env({"CORDON_SHIM_DENY_NET=1"});
  // Nothing listens on port 1: the kernel's answer (ECONNREFUSED) proves the call went through.
  RunResult r = run_program({shim_program("shim_net_client"), "127.0.0.1", "1", "1"}, spec);
  EXPECT_EQ(r.out, "connect: errno=111 (Connection refused)\n");
  EXPECT_EQ(r.err, "");
}

}  // namespace
}  // namespace cordon::testing
