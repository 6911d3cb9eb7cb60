// The shape of a DNS tunnel's names (netproxy/dns_tunnel.h): what `--learn`'s `*` does not let
// through to a zone's servers, and the ordinary names it does.
#include "netproxy/dns_tunnel.h"

#include <gtest/gtest.h>

namespace cordon::netproxy {
namespace {

TEST(DnsTunnel, EncodedLabelsAndLongNamesAreTunnelShaped) {
  for (const char* name :
       {"mzxw6ytboi4dqnrxg4ytqmjqgq3tmnzs.t1.exfil.evil.test",  // base32 of data
        "6b3f9c0e21a7d458aa90.evil.test",                       // 20 hex digits
        "a1b2c3d4e5f6g7h8.evil.test",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.evil.test"}) {  // 41: longer than any label kept
    EXPECT_TRUE(tunnel_shaped(name).has_value()) << name;
  }
  std::string many;  // short labels, but 121 characters in all
  for (int i = 0; i < 28; ++i) {
    many += "abc.";
  }
  many += "evil.test";
  ASSERT_EQ(many.size(), 121u);
  EXPECT_EQ(*tunnel_shaped(many), "a name of 121 characters (more than 120)");
  EXPECT_EQ(*tunnel_shaped("6b3f9c0e21a7d458aa90.evil.test"),
            "a label that reads as encoded data (20 mixed letters and digits)");
}

TEST(DnsTunnel, OrdinaryNamesAreNot) {
  for (const char* name :
       {"pypi.org", "files.pythonhosted.org", "objects.githubusercontent.com",
        "registry-1.docker.io", "d111111abcdef8.cloudfront.net", "s3.us-west-2.amazonaws.com",
        "storage.googleapis.com", "api.test", "xn--bcher-kva.example"}) {
    EXPECT_FALSE(tunnel_shaped(name).has_value()) << name << ": " << *tunnel_shaped(name);
  }
}

TEST(DnsTunnel, OnlyABareStarCountsAsAnyName) {
  policy::HostPattern star, zone;
  star.text = "*";
  zone.text = "*.example.com";
  EXPECT_TRUE(allowed_by_any_name({true, "network.allow[1]", &star}));
  EXPECT_FALSE(allowed_by_any_name({true, "network.allow[0]", &zone}));
  EXPECT_FALSE(allowed_by_any_name({false, "network.deny[0]", &star}));
  EXPECT_FALSE(allowed_by_any_name({true, "decider (once)", nullptr}));
}

}  // namespace
}  // namespace cordon::netproxy
