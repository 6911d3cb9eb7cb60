// A process that writes its own records to the collector's socket, claiming to be someone else:
// every record still names the sender's real pid, exe and argv (read by cordon from the kernel),
// with the claims kept apart under "claimed", and a connect record takes its local address only
// from a socket the sender really holds, so a claim cannot steal another process's connection.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/preload_shim/loopback_server.h"
#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

// argv: socket path, victim's local address "ip:port", server port. Speaks the wire format
// (preload_shim/wire.h) itself; prints its pid and exe.
constexpr char kForger[] = R"(
import os, socket, struct, sys
path, victim, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def sockaddr(hostport):
    host, p = hostport.rsplit(':', 1)
    return struct.pack('<H', socket.AF_INET) + struct.pack('>H', int(p)) + socket.inet_aton(host) + bytes(8)
def field(tag, value):
    return struct.pack('<BBH', tag, 0, len(value)) + value
def msg(kind, fields, decision=0):
    body = b''.join(field(t, v) for t, v in fields)
    return struct.pack('<IBBBBIII', 0x31534443, 1, kind, decision, 0, 4242, 1, 0) + body
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
# The hello as the shim sends it, its own end of the connection attached: all a forger can do.
s.sendmsg([msg(9, [(1, b'/usr/bin/git'), (2, b'git'), (2, b'fetch'),
                   (23, struct.pack('<I', s.fileno()))])],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('i', s.fileno()))])
# The victim's connection claimed as ours, with nothing to show for it.
s.send(msg(3, [(6, sockaddr(victim)), (7, sockaddr('127.0.0.1:%d' % port))]))
# A connection of our own passed along, while claiming the victim's address for it.
own = socket.create_connection(('127.0.0.1', port))
s.sendmsg([msg(3, [(6, sockaddr(victim)), (7, sockaddr('127.0.0.1:%d' % port))])],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('i', own.fileno()))])
s.send(msg(2, [(4, b'/usr/bin/git'), (5, b'git'), (5, b'push')]))
s.send(msg(10, [(4, b'/etc/shadow'), (19, b'filesystem.deny[0]'), (21, b'read')], decision=2))
# A second connection that does not show its socket: nothing can be verified about it.
s2 = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s2.connect(path)
s2.send(msg(9, [(1, b'/usr/bin/git'), (2, b'git'), (2, b'fetch'),
                (23, struct.pack('<I', s2.fileno()))]))
s2.send(msg(2, [(4, b'/usr/bin/git'), (5, b'git'), (5, b'gc')]))
own.sendall(b'forger\n'); own.recv(16)
print(os.getpid(), os.readlink('/proc/self/exe'), '%s:%d' % own.getsockname())
s.close()
)";

TEST(ShimForgery, ForgedRecordsNameTheRealSenderAndCannotStealAConnection) {
  CORDON_REQUIRE(access("/usr/bin/python3", X_OK) == 0, "/usr/bin/python3");
  LoopbackServer server(2, "bye\n");
  ASSERT_GT(server.port(), 0);
  ShimSession session;
  // The victim: a shimmed client whose connection is genuinely its own.
  RunSpec victim_spec;
  victim_spec.env = session.env();
  RunResult victim = run_program(
      {"/usr/bin/python3", "-c",
       "import socket,sys; c=socket.create_connection(('127.0.0.1', int(sys.argv[1]))); "
       "c.sendall(b'victim\\n'); c.recv(16); print('%s:%d' % c.getsockname())",
       std::to_string(server.port())},
      victim_spec);
  ASSERT_EQ(victim.exit_code(), 0) << victim.err;
  std::string victim_local = victim.out.substr(0, victim.out.find('\n'));

  // The forger runs without the shim: everything it sends, it wrote itself.
  RunSpec spec;
  spec.env = base_env();
  RunResult r = run_program({"/usr/bin/python3", "-c", kForger, session.socket_path(), victim_local,
                             std::to_string(server.port())},
                            spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  server.wait_done();
  std::istringstream out(r.out);
  int pid = 0;
  std::string exe, own_local;
  out >> pid >> exe >> own_local;
  ASSERT_GT(pid, 0) << r.out;

  auto evs = session.events();
  std::vector<nlohmann::json> forged;
  for (const auto& e : evs) {
    if (e.contains("cred") && e["cred"].value("pid", 0) == pid) {
      forged.push_back(e);
    }
  }
  // The connection that never showed its socket: its record has the kernel's pid, and no exe
  // or argv at all rather than the ones it claimed.
  auto unverified = std::find_if(forged.begin(), forged.end(), [](const nlohmann::json& e) {
    return e.value("target_argv", nlohmann::json()) == nlohmann::json::array({"git", "gc"});
  });
  ASSERT_NE(unverified, forged.end()) << nlohmann::json(evs).dump(1);
  EXPECT_EQ(unverified->value("pid", 0), pid) << unverified->dump();
  EXPECT_FALSE(unverified->contains("exe")) << unverified->dump();
  EXPECT_FALSE(unverified->contains("argv")) << unverified->dump();
  EXPECT_EQ((*unverified)["claimed"].value("exe", ""), "/usr/bin/git") << unverified->dump();
  forged.erase(unverified);
  ASSERT_EQ(forged.size(), 4u) << nlohmann::json(evs).dump(1);
  for (const auto& e : forged) {
    EXPECT_EQ(e.value("pid", 0), pid) << e.dump();
    EXPECT_EQ(e.value("exe", ""), exe) << e.dump();
    EXPECT_EQ(e["argv"][0], "/usr/bin/python3") << e.dump();
    ASSERT_TRUE(e.contains("claimed")) << e.dump();
    EXPECT_EQ(e["claimed"].value("pid", 0), 4242) << e.dump();
    EXPECT_EQ(e["claimed"].value("exe", ""), "/usr/bin/git") << e.dump();
    EXPECT_EQ(e["claimed"]["argv"], nlohmann::json::array({"git", "fetch"})) << e.dump();
  }
  auto connects = of_kind(forged, "net.connect");
  ASSERT_EQ(connects.size(), 2u);
  // Without a socket: no local address at all, only the claim.
  EXPECT_FALSE(connects[0].contains("local")) << connects[0].dump();
  EXPECT_EQ(connects[0]["claimed"].value("local", ""), victim_local);
  // With its own socket: that socket's address, whatever it claimed.
  EXPECT_EQ(connects[1].value("local", ""), own_local) << connects[1].dump();
  EXPECT_EQ(connects[1]["claimed"].value("local", ""), victim_local);

  // The victim's own record keeps its address: the kernel's, from its socket.
  size_t victim_records = 0;
  for (const auto& e : of_kind(evs, "net.connect")) {
    if (e.value("local", "") == victim_local) {
      ++victim_records;
      EXPECT_NE(e["cred"].value("pid", 0), pid) << e.dump();
    }
  }
  EXPECT_EQ(victim_records, 1u);
}

}  // namespace
}  // namespace cordon::testing
