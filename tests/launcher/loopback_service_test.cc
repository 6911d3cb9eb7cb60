// A service on the host's loopback (a local model server): --allow-host localhost:PORT reaches the
// host's 127.0.0.1:PORT and nothing else of the host's loopback. A second host server on another
// port must stay unreachable by every route: transparent (127.0.0.1, the name localhost, [::1]),
// HTTP CONNECT and absolute-form through the explicit proxy, SOCKS5 by name and by address. The
// sandbox's own loopback keeps working on every other port.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/child.h"

namespace cordon::testing {
namespace {

// Two HTTP servers on the host's 127.0.0.1, each answering its name and logging each request.
class HostServices {
 public:
  explicit HostServices(const std::string& log) {
    child_ = Child::start({"python3", "-c",
                           "import http.server, threading, sys, json\n"
                           "log = open(sys.argv[1], 'a', buffering=1)\n"
                           "class H(http.server.BaseHTTPRequestHandler):\n"
                           "    def do_GET(self):\n"
                           "        log.write(self.server.name + ' ' + self.path + '\\n')\n"
                           "        body = (self.server.name + '\\n').encode()\n"
                           "        self.send_response(200)\n"
                           "        self.send_header('Content-Length', str(len(body)))\n"
                           "        self.end_headers()\n"
                           "        self.wfile.write(body)\n"
                           "    def log_message(self, *a):\n"
                           "        pass\n"
                           "ports = {}\n"
                           "for name in ('service-A', 'service-B'):\n"
                           "    s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
                           "    s.name = name\n"
                           "    threading.Thread(target=s.serve_forever, daemon=True).start()\n"
                           "    ports[name] = s.server_port\n"
                           "print(json.dumps(ports), flush=True)\n"
                           "threading.Event().wait()\n",
                           log});
    auto line = child_.read_line();
    if (!line.empty()) {
      auto j = nlohmann::json::parse(line);
      a_ = j["service-A"];
      b_ = j["service-B"];
    }
  }
  int a() const { return a_; }
  int b() const { return b_; }

 private:
  Child child_;
  int a_ = 0, b_ = 0;
};

TEST(LoopbackService, OnlyTheNamedPortOfTheHostsLoopbackIsReachable) {
  SandboxFixture f;
  TempDir logs;
  std::string log = logs / "requests.log";
  HostServices host(log);
  ASSERT_GT(host.a(), 0);
  const std::string A = std::to_string(host.a()), B = std::to_string(host.b());
  const std::string proxy = "http://127.0.0.1:15080";
  // Each line: "<route>=<body or failure>".
  std::string script =
      "t() { n=$1; shift; out=$(curl -sS --max-time 5 \"$@\" 2>&1 | head -c 200 | tr '\\n' ' '); "
      "echo \"$n=$out\"; }\n"
      "t a_direct --noproxy '*' http://127.0.0.1:" +
      A +
      "/a1\n"
      "t a_name --noproxy '*' http://localhost:" +
      A +
      "/a2\n"
      "t a_env http://localhost:" +
      A +
      "/a3\n"  // NO_PROXY lists localhost: direct again
      // Through the explicit proxy: --noproxy '' overrides NO_PROXY (which lists localhost).
      "t a_connect --noproxy '' -p -x " +
      proxy + " http://localhost:" + A +
      "/a4\n"
      "t a_socks --noproxy '' --socks5-hostname 127.0.0.1:15080 http://localhost:" +
      A +
      "/a5\n"
      "t b_direct --noproxy '*' http://127.0.0.1:" +
      B +
      "/b1\n"
      "t b_name --noproxy '*' http://localhost:" +
      B +
      "/b2\n"
      "t b_v6 --noproxy '*' 'http://[::1]:" +
      B +
      "/b3'\n"
      "t b_connect --noproxy '' -p -x " +
      proxy + " http://localhost:" + B +
      "/b4\n"
      "t b_connect_ip --noproxy '' -p -x " +
      proxy + " http://127.0.0.1:" + B +
      "/b5\n"
      "t b_absolute --noproxy '' -x " +
      proxy + " http://localhost:" + B +
      "/b6\n"
      "t b_socks_name --noproxy '' --socks5-hostname 127.0.0.1:15080 http://localhost:" +
      B +
      "/b7\n"
      "t b_socks_ip --noproxy '' --socks5 127.0.0.1:15080 http://127.0.0.1:" +
      B +
      "/b8\n"
      // The sandbox's own loopback, on another port, is still its own.
      "python3 -m http.server 18777 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1\n"
      "t own --noproxy '*' -o /dev/null -w '%{http_code}' http://127.0.0.1:18777/\n"
      "kill $!\n";
  auto r = f.sh(script, {"--allow-host", "localhost:" + A});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  for (const char* ok : {"a_direct=service-A", "a_name=service-A", "a_env=service-A",
                         "a_connect=service-A", "a_socks=service-A", "own=200"}) {
    EXPECT_NE(r.out.find(ok), std::string::npos) << ok << "\n" << r.out << r.err;
  }
  for (const char* route : {"b_direct=", "b_name=", "b_v6=", "b_connect=", "b_connect_ip=",
                            "b_absolute=", "b_socks_name=", "b_socks_ip="}) {
    size_t at = r.out.find(route);
    ASSERT_NE(at, std::string::npos) << route << "\n" << r.out;
    std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_EQ(line.find("service-B"), std::string::npos) << line;
  }
  // Server B never saw a request; server A saw exactly the five allowed ones.
  std::string seen = read_text(log);
  EXPECT_EQ(seen.find("service-B"), std::string::npos) << seen;
  for (const char* path : {"/a1", "/a2", "/a3", "/a4", "/a5"}) {
    EXPECT_NE(seen.find(std::string("service-A ") + path + "\n"), std::string::npos) << seen;
  }
}

TEST(LoopbackService, EveryPortIsRefusedAsAPolicyMistake) {
  SandboxFixture f;
  auto r = f.sh("true", {"--allow-host", "localhost"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("--allow-host: network.allow[0]: \"localhost\" names the host's loopback "
                       "on every port"),
            std::string::npos)
      << r.err;
  r = f.sh("true", {"--allow-host", "127.0.0.1:15000-15100"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("includes port 15001, which cordon's proxy uses"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace cordon::testing
