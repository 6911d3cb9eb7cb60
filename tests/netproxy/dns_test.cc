// The DNS responder end to end: cordon-netproxy serving UDP and TCP sockets the test hands it.
// Allowed names are answered, everything else is NXDOMAIN without an upstream query (checked
// against a fake host resolver that counts what reaches it).
#include <gmock/gmock.h>

#include <random>

#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using Bytes = std::string;
using ::testing::HasSubstr;

Bytes query(const std::string& name, uint16_t type, uint16_t id) {
  Bytes q{static_cast<char>(id >> 8), static_cast<char>(id & 0xff), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start < name.size()) {
    auto dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<char>(dot - start));
    q += name.substr(start, dot - start);
    start = dot + 1;
  }
  q.push_back(0);
  q += {static_cast<char>(type >> 8), static_cast<char>(type & 0xff), 0, 1};
  return q;
}

struct Reply {
  int rcode = -1;
  uint16_t id = 0;
  std::vector<std::string> addrs;  // A/AAAA answers as text
  std::vector<uint32_t> ttls;
};

Reply parse_reply(const Bytes& r) {
  Reply out;
  if (r.size() < 12) return out;
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(r[i]); };
  out.id = static_cast<uint16_t>(u8(0) << 8 | u8(1));
  out.rcode = u8(3) & 0xf;
  size_t an = u8(6) << 8 | u8(7);
  size_t pos = 12;
  while (pos < r.size() && u8(pos) != 0) pos += u8(pos) + 1;  // question name (uncompressed)
  pos += 5;
  for (size_t i = 0; i < an && pos + 12 <= r.size(); ++i) {
    pos += 2;  // name pointer
    uint16_t type = static_cast<uint16_t>(u8(pos) << 8 | u8(pos + 1));
    uint32_t ttl = static_cast<uint32_t>(u8(pos + 4)) << 24 | u8(pos + 5) << 16 | u8(pos + 6) << 8 |
                   u8(pos + 7);
    size_t len = u8(pos + 8) << 8 | u8(pos + 9);
    pos += 10;
    char text[64] = {};
    inet_ntop(type == 1 ? AF_INET : AF_INET6, r.data() + pos, text, sizeof text);
    out.addrs.push_back(text);
    out.ttls.push_back(ttl);
    pos += len;
  }
  return out;
}

class NetproxyDns : public ::testing::Test {
 protected:
  void SetUp() override {
    udp_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    tcp_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(tcp_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(listen(tcp_, 16), 0);
    socklen_t len = sizeof a;
    getsockname(tcp_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ASSERT_EQ(bind(udp_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    client_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(connect(client_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  void TearDown() override {
    close(udp_);
    close(tcp_);
    close(client_);
  }

  void start(const std::string& policy_json, std::vector<std::string> prefix = {}) {
    int ready[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    proxy_ = std::make_unique<ProxyUnderTest>(
        dir_, policy_json,
        std::vector<std::string>{"--dns-fd", "3", "--dns-tcp-fd", "4", "--ready-fd", "5"},
        std::vector<std::pair<int, int>>{{udp_, 3}, {tcp_, 4}, {ready[1], 5}}, prefix);
    close(ready[1]);
    pollfd p{ready[0], POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 20000), 1);
    char b;
    ASSERT_EQ(read(ready[0], &b, 1), 1) << "the proxy did not become ready";
    close(ready[0]);
  }

  // Sends one UDP query; returns the reply (empty when none came within `wait_ms`).
  Bytes ask(const Bytes& q, int wait_ms = 10000) {
    send(client_, q.data(), q.size(), 0);
    pollfd p{client_, POLLIN, 0};
    if (poll(&p, 1, wait_ms) != 1) return {};
    char buf[4096];
    ssize_t n = recv(client_, buf, sizeof buf, 0);
    return n > 0 ? Bytes(buf, static_cast<size_t>(n)) : Bytes();
  }

  TempDir dir_;
  int udp_ = -1, tcp_ = -1, client_ = -1, port_ = 0;
  std::unique_ptr<ProxyUnderTest> proxy_;
};

// A fake host resolver on 127.83.x.y:53 (a loopback address of its own, so port 53 is free);
// retries other addresses when a parallel test process holds one.
std::unique_ptr<Upstreams> start_fake_resolver(std::string* ip) {
  for (int i = 0; i < 8; ++i) {
    *ip = "127.83." + std::to_string(getpid() % 250) + "." + std::to_string(1 + (i * 37) % 250);
    auto up = std::make_unique<Upstreams>(std::vector<std::string>{"dns=" + *ip + ":53"});
    if (up->ok()) {
      return up;
    }
  }
  return nullptr;
}

constexpr const char* kPolicy = R"({"version": 1, "network": {
  "allow": ["api.test:443", "both.test", "meta.test", "*.cdn.test"],
  "resolve": {"api.test": "127.0.0.1", "both.test": ["127.0.0.1", "::1"],
              "meta.test": "169.254.169.254", "img.cdn.test": "127.0.0.2"}}})";

TEST_F(NetproxyDns, AnswersAllowedNamesWithShortTtl) {
  start(kPolicy);
  auto r = parse_reply(ask(query("API.test", 1, 7)));
  EXPECT_EQ(r.id, 7);
  EXPECT_EQ(r.rcode, 0);
  ASSERT_EQ(r.addrs.size(), 1u);
  // Loopback pins are answered with a stand-in the capture rules redirect (see name_map.h).
  EXPECT_THAT(r.addrs[0], ::testing::StartsWith("198.18."));
  EXPECT_LE(r.ttls[0], 60u);
  EXPECT_GT(r.ttls[0], 0u);
  auto v6 = parse_reply(ask(query("both.test", 28, 8)));
  ASSERT_EQ(v6.addrs.size(), 1u);
  EXPECT_THAT(v6.addrs[0], ::testing::StartsWith("fd63:6f72:646f:6e00:"));
  // A name with no AAAA: NOERROR, no answers.
  auto none = parse_reply(ask(query("api.test", 28, 9)));
  EXPECT_EQ(none.rcode, 0);
  EXPECT_TRUE(none.addrs.empty());
  auto wild = parse_reply(ask(query("img.cdn.test", 1, 10)));
  ASSERT_EQ(wild.addrs.size(), 1u);
  auto ev = wait_events(proxy_->events(), "net.dns", 4);
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev[0]["name"], "api.test");
  EXPECT_EQ(ev[0]["type"], "A");
  EXPECT_EQ(ev[0]["decision"], "allow");
  EXPECT_EQ(ev[0]["rule"], "network.allow[0]");
  EXPECT_EQ(ev[0]["answers"][0], r.addrs[0]);
  EXPECT_EQ(ev[0]["addresses"][0], "127.0.0.1");
}

TEST_F(NetproxyDns, MetadataPinIsNeverHandedOut) {
  start(kPolicy);
  auto r = parse_reply(ask(query("meta.test", 1, 1)));
  EXPECT_EQ(r.rcode, 0);
  EXPECT_TRUE(r.addrs.empty());
  auto ev = wait_events(proxy_->events(), "net.dns", 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["refused_addresses"][0], "169.254.169.254");
}

TEST_F(NetproxyDns, OtherNamesNxdomainAndOtherTypesRefused) {
  start(kPolicy);
  EXPECT_EQ(parse_reply(ask(query("evil.test", 1, 2))).rcode, 3);
  EXPECT_EQ(parse_reply(ask(query("cdn.test", 1, 3))).rcode, 3);    // *.cdn.test: not the apex
  EXPECT_EQ(parse_reply(ask(query("evil.test", 16, 4))).rcode, 3);  // TXT, name first
  EXPECT_EQ(parse_reply(ask(query("api.test", 16, 5))).rcode, 5);   // TXT: REFUSED
  EXPECT_EQ(parse_reply(ask(query("api.test", 255, 6))).rcode, 5);  // ANY
  EXPECT_EQ(parse_reply(ask(query("api.test", 10, 7))).rcode, 5);   // NULL
  auto ev = wait_events(proxy_->events(), "net.dns", 6);
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev[0]["rcode"], "NXDOMAIN");
  EXPECT_EQ(ev[0]["decision"], "deny");
  EXPECT_EQ(ev[0]["rule"], "network.allow (no match)");
  EXPECT_EQ(ev[3]["rcode"], "REFUSED");
  EXPECT_EQ(ev[3]["rule"], "network.dns.types");
}

TEST_F(NetproxyDns, MalformedPacketsAreHandledSafely) {
  start(kPolicy);
  Bytes loop = query("a", 1, 0x4242).substr(0, 12) + Bytes("\xc0\x0c\x00\x01\x00\x01", 6);
  auto r = ask(loop);
  ASSERT_GE(r.size(), 12u);
  EXPECT_EQ(parse_reply(r).rcode, 1);  // FORMERR
  EXPECT_EQ(parse_reply(r).id, 0x4242);
  // Garbage, a response and an oversized packet get no reply; the responder keeps serving.
  send(client_, "\x01\x02\x03", 3, 0);
  Bytes resp = query("api.test", 1, 11);
  resp[2] = static_cast<char>(resp[2] | 0x80);
  send(client_, resp.data(), resp.size(), 0);
  Bytes big = query("api.test", 1, 12) + Bytes(5000, 'x');
  send(client_, big.data(), big.size(), 0);
  auto ok = parse_reply(ask(query("api.test", 1, 13)));
  EXPECT_EQ(ok.id, 13);  // the first reply after the junk is the one for the valid query
  EXPECT_EQ(ok.rcode, 0);
}

TEST_F(NetproxyDns, TcpQueries) {
  start(kPolicy);
  int fd = tcp_connect("127.0.0.1", port_);
  ASSERT_GE(fd, 0);
  for (uint16_t id : {21, 22}) {
    Bytes q = query(id == 21 ? "api.test" : "evil.test", 1, id);
    Bytes framed{static_cast<char>(q.size() >> 8), static_cast<char>(q.size() & 0xff)};
    ASSERT_TRUE(send_all(fd, framed + q));
    auto len = recv_n(fd, 2);
    ASSERT_EQ(len.size(), 2u);
    size_t n = static_cast<uint8_t>(len[0]) << 8 | static_cast<uint8_t>(len[1]);
    auto r = parse_reply(recv_n(fd, n));
    EXPECT_EQ(r.id, id);
    EXPECT_EQ(r.rcode, id == 21 ? 0 : 3);
  }
  close(fd);
}

// The host resolver is replaced (in a private mount namespace) by a fake one on loopback that
// counts queries: 200 queries for random subdomains of an unallowed name reach it ZERO times,
// while one allowed, unpinned name does reach it (so the counter is known to work).
TEST_F(NetproxyDns, TunnellingAttemptSendsNothingUpstream) {
  CORDON_REQUIRE_ROOT();
  std::string fake_ip;
  auto up = start_fake_resolver(&fake_ip);
  ASSERT_TRUE(up && up->ok());
  write_file(dir_ / "resolv.conf", "nameserver " + fake_ip + "\noptions timeout:2 attempts:1\n");
  start(R"({"version": 1, "network": {"allow": ["real.test"]}})",
        {"unshare", "-m", "--propagation", "private", "sh", "-c",
         "mount --bind " + dir_ / "resolv.conf" + " /etc/resolv.conf && exec \"$@\"", "sh"});
  std::mt19937 rng(42);
  int nx = 0;
  for (int i = 0; i < 200; ++i) {
    std::string label;
    for (int k = 0; k < 30; ++k)
      label.push_back("abcdefghijklmnopqrstuvwxyz0123456789"[rng() % 36]);
    auto r = parse_reply(
        ask(query(label + ".exfil.evil.test", i % 2 ? 16 : 1, static_cast<uint16_t>(i))));
    nx += r.rcode == 3;
  }
  EXPECT_EQ(nx, 200);
  EXPECT_EQ(up->stats()["dns_queries"], 0);
  EXPECT_EQ(
      events_of(proxy_->events(), "net.dns", [](const auto& e) { return e["rcode"] == "NXDOMAIN"; })
          .size(),
      200u);
  // Control: an allowed name without a pin goes to the host resolver (which says NXDOMAIN).
  EXPECT_EQ(parse_reply(ask(query("real.test", 1, 999))).rcode, 3);
  EXPECT_GE(up->stats()["dns_queries"].get<int>(), 1);
}

// SOCKS5 0x04: an allowed name the host resolver cannot resolve (fake resolver: NXDOMAIN).
TEST_F(NetproxyDns, Socks5HostUnreachableWhenNameDoesNotResolve) {
  CORDON_REQUIRE_ROOT();
  std::string fake_ip;
  auto up = start_fake_resolver(&fake_ip);
  ASSERT_TRUE(up && up->ok());
  write_file(dir_ / "resolv.conf", "nameserver " + fake_ip + "\noptions timeout:2 attempts:1\n");
  ProxyUnderTest proxy(
      dir_, R"({"version": 1, "network": {"allow": ["real.test"]}})", {"--listen", "127.0.0.1:0"},
      {},
      {"unshare", "-m", "--propagation", "private", "sh", "-c",
       "mount --bind " + dir_ / "resolv.conf" + " /etc/resolv.conf && exec \"$@\"", "sh"});
  ASSERT_GT(proxy.port(), 0);
  int fd = -1;
  EXPECT_EQ(socks5_connect(proxy.port(), 3, "real.test", 80, &fd), 4);
  close(fd);
  auto ev = wait_events(proxy.events(), "net.refused", 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_THAT(ev[0]["reason"].get<std::string>(), HasSubstr("real.test does not resolve"));
}

}  // namespace
}  // namespace cordon::testing
