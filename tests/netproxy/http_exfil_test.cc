// The explicit HTTP proxy against requests built to slip a secret past it: a canary or a
// credential's placeholder in a chunked body's trailer fields, split across a folded header line
// (obs-fold), or in a body judged whole; and a credential bound to a host reached by plain http://,
// which gets the value only where its plain_http says so. The server is a Recorder: it keeps the
// bytes it received as they came, and counts the connections it accepted.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <unistd.h>

#include "tests/netproxy/fixture.h"
#include "tests/netproxy/recorder.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kCanary = "AKIAQ7RTYUIOPASDFGH2";  // the aws canary's value for the run
constexpr const char* kPlaceholder = "ghp_PLACEHOLDERxy0123456789abcdefGHIJKLM";
constexpr const char* kValue = "ghp_R3alT0kenValue0123456789abcdefGHIJKL";

class NetproxyHttpExfil : public ::testing::Test {
 protected:
  // The proxy with the canary and MY_TOKEN (bound to api.test) handed over on fd 3, as cordon
  // run does; `credential` is spliced into MY_TOKEN's entry.
  std::unique_ptr<ProxyUnderTest> start(const std::string& credential = "") {
    const std::string port = std::to_string(rec_.port());
    const std::string policy = R"({"version": 1, "network": {
      "allow": ["api.test:)" + port +
                               R"(", "other.test:)" + port + R"("],
      "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
      "credentials": [{"env": "MY_TOKEN", "hosts": ["api.test"])" +
                               credential + "}]}}";
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    const std::string secrets = std::string(R"([{"env": "MY_TOKEN", "placeholder": ")") +
                                kPlaceholder + R"(", "value": ")" + kValue +
                                R"("}, {"canary": "aws", "value": ")" + kCanary + R"("}])";
    EXPECT_TRUE(send_all_fd(p[1], secrets));
    close(p[1]);
    auto proxy = std::make_unique<ProxyUnderTest>(
        dir_, policy,
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--ca-dir", dir_.path(),
                                 "--credentials-fd", "3"},
        std::vector<std::pair<int, int>>{{p[0], 3}});
    close(p[0]);
    EXPECT_GT(proxy->port(), 0);
    return proxy;
  }
  static bool send_all_fd(int fd, const std::string& s) {
    return write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  }
  std::string url(const std::string& host, const std::string& path = "/x") const {
    return "http://" + host + ":" + std::to_string(rec_.port()) + path;
  }
  std::string host_header(const std::string& host) const {
    return "Host: " + host + ":" + std::to_string(rec_.port()) + "\r\n";
  }
  // Sends `request` to the proxy and returns all it answered until it closed (or 10 s).
  static std::string exchange(const ProxyUnderTest& proxy, const std::string& request) {
    const int fd = tcp_connect("127.0.0.1", proxy.port());
    if (fd < 0) {
      return "connect failed";
    }
    send_all(fd, request);
    std::string out = recv_n(fd, 1 << 20, 10000);
    close(fd);
    return out;
  }
  // A chunked POST whose trailer section is `trailers` (lines ending CRLF).
  std::string chunked_post(const std::string& host, const std::string& trailers) const {
    return "POST " + url(host) + " HTTP/1.1\r\n" + host_header(host) +
           "Transfer-Encoding: chunked\r\nTrailer: X-Sum\r\nConnection: close\r\n\r\n"
           "5\r\nhello\r\n0\r\n" +
           trailers + "\r\n";
  }

  TempDir dir_;
  Recorder rec_;
};

TEST_F(NetproxyHttpExfil, ACanaryInATrailerIsRefusedAndTheServerNeverSeesTheMessageEnd) {
  ASSERT_GT(rec_.port(), 0);
  auto proxy = start();
  const std::string answer =
      exchange(*proxy, chunked_post("api.test", std::string("X-Sum: ") + kCanary + "\r\n"));
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 403"));
  EXPECT_THAT(answer, HasSubstr("its trailer x-sum carries the aws canary"));
  auto exfil = wait_events(proxy->events(), "net.exfil", 1);
  ASSERT_EQ(exfil.size(), 1u) << dump_events(proxy->events());
  EXPECT_EQ(exfil[0].value("channel", ""), "trailer x-sum");
  EXPECT_EQ(exfil[0].value("canary", ""), "aws");
  EXPECT_EQ(exfil[0].value("mode", ""), "http");
  // The body went on its way before the trailers came; its last chunk never did.
  const std::string seen = rec_.all_received();
  EXPECT_THAT(seen, Not(HasSubstr(kCanary)));
  EXPECT_THAT(seen, Not(HasSubstr("\r\n0\r\n")));
}

TEST_F(NetproxyHttpExfil, AnEncodedPlaceholderInATrailerNameOrValueIsRefusedTowardAnotherHost) {
  ASSERT_GT(rec_.port(), 0);
  auto proxy = start();
  std::string hex;
  for (unsigned char c : std::string(kPlaceholder)) {
    static constexpr char kDigits[] = "0123456789abcdef";
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  const std::string answer = exchange(*proxy, chunked_post("other.test", "X-Sum: " + hex + "\r\n"));
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 403"));
  auto exfil = wait_events(proxy->events(), "net.exfil", 1);
  ASSERT_EQ(exfil.size(), 1u) << dump_events(proxy->events());
  EXPECT_EQ(exfil[0].value("channel", ""), "trailer x-sum");
  EXPECT_EQ(exfil[0].value("credential", ""), "MY_TOKEN");
  EXPECT_EQ(exfil[0].value("encoding", ""), "hex");
  EXPECT_THAT(rec_.all_received(), Not(HasSubstr(hex)));
}

TEST_F(NetproxyHttpExfil, CleanTrailersArriveAsTrailersNeverInTheHead) {
  ASSERT_GT(rec_.port(), 0);
  auto proxy = start();
  const std::string answer = exchange(*proxy, chunked_post("api.test", "X-Sum: 5d41402a\r\n"));
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 200"));
  ASSERT_EQ(rec_.received().size(), 1u);
  const std::string seen = rec_.received()[0];
  const std::string head = seen.substr(0, seen.find("\r\n\r\n") + 4);
  EXPECT_THAT(head, Not(HasSubstr("X-Sum: 5d41402a")));
  EXPECT_TRUE(seen.ends_with("\r\n5\r\nhello\r\n0\r\nX-Sum: 5d41402a\r\n\r\n")) << seen;
}

TEST_F(NetproxyHttpExfil, AFoldedHeaderLineIs400AndNothingIsDialled) {
  ASSERT_GT(rec_.port(), 0);
  auto proxy = start();
  // The canary split across a fold: joined with a space it is not the canary to a scanner, and
  // a server that joins folds without one would read it whole.
  const std::string canary(kCanary);
  const std::string answer =
      exchange(*proxy, "GET " + url("api.test") + " HTTP/1.1\r\n" + host_header("api.test") +
                           "X-Note: " + canary.substr(0, 10) + "\r\n " + canary.substr(10) +
                           "\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 400"));
  EXPECT_THAT(answer, HasSubstr("obs-fold"));
  auto refused = wait_events(proxy->events(), "net.refused", 1);
  ASSERT_EQ(refused.size(), 1u) << dump_events(proxy->events());
  EXPECT_EQ(refused[0].value("rule", ""), "network (obs-fold)");
  EXPECT_EQ(refused[0].value("name", ""), "api.test");
  EXPECT_EQ(refused[0].value("mode", ""), "http");
  EXPECT_THAT(refused[0].value("reason", ""), HasSubstr("folded"));
  EXPECT_EQ(rec_.accepted(), 0);
  // A tab folds as a space does.
  const std::string tab =
      exchange(*proxy, "GET " + url("api.test") + " HTTP/1.1\r\n" + host_header("api.test") +
                           "X-Note: a\r\n\tb\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(tab, HasSubstr("HTTP/1.1 400"));
  EXPECT_EQ(rec_.accepted(), 0);
}

TEST_F(NetproxyHttpExfil, ABodyRefusedWholeCostsTheServerNoConnection) {
  ASSERT_GT(rec_.port(), 0);
  auto proxy = start();
  const std::string body = std::string("k=") + kCanary;
  const std::string answer =
      exchange(*proxy, "POST " + url("api.test") + " HTTP/1.1\r\n" + host_header("api.test") +
                           "Content-Length: " + std::to_string(body.size()) +
                           "\r\nConnection: close\r\n\r\n" + body);
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 403"));
  EXPECT_EQ(wait_events(proxy->events(), "net.exfil", 1).size(), 1u);
  EXPECT_EQ(rec_.accepted(), 0);
  // The same request without the canary is dialled and arrives: the count above can fail.
  const std::string clean =
      exchange(*proxy, "POST " + url("api.test") + " HTTP/1.1\r\n" + host_header("api.test") +
                           "Content-Length: 5\r\nConnection: close\r\n\r\nhello");
  EXPECT_THAT(clean, HasSubstr("HTTP/1.1 200"));
  EXPECT_EQ(rec_.accepted(), 1);
}

// The request of the next two tests: the placeholder in a header, the body and a trailer.
std::string credential_request(const std::string& url, const std::string& host_header) {
  return "POST " + url + " HTTP/1.1\r\n" + host_header + "Authorization: token " + kPlaceholder +
         "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + "2a\r\nt=" + kPlaceholder +
         "\r\n0\r\nX-Token: " + kPlaceholder + "\r\n\r\n";
}

TEST_F(NetproxyHttpExfil, PlainHttpToTheBoundHostCarriesThePlaceholderNotTheValue) {
  ASSERT_GT(rec_.port(), 0);
  auto proxy = start();
  const std::string answer =
      exchange(*proxy, credential_request(url("api.test"), host_header("api.test")));
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 200"));
  const std::string seen = rec_.all_received();
  EXPECT_THAT(seen, Not(HasSubstr(kValue)));
  EXPECT_THAT(seen, HasSubstr(std::string("Authorization: token ") + kPlaceholder + "\r\n"));
  EXPECT_THAT(seen, HasSubstr(std::string("t=") + kPlaceholder));
  EXPECT_THAT(seen, HasSubstr(std::string("X-Token: ") + kPlaceholder + "\r\n"));
  // The placeholder toward its own host is not a leak: no net.exfil.
  EXPECT_EQ(wait_events(proxy->events(), "net.http", 1).size(), 1u);
  EXPECT_TRUE(events_of(proxy->events(), "net.exfil").empty()) << dump_events(proxy->events());
}

TEST_F(NetproxyHttpExfil, PlainHttpToTheBoundHostCarriesTheValueWhenThePolicySaysSo) {
  ASSERT_GT(rec_.port(), 0);
  auto proxy = start(R"(, "plain_http": true, "header": "X-Api-Key: {}")");
  const std::string answer =
      exchange(*proxy, credential_request(url("api.test"), host_header("api.test")));
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 200"));
  const std::string seen = rec_.all_received();
  EXPECT_THAT(seen, Not(HasSubstr(kPlaceholder)));
  EXPECT_THAT(seen, HasSubstr(std::string("Authorization: token ") + kValue + "\r\n"));
  EXPECT_THAT(seen, HasSubstr(std::string("X-Api-Key: ") + kValue + "\r\n"));
  EXPECT_THAT(seen, HasSubstr(std::string("t=") + kValue));
  EXPECT_THAT(seen, HasSubstr(std::string("X-Token: ") + kValue + "\r\n"));
}

}  // namespace
}  // namespace cordon::testing
