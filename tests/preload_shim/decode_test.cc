// decode_message: well-formed shim messages become records; hostile bytes are rejected, not
// trusted.
#include "preload_shim/collector/decode.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>
#include <vector>

#include "preload_shim/wire.h"

namespace cordon::preload_shim {
namespace {

std::vector<uint8_t> header(uint8_t kind, uint32_t pid = 42, uint32_t dropped = 0) {
  std::vector<uint8_t> m(wire::kHeaderSize, 0);
  uint32_t magic = wire::kMagic, ppid = 1;
  std::memcpy(m.data() + wire::kOffMagic, &magic, 4);
  m[wire::kOffVersion] = wire::kVersion;
  m[wire::kOffKind] = kind;
  std::memcpy(m.data() + wire::kOffPid, &pid, 4);
  std::memcpy(m.data() + wire::kOffPpid, &ppid, 4);
  std::memcpy(m.data() + wire::kOffDropped, &dropped, 4);
  return m;
}

void field(std::vector<uint8_t>& m, uint8_t tag, const void* data, uint16_t len) {
  m.push_back(tag);
  m.push_back(0);
  m.push_back(static_cast<uint8_t>(len & 0xff));
  m.push_back(static_cast<uint8_t>(len >> 8));
  const uint8_t* p = static_cast<const uint8_t*>(data);
  m.insert(m.end(), p, p + len);
}

TEST(ShimDecode, ConnectRecordCarriesIdentityAndAddresses) {
  auto m = header(wire::kNetConnect, 4242, 7);
  field(m, wire::kExe, "/usr/bin/curl", 13);
  field(m, wire::kArg, "curl", 4);
  field(m, wire::kArg, "http://x/", 9);
  sockaddr_in local{}, remote{};
  local.sin_family = remote.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &local.sin_addr);
  local.sin_port = htons(40000);
  inet_pton(AF_INET, "198.51.100.7", &remote.sin_addr);
  remote.sin_port = htons(443);
  field(m, wire::kLocal, &local, sizeof local);
  field(m, wire::kRemote, &remote, sizeof remote);
  uint32_t err = 115;
  field(m, wire::kErrno, &err, 4);
  PeerCredentials cred{true, 99, 1000, 1000};
  auto ev = decode_message(m.data(), m.size(), cred);
  ASSERT_TRUE(ev.ok()) << ev.error().to_string();
  EXPECT_EQ((*ev)["kind"], "net.connect");
  EXPECT_EQ((*ev)["pid"], 4242);
  EXPECT_EQ((*ev)["ppid"], 1);
  EXPECT_EQ((*ev)["dropped_before"], 7);
  EXPECT_EQ((*ev)["exe"], "/usr/bin/curl");
  EXPECT_EQ((*ev)["argv"], nlohmann::json::array({"curl", "http://x/"}));
  EXPECT_EQ((*ev)["local"], "127.0.0.1:40000");
  EXPECT_EQ((*ev)["remote"], "198.51.100.7:443");
  EXPECT_EQ((*ev)["errno"], 115);
  EXPECT_EQ((*ev)["cred"]["pid"], 99);
  EXPECT_EQ((*ev)["cred"]["uid"], 1000);
}

TEST(ShimDecode, Ipv6AddressesAreBracketed) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::1", &a.sin6_addr);
  a.sin6_port = htons(8443);
  EXPECT_EQ(sockaddr_text(&a, sizeof a), "[2001:db8::1]:8443");
}

TEST(ShimDecode, RejectsShortBadMagicBadVersionUnknownKind) {
  auto m = header(wire::kNetConnect);
  EXPECT_FALSE(decode_message(m.data(), 10, {}).ok());
  auto bad_magic = m;
  bad_magic[0] ^= 0xff;
  EXPECT_FALSE(decode_message(bad_magic.data(), bad_magic.size(), {}).ok());
  auto bad_version = m;
  bad_version[wire::kOffVersion] = 99;
  auto r = decode_message(bad_version.data(), bad_version.size(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("version 99"), std::string::npos);
  auto bad_kind = header(200);
  EXPECT_FALSE(decode_message(bad_kind.data(), bad_kind.size(), {}).ok());
}

TEST(ShimDecode, RejectsFieldsThatOverrunOrHaveWrongIntegerSize) {
  auto m = header(wire::kFsOpen);
  field(m, wire::kPath, "/etc/shadow", 11);
  m[wire::kHeaderSize + 2] = 200;  // claims 200 bytes, has 11
  auto r = decode_message(m.data(), m.size(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("overruns"), std::string::npos);

  auto t = header(wire::kFsOpen);
  t.push_back(wire::kPath);  // a field header cut short
  EXPECT_FALSE(decode_message(t.data(), t.size(), {}).ok());

  auto w = header(wire::kFsOpen);
  uint16_t two = 2;
  field(w, wire::kErrno, &two, 2);
  EXPECT_FALSE(decode_message(w.data(), w.size(), {}).ok());
}

TEST(ShimDecode, SkipsUnknownTagsFromNewerShims) {
  auto m = header(wire::kProcStart);
  field(m, 250, "future", 6);
  field(m, wire::kExe, "/bin/true", 9);
  auto ev = decode_message(m.data(), m.size(), {});
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ((*ev)["exe"], "/bin/true");
  EXPECT_FALSE(ev->contains("cred"));
}

TEST(ShimDecode, FsRefusedNamesItsOwnRuleNotTheNetworkOne) {
  auto m = header(wire::kFsRefused);
  m[wire::kOffDecision] = wire::kDeny;
  field(m, wire::kPath, ".env", 4);
  field(m, wire::kHostPath, "/ws/.env", 8);
  field(m, wire::kRequested, "x/../.env", 9);
  field(m, wire::kOp, "read", 4);
  field(m, wire::kRule, "filesystem.deny[0]", 18);
  uint32_t err = 13;
  field(m, wire::kErrno, &err, 4);
  auto ev = decode_message(m.data(), m.size(), PeerCredentials{});
  ASSERT_TRUE(ev.ok()) << ev.error().to_string();
  EXPECT_EQ((*ev)["kind"], "fs.refused");
  EXPECT_EQ((*ev)["decision"], "deny");
  EXPECT_EQ((*ev)["rule"], "filesystem.deny[0]");
  EXPECT_EQ((*ev)["path"], ".env");
  EXPECT_EQ((*ev)["host_path"], "/ws/.env");
  EXPECT_EQ((*ev)["requested"], "x/../.env");
  EXPECT_EQ((*ev)["op"], "read");
  EXPECT_EQ((*ev)["errno"], 13);
  // Without a rule field it must not borrow the network's.
  auto bare = header(wire::kFsRefused);
  bare[wire::kOffDecision] = wire::kDeny;
  auto ev2 = decode_message(bare.data(), bare.size(), PeerCredentials{});
  ASSERT_TRUE(ev2.ok());
  EXPECT_FALSE(ev2->contains("rule"));
}

}  // namespace
}  // namespace cordon::preload_shim
