// The decider protocol end to end: cordon-netproxy with a decider on a socketpair (the example
// decider in docs/examples, or one that misbehaves), curl and SOCKS5 clients through the explicit
// proxy to loopback upstreams reached by name (network.resolve).
#include <gmock/gmock.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

class NetproxyDecider : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new TempDir();
    ASSERT_TRUE(make_test_files(*certs_));
    up_ = new Upstreams({"root=" + *certs_ / "www"});
    ASSERT_TRUE(up_->ok());
  }
  static void TearDownTestSuite() {
    delete up_;
    delete certs_;
  }

  static std::string http_port() { return std::to_string(up_->port("http")); }

  // api.test is allowed; asked.test and other.test are not (the decider is asked); denied.test is
  // in network.deny; meta.test is pinned to the metadata address.
  static std::string policy() {
    return R"({"version": 1, "network": {
      "allow": ["api.test:)" +
           http_port() + R"("], "deny": ["denied.test"],
      "resolve": {"api.test": "127.0.0.1", "asked.test": "127.0.0.1",
                  "other.test": "127.0.0.1", "denied.test": "127.0.0.1",
                  "meta.test": "169.254.169.254"}}})";
  }

  // Starts the proxy with `decider_argv` on the other end of a socketpair (its stdin and stdout).
  void start(const std::vector<std::string>& decider_argv,
             const std::vector<std::string>& extra = {}) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    decider_ = Child::start(decider_argv, {{sv[1], 0}, {sv[1], 1}});
    close(sv[1]);
    std::vector<std::string> args{"--listen", "127.0.0.1:0", "--decider-fd", "3"};
    args.insert(args.end(), extra.begin(), extra.end());
    proxy_.emplace(dir_, policy(), args, std::vector<std::pair<int, int>>{{sv[0], 3}});
    close(sv[0]);
    ASSERT_GT(proxy_->port(), 0);
  }
  void start_example(const std::vector<std::string>& rules,
                     const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{"python3", source_path("docs/examples/decider.py"), "--log",
                                  questions_log()};
    argv.insert(argv.end(), rules.begin(), rules.end());
    start(argv, extra);
  }
  void start_bad(const std::string& mode, const std::vector<std::string>& extra = {}) {
    start({"python3", source_path("tests/netproxy/bad_decider.py"), mode}, extra);
  }

  std::string questions_log() const { return dir_ / "questions.jsonl"; }
  // The questions the example decider received.
  std::vector<json> questions() const { return read_events(questions_log()); }

  RunResult curl(const std::string& url, const std::vector<std::string>& more = {}) {
    std::vector<std::string> argv{"curl", "-sS", "--max-time",  "20", "--noproxy",
                                  "",     "-x",  proxy_->url(), "-w", "%{http_code}"};
    argv.insert(argv.end(), more.begin(), more.end());
    argv.push_back(url);
    return run_program(argv);
  }
  static std::string url(const std::string& host) {
    return "http://" + host + ":" + http_port() + "/hello.txt";
  }
  const std::string& events() const { return proxy_->events(); }

  static TempDir* certs_;
  static Upstreams* up_;
  TempDir dir_;
  Child decider_;
  std::optional<ProxyUnderTest> proxy_;
};
TempDir* NetproxyDecider::certs_ = nullptr;
Upstreams* NetproxyDecider::up_ = nullptr;

constexpr const char* kHello = "hello through cordon\n200";

TEST_F(NetproxyDecider, AllowOnceIsAskedForEveryConnection) {
  start_example({"--allow", "asked.test"});
  EXPECT_EQ(curl(url("asked.test")).out, kHello);
  EXPECT_EQ(curl(url("asked.test")).out, kHello);
  auto q = questions();
  ASSERT_EQ(q.size(), 2u) << dump_events(events());
  EXPECT_EQ(q[0]["v"], 1);
  EXPECT_EQ(q[0]["kind"], "connect");
  EXPECT_EQ(q[0]["host"], "asked.test");
  EXPECT_EQ(q[0]["port"], up_->port("http"));
  EXPECT_EQ(q[0]["mode"], "http");
  EXPECT_THAT(q[0].value("client", ""), HasSubstr("127.0.0.1:"));
  EXPECT_NE(q[0]["id"], q[1]["id"]);
  auto conns = wait_events(events(), "net.connect", 2);
  ASSERT_EQ(conns.size(), 2u);
  EXPECT_EQ(conns[0]["decided_by"], "decider");
  EXPECT_EQ(conns[0]["rule"], "decider (once)");
  auto asked = events_of(events(), "net.decider");
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0]["decision"], "allow");
  EXPECT_EQ(asked[0]["scope"], "once");
  EXPECT_EQ(asked[0]["decided_by"], "decider");
}

TEST_F(NetproxyDecider, AllowSessionIsAskedOnce) {
  start_example({"--allow-session", "asked.test"});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(curl(url("asked.test")).out, kHello);
  }
  EXPECT_EQ(questions().size(), 1u);
  auto conns = wait_events(events(), "net.connect", 3);
  ASSERT_EQ(conns.size(), 3u);
  for (const auto& c : conns) {
    EXPECT_EQ(c["decided_by"], "decider");
    EXPECT_EQ(c["rule"], "decider (session)");
  }
  // The session answer is for that host and port only: another name is asked about.
  EXPECT_THAT(curl(url("other.test")).out, HasSubstr("403"));
  EXPECT_EQ(questions().size(), 2u);
}

TEST_F(NetproxyDecider, DenyCarriesTheReasonToTheProgramAndTheEvent) {
  start_example({"--deny", "asked.test", "--reason", "ask the security team first"});
  auto r = curl(url("asked.test"));
  EXPECT_EQ(r.out, "cordon: asked.test:" + http_port() +
                       " is not in network.allow: ask the security team first\n403");
  auto refused = wait_events(events(), "net.refused", 1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["decided_by"], "decider");
  EXPECT_EQ(refused[0]["decision"], "deny");
  EXPECT_EQ(refused[0]["decider_reason"], "ask the security team first");
  EXPECT_EQ(refused[0]["rule"], "network.allow (no match)");
}

TEST_F(NetproxyDecider, ConnectAndSocks5AreHeldAndAskedToo) {
  start_example({"--allow", "asked.test"});
  // CONNECT: a tunnel to the plain HTTP server carries the request.
  auto r = curl(url("asked.test"), {"--proxytunnel"});
  EXPECT_EQ(r.out, kHello) << r.err;
  int fd = -1;
  EXPECT_EQ(socks5_connect(proxy_->port(), 3, "asked.test", up_->port("http"), &fd), 0);
  ASSERT_TRUE(send_all(fd, "GET /hello.txt HTTP/1.0\r\nHost: asked.test\r\n\r\n"));
  EXPECT_THAT(recv_n(fd, 4096), HasSubstr("hello through cordon"));
  close(fd);
  auto q = questions();
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0]["mode"], "connect");
  EXPECT_EQ(q[1]["mode"], "socks5");
  // Refused over SOCKS5: "connection not allowed by ruleset".
  EXPECT_EQ(socks5_connect(proxy_->port(), 3, "other.test", up_->port("http"), &fd), 2);
  close(fd);
}

TEST_F(NetproxyDecider, AllowedAndBuiltInRefusalsNeverReachTheDecider) {
  start_example({"--allow", "*"});
  EXPECT_EQ(curl(url("api.test")).out, kHello);
  // network.deny, the metadata address and private addresses are refused by the policy itself.
  EXPECT_THAT(curl(url("denied.test")).out, HasSubstr("denied by network.deny[0]"));
  EXPECT_THAT(curl("http://169.254.169.254/latest/meta-data/").out,
              HasSubstr("private/loopback/metadata"));
  EXPECT_THAT(curl("http://10.0.0.1:" + http_port() + "/").out, HasSubstr("403"));
  EXPECT_THAT(curl("http://127.0.0.1:" + http_port() + "/").out, HasSubstr("403"));
  EXPECT_TRUE(questions().empty()) << questions().front().dump();
  auto refused = wait_events(events(), "net.refused", 4);
  ASSERT_EQ(refused.size(), 4u);
  for (const auto& e : refused) {
    EXPECT_EQ(e["decided_by"], "policy") << e.dump();
  }
  // A name the decider allows still has its addresses checked: meta.test is pinned to the
  // metadata address, which only an allow entry naming it reaches.
  EXPECT_THAT(curl("http://meta.test/").out, HasSubstr("169.254.169.254"));
}

TEST_F(NetproxyDecider, SilentDeciderTimesOutAsDeny) {
  start_bad("silent", {"--decider-timeout", "1s"});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = curl(url("asked.test"));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.out, "cordon: asked.test:" + http_port() +
                       " is not in network.allow (the decider did not answer within 1 s)\n403");
  EXPECT_GE(took, std::chrono::milliseconds(900));
  EXPECT_LT(took, std::chrono::seconds(5));
  auto refused = wait_events(events(), "net.refused", 1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["decided_by"], "timeout");
}

TEST_F(NetproxyDecider, CrashedDeciderDeniesNowAndLater) {
  start_bad("crash");
  auto r = curl(url("asked.test"));
  EXPECT_THAT(r.out, HasSubstr("(the decider closed its end of the channel)\n403"));
  // Asked no more: refused at once.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(curl(url("other.test")).out, HasSubstr("403"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(curl(url("api.test")).out, kHello);  // what the policy allows is unaffected
  auto refused = wait_events(events(), "net.refused", 2);
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_EQ(refused[0]["decided_by"], "decider-error");
  EXPECT_EQ(refused[1]["decided_by"], "decider-error");
  auto errors =
      events_of(events(), "net.decider", [](const json& e) { return e.contains("error"); });
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0]["error"], "the decider closed its end of the channel");
}

TEST_F(NetproxyDecider, GarbageReplyDenies) {
  start_bad("garbage", {"--decider-timeout", "20s"});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = curl(url("asked.test"));
  EXPECT_THAT(r.out, HasSubstr("(malformed decider reply: decider reply is not a JSON object)"));
  EXPECT_THAT(r.out, HasSubstr("403"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // not the timeout
  auto refused = wait_events(events(), "net.refused", 1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["decided_by"], "decider-error");
}

// While one connection waits for an answer, the proxy serves the others as usual: the held one
// is a suspended coroutine, not a blocked thread.
TEST_F(NetproxyDecider, HeldConnectionDoesNotSlowOthers) {
  start_bad("silent", {"--decider-timeout", "30s"});
  int held = -1;
  std::thread holder([&] { socks5_connect(proxy_->port(), 3, "asked.test", 80, &held); });
  // The question is open once the decider has it: wait (bounded) for the proxy to be holding it.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(curl(url("api.test")).out, kHello);
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_TRUE(events_of(events(), "net.refused").empty()) << "the held connection ended early";
  proxy_->child().stop();
  holder.join();
  if (held >= 0) {
    close(held);
  }
}

// The round trip a decider adds, from net.decider's wait_us: the example decider answers at once.
TEST_F(NetproxyDecider, RoundTripIsShort) {
  start_example({"--allow", "*"});
  constexpr int kN = 40;
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(curl(url("asked.test")).out, kHello);
  }
  auto asked = events_of(events(), "net.decider");
  ASSERT_EQ(asked.size(), static_cast<size_t>(kN));
  std::vector<int64_t> us;
  for (const auto& e : asked) {
    us.push_back(e["wait_us"].get<int64_t>());
  }
  std::sort(us.begin(), us.end());
  // Generous for a loaded 2-core CI machine; the measured median is printed for the record.
  std::printf("decider round trip: median %lld us, max %lld us\n",
              static_cast<long long>(us[us.size() / 2]), static_cast<long long>(us.back()));
  EXPECT_LT(us[us.size() / 2], 20000);
}

}  // namespace
}  // namespace cordon::testing
