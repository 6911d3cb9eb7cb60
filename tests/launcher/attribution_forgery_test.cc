// From inside a real sandbox, a python3 script writes its own records to /run/cordon/shim.sock,
// claiming to be `/usr/bin/git fetch` with another pid, and claims a curl's connection as its own:
// the record names the script's real pid and exe (the claims kept under "claimed"), and
// net.attribution still credits curl's connection to curl, the script's hidden connection to
// nobody, and nothing at all to git, which never ran.
#include <gmock/gmock.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

// argv: the upstream's port. Prints "pid exe victim_local raw_local".
constexpr char kForger[] = R"(
import ctypes, os, socket, struct, subprocess, sys
port = int(sys.argv[1])
vport = 47000 + os.getpid() % 1000
url = 'http://api.test:%d/hello.txt' % port
# The victim: curl, straight to the server (the transparent proxy), from a known local port.
subprocess.run(['curl', '-sS', '-o', '/dev/null', '--noproxy', '*', '--local-port', str(vport), url],
               check=True)
def sockaddr(host, p):
    return struct.pack('<H', socket.AF_INET) + struct.pack('>H', p) + socket.inet_aton(host) + bytes(8)
def field(tag, value):
    return struct.pack('<BBH', tag, 0, len(value)) + value
def msg(kind, fields, decision=0):
    body = b''.join(field(t, v) for t, v in fields)
    return struct.pack('<IBBBBIII', 0x31534443, 1, kind, decision, 0, 4242, 1, 0) + body
ip = socket.getaddrinfo('api.test', port, socket.AF_INET)[0][4][0]
# A connection the shim never sees: connect(2) by number, not through libc.
raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
libc = ctypes.CDLL(None, use_errno=True)
addr = sockaddr(ip, port)
if libc.syscall(42, raw.fileno(), addr, len(addr)) != 0:
    sys.exit('raw connect: errno %d' % ctypes.get_errno())
raw.sendall(b'GET /hello.txt HTTP/1.0\r\nHost: api.test\r\n\r\n')
while raw.recv(4096):
    pass
me = raw.getsockname()
victim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
victim.connect((ip, port))
victim_ip = victim.getsockname()[0]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect('/run/cordon/shim.sock')
# The hello as the shim sends it, its own end of the connection attached: all a forger can do.
s.sendmsg([msg(9, [(1, b'/usr/bin/git'), (2, b'git'), (2, b'fetch'),
                   (23, struct.pack('<I', s.fileno()))])],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('i', s.fileno()))])
s.settimeout(5)
s.recv(1)  # the collector has read who we are (the shim waits for this byte too)
for local in ((victim_ip, vport), me):
    s.send(msg(3, [(6, sockaddr(*local)), (7, sockaddr(ip, port))]))
s.send(msg(2, [(4, b'/usr/bin/git'), (5, b'git'), (5, b'push')]))
s.send(msg(10, [(4, b'/etc/shadow'), (19, b'filesystem.deny[0]'), (21, b'read')], decision=2))
s.close()
print(os.getpid(), os.readlink('/proc/self/exe'), '%s:%d' % (victim_ip, vport), '%s:%d' % me)
)";

std::vector<nlohmann::json> session_events(SandboxFixture& f) {
  RunSpec spec;
  spec.env = f.env();
  auto r = run_program({cordon_bin(), "log", "last", "--json"}, spec);
  std::vector<nlohmann::json> out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    auto ev = nlohmann::json::parse(line, nullptr, false);
    if (ev.is_object()) {
      out.push_back(std::move(ev));
    }
  }
  return out;
}

TEST(AttributionForgery, ASandboxedForgerCannotSteerAttribution) {
  TempDir files;
  ASSERT_TRUE(make_test_files(files));
  Upstreams up({"root=" + files.path() + "/www"});
  ASSERT_TRUE(up.ok());
  SandboxFixture f;
  const int port = up.port("http");
  write_text(f.home() + "/p.json", R"({"version": 1, "network": {"allow": ["api.test:)" +
                                       std::to_string(port) +
                                       R"("], "resolve": {"api.test": "127.0.0.1"}}})");
  RunSpec spec;
  spec.deadline = std::chrono::seconds(90);
  auto r = f.run({"-q", "--mode", "ro", "--policy", f.home() + "/p.json"},
                 {"python3", "-c", kForger, std::to_string(port)}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  std::istringstream out(r.out);
  int64_t pid = 0;
  std::string exe, victim_local, raw_local;
  out >> pid >> exe >> victim_local >> raw_local;
  ASSERT_GT(pid, 0) << r.out;

  auto evs = session_events(f);
  std::string all;
  for (const auto& e : evs) {
    all += e.dump() + "\n";
  }
  // Every record the script forged says who really sent it.
  size_t forged = 0;
  for (const auto& e : evs) {
    if (e.value("source", "") != "shim" || !e.contains("claimed") ||
        e["claimed"].value("exe", "") != "/usr/bin/git") {
      continue;
    }
    ++forged;
    EXPECT_EQ(e.value("pid", int64_t{0}), pid) << e.dump();
    EXPECT_EQ(e.value("exe", ""), exe) << e.dump();
    EXPECT_EQ(e["claimed"].value("pid", 0), 4242) << e.dump();
    EXPECT_EQ(e["claimed"]["argv"], nlohmann::json::array({"git", "fetch"})) << e.dump();
  }
  EXPECT_EQ(forged, 4u) << all;

  size_t victim_joins = 0, raw_joins = 0;
  for (const auto& e : evs) {
    if (e.value("kind", "") != "net.attribution") {
      continue;
    }
    // git never ran: nothing may be credited to it, whatever was claimed.
    EXPECT_NE(e.value("exe", ""), "/usr/bin/git") << e.dump();
    EXPECT_NE(e.value("pid", int64_t{0}), 4242) << e.dump();
    if (e.value("client", "") == victim_local) {
      ++victim_joins;
      EXPECT_THAT(e.value("exe", ""), ::testing::HasSubstr("curl")) << e.dump();
      EXPECT_NE(e.value("pid", int64_t{0}), pid) << e.dump();
    } else if (e.value("client", "") == raw_local) {
      ++raw_joins;
      EXPECT_TRUE(e.value("unattributed", false)) << e.dump();
    }
  }
  EXPECT_GE(victim_joins, 1u) << all;
  EXPECT_GE(raw_joins, 1u) << all;
}

}  // namespace
}  // namespace cordon::testing
