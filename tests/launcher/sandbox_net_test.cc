// The network namespace, crossed from inside: only lo, nothing reaches the host's loopback,
// documentation addresses are unreachable at once and nothing leaves (SinkNetns counts leaks).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/sink_netns.h"

namespace cordon::testing {
namespace {

TEST(SandboxNet, OnlyLoopbackExistsAndIsUp) {
  SandboxFixture f;
  auto r = f.sh(
      "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; cat /sys/class/net/lo/operstate "
      "2>/dev/null; "
      "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); "
      "c=socket.create_connection(s.getsockname()); print(\"lo-works\")'");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out.rfind("lo\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("lo-works"), std::string::npos) << r.err;
}

TEST(SandboxNet, HostLoopbackListenerGetsNoConnection) {
  SandboxFixture f;
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ASSERT_GE(l, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(l, 16), 0);
  socklen_t len = sizeof a;
  ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  auto r = f.sh(
      "python3 -c 'import socket,sys\n"
      "try:\n  socket.create_connection((\"127.0.0.1\"," +
      std::to_string(port) +
      "), timeout=3); print(\"connected\")\nexcept OSError as e: print(\"refused\", e.errno)'");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "refused 111\n") << r.out << r.err;
  sockaddr_in peer{};
  socklen_t plen = sizeof peer;
  int c = ::accept(l, reinterpret_cast<sockaddr*>(&peer), &plen);
  EXPECT_LT(c, 0) << "the host's loopback listener accepted a connection from the sandbox";
  if (c >= 0) ::close(c);
  ::close(l);
}

// TCP and UDP to a documentation address fail at once (no route), and nothing leaves: as root the
// sink namespace catches anything that would have.
TEST(SandboxNet, NoEgressTcpOrUdp) {
  std::unique_ptr<SinkNetns> sink;
  if (::geteuid() == 0) {
    sink = std::make_unique<SinkNetns>();
    CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  }
  SandboxFixture f;
  auto r = f.sh(
      "python3 -c 'import socket,errno\n"
      "s=socket.socket(); s.settimeout(5)\n"
      "try:\n  s.connect((\"198.51.100.1\",80)); print(\"tcp-connected\")\n"
      "except OSError as e: print(\"tcp\", errno.errorcode.get(e.errno))\n"
      "u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
      "try:\n  u.sendto(b\"x\", (\"198.51.100.1\",53)); print(\"udp-sent\")\n"
      "except OSError as e: print(\"udp\", errno.errorcode.get(e.errno))\n"
      "v=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
      "try:\n  v.sendto(b\"x\", (\"2001:db8::1\",53)); print(\"udp6-sent\")\n"
      "except OSError as e: print(\"udp6\", errno.errorcode.get(e.errno))\n'");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "tcp ENETUNREACH\nudp ENETUNREACH\nudp6 ENETUNREACH\n") << r.err;
  if (sink) {
    EXPECT_EQ(sink->hits(), 0);
  }
}

}  // namespace
}  // namespace cordon::testing
