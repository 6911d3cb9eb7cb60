// Host patterns and IP addresses: every pattern form, the refusals, and matcher edge cases.
#include "policy/host_pattern.h"

#include <gtest/gtest.h>

namespace cordon::policy {
namespace {

HostPattern must_parse(std::string_view text) {
  std::string why;
  auto p = HostPattern::parse(text, &why);
  EXPECT_TRUE(p.has_value()) << text << ": " << why;
  return p.value_or(HostPattern{});
}

std::string refusal(std::string_view text) {
  std::string why;
  auto p = HostPattern::parse(text, &why);
  EXPECT_FALSE(p.has_value()) << text;
  EXPECT_FALSE(why.empty()) << text;
  return why;
}

IpAddress ip(std::string_view s) {
  auto a = IpAddress::parse(s);
  EXPECT_TRUE(a.has_value()) << s;
  return a.value_or(IpAddress{});
}

TEST(IpAddress, ParsesV4V6AndBrackets) {
  EXPECT_EQ(ip("1.2.3.4").to_string(), "1.2.3.4");
  EXPECT_FALSE(ip("1.2.3.4").v6);
  EXPECT_EQ(ip("2001:DB8::1").to_string(), "2001:db8::1");
  EXPECT_TRUE(ip("::1").v6);
  EXPECT_EQ(ip("[::1]").to_string(), "::1");
  for (const char* bad :
       {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.4 ", "0x7f.0.0.1", "127.1",
        "fe80::1%eth0", "[1.2.3.4]", ":::", "[::1", "localhost", "1.2.3.-4"}) {
    EXPECT_FALSE(IpAddress::parse(bad).has_value()) << bad;
  }
  EXPECT_FALSE(IpAddress::parse(std::string_view("1.2.3.4\0x", 9)).has_value());
}

TEST(IpAddress, DecodesV4MappedV6) {
  IpAddress a = ip("::ffff:10.1.2.3");
  EXPECT_FALSE(a.v6);
  EXPECT_EQ(a, ip("10.1.2.3"));
  const uint8_t raw[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 169, 254};
  IpAddress b = IpAddress::from_v6_bytes(raw);
  EXPECT_FALSE(b.v6);
  EXPECT_EQ(b.to_string(), "169.254.169.254");
  EXPECT_TRUE(b.is_metadata());
  EXPECT_EQ(IpAddress::from_v4(0x7f000001).to_string(), "127.0.0.1");
}

TEST(IpAddress, SpecialRanges) {
  for (const char* s : {"0.0.0.0",
                        "0.1.2.3",
                        "10.0.0.1",
                        "10.255.255.255",
                        "100.64.0.1",
                        "100.127.255.255",
                        "127.0.0.1",
                        "127.255.0.1",
                        "169.254.1.1",
                        "172.16.0.1",
                        "172.31.255.255",
                        "192.0.0.8",
                        "192.168.1.1",
                        "198.18.0.1",
                        "198.19.255.255",
                        "224.0.0.1",
                        "239.1.1.1",
                        "240.0.0.1",
                        "255.255.255.255",
                        "::",
                        "::1",
                        "fc00::1",
                        "fd12:3456::1",
                        "fe80::1",
                        "febf::1",
                        "ff02::1",
                        "64:ff9b::10.0.0.1",
                        "64:ff9b::127.0.0.1",
                        "::ffff:127.0.0.1",
                        "2002:0a00:0001::1",
                        "::10.0.0.1"}) {
    EXPECT_TRUE(ip(s).is_special()) << s;
  }
  // Public, including the documentation ranges tests use as "public but not allowed" targets.
  for (const char* s : {"1.1.1.1",         "8.8.8.8",          "100.63.255.255",
                        "100.128.0.0",     "172.15.255.255",   "172.32.0.0",
                        "192.0.1.1",       "192.167.1.1",      "198.17.255.255",
                        "198.20.0.0",      "198.51.100.7",     "203.0.113.9",
                        "192.0.2.1",       "223.255.255.255",  "2001:db8::1",
                        "2606:4700::1111", "64:ff9b::8.8.8.8", "2002:0808:0808::1",
                        "fe7f::1",         "fec0::1" /* deprecated site-local: still special */}) {
    if (std::string(s) == "fec0::1") {
      EXPECT_TRUE(ip(s).is_special()) << s;
    } else {
      EXPECT_FALSE(ip(s).is_special()) << s;
    }
  }
}

TEST(IpAddress, MetadataAddresses) {
  for (const char* s :
       {"169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "168.63.129.16",
        "192.0.0.192", "::ffff:169.254.169.254", "64:ff9b::169.254.169.254"}) {
    EXPECT_TRUE(ip(s).is_metadata()) << s;
  }
  for (const char* s : {"169.254.169.253", "8.8.8.8", "fd00:ec2::253", "168.63.129.17"}) {
    EXPECT_FALSE(ip(s).is_metadata()) << s;
  }
}

TEST(IpNet, ContainsRespectsPrefixAndFamily) {
  IpNet n{ip("10.0.0.0"), 8};
  EXPECT_TRUE(n.contains(ip("10.255.255.255")));
  EXPECT_FALSE(n.contains(ip("11.0.0.0")));
  EXPECT_FALSE(n.contains(ip("::ffff:11.0.0.0")));
  EXPECT_TRUE(n.contains(ip("::ffff:10.0.0.1")));  // mapped is decoded to v4
  IpNet any6{ip("::"), 0};
  EXPECT_TRUE(any6.contains(ip("2001:db8::1")));
  EXPECT_FALSE(any6.contains(ip("1.2.3.4")));  // families never mix
  IpNet odd{ip("192.168.0.0"), 23};
  EXPECT_TRUE(odd.contains(ip("192.168.1.255")));
  EXPECT_FALSE(odd.contains(ip("192.168.2.0")));
}

TEST(HostPattern, ExactNameIsLowercasedAndTrailingDotStripped) {
  HostPattern p = must_parse("API.Example.COM.");
  EXPECT_EQ(p.kind, HostPattern::Kind::Exact);
  EXPECT_EQ(p.name, "api.example.com");
  EXPECT_EQ(p.text, "API.Example.COM.");
  EXPECT_EQ(p.port_lo, 0);
  EXPECT_EQ(p.port_hi, 65535);
  EXPECT_TRUE(p.matches_name("api.example.com", 443));
  EXPECT_TRUE(p.matches_name("API.EXAMPLE.COM.", 80));
  EXPECT_FALSE(p.matches_name("example.com", 443));
  EXPECT_FALSE(p.matches_name("xapi.example.com", 443));
  EXPECT_FALSE(p.matches_name("api.example.com.evil.net", 443));
  EXPECT_FALSE(p.matches_name("api.example.com..", 443));
}

TEST(HostPattern, SuffixMatchesStrictSubdomainsOnly) {
  HostPattern p = must_parse("*.example.com");
  EXPECT_EQ(p.kind, HostPattern::Kind::Suffix);
  EXPECT_EQ(p.name, ".example.com");
  EXPECT_TRUE(p.matches_name("a.example.com", 1));
  EXPECT_TRUE(p.matches_name("a.b.example.com", 1));
  EXPECT_TRUE(p.matches_name("A.Example.Com.", 1));
  EXPECT_FALSE(p.matches_name("example.com", 1));
  EXPECT_FALSE(p.matches_name("badexample.com", 1));
  EXPECT_FALSE(p.matches_name(".example.com", 1));
  EXPECT_FALSE(p.matches_name("example.com.evil", 1));
}

TEST(HostPattern, AnyNameNeverMatchesAddresses) {
  HostPattern p = must_parse("*");
  EXPECT_EQ(p.kind, HostPattern::Kind::AnyName);
  EXPECT_TRUE(p.matches_name("anything.at.all", 8080));
  EXPECT_FALSE(p.matches_name("10.0.0.1", 80));
  EXPECT_FALSE(p.matches_name("[::1]", 80));
  EXPECT_FALSE(p.matches_name("", 80));
  EXPECT_FALSE(p.matches_ip(ip("10.0.0.1"), 80));
}

TEST(HostPattern, PortsAndRanges) {
  HostPattern p = must_parse("example.com:443");
  EXPECT_EQ(p.port_lo, 443);
  EXPECT_EQ(p.port_hi, 443);
  EXPECT_TRUE(p.matches_name("example.com", 443));
  EXPECT_FALSE(p.matches_name("example.com", 80));
  HostPattern r = must_parse("localhost:8000-8100");
  EXPECT_TRUE(r.matches_name("localhost", 8000));
  EXPECT_TRUE(r.matches_name("localhost", 8100));
  EXPECT_FALSE(r.matches_name("localhost", 7999));
  EXPECT_FALSE(r.matches_name("localhost", 8101));
  HostPattern any = must_parse("*:443");
  EXPECT_TRUE(any.matches_name("x.y", 443));
  EXPECT_FALSE(any.matches_name("x.y", 444));
  HostPattern full = must_parse("a.b:1-65535");
  EXPECT_TRUE(full.matches_name("a.b", 1));
  EXPECT_TRUE(full.matches_name("a.b", 65535));

  EXPECT_NE(refusal("example.com:70000").find("70000"), std::string::npos);
  EXPECT_NE(refusal("example.com:0").find("1-65535"), std::string::npos);
  EXPECT_NE(refusal("example.com:99999999999999999999").find("1-65535"), std::string::npos);
  EXPECT_NE(refusal("example.com:").find("missing port"), std::string::npos);
  EXPECT_NE(refusal("example.com:9000-8000").find("backwards"), std::string::npos);
  refusal("example.com:80-");
  refusal("example.com:-80");
  refusal("example.com:+80");
  refusal("example.com:http");
  EXPECT_NE(refusal(":443").find("*:443"), std::string::npos);
}

TEST(HostPattern, IpLiteralsAndBracketedV6) {
  HostPattern v4 = must_parse("10.0.0.1");
  EXPECT_EQ(v4.kind, HostPattern::Kind::Ip);
  EXPECT_EQ(v4.net.prefix, 32);
  EXPECT_TRUE(v4.matches_ip(ip("10.0.0.1"), 5));
  EXPECT_TRUE(v4.matches_ip(ip("::ffff:10.0.0.1"), 5));
  EXPECT_FALSE(v4.matches_ip(ip("10.0.0.2"), 5));
  EXPECT_TRUE(v4.matches_name("10.0.0.1", 5));  // an IP literal given as a "name"

  HostPattern v6 = must_parse("[2001:db8::1]:443");
  EXPECT_EQ(v6.kind, HostPattern::Kind::Ip);
  EXPECT_EQ(v6.net.prefix, 128);
  EXPECT_EQ(v6.port_lo, 443);
  EXPECT_TRUE(v6.matches_ip(ip("2001:db8::1"), 443));
  EXPECT_FALSE(v6.matches_ip(ip("2001:db8::1"), 80));
  EXPECT_TRUE(v6.matches_name("[2001:DB8::1]", 443));

  HostPattern bare = must_parse("2001:db8::1");
  EXPECT_EQ(bare.port_lo, 0);
  EXPECT_TRUE(bare.matches_ip(ip("2001:db8:0::1"), 9));
  HostPattern brack = must_parse("[::1]");
  EXPECT_TRUE(brack.matches_ip(ip("::1"), 22));

  HostPattern mapped = must_parse("::ffff:127.0.0.1");
  EXPECT_FALSE(mapped.net.addr.v6);
  EXPECT_TRUE(mapped.matches_ip(ip("127.0.0.1"), 1));

  refusal("[1.2.3.4]:80");
  refusal("[2001:db8::1");
  refusal("[2001:db8::1]443");
  refusal("[nothex::1]:443");
  refusal("2001:db8::zz");
}

TEST(HostPattern, CidrRangesAndEdges) {
  HostPattern p = must_parse("10.0.0.0/8");
  EXPECT_EQ(p.kind, HostPattern::Kind::Cidr);
  EXPECT_TRUE(p.matches_ip(ip("10.0.0.0"), 1));
  EXPECT_TRUE(p.matches_ip(ip("10.255.255.255"), 1));
  EXPECT_FALSE(p.matches_ip(ip("11.0.0.0"), 1));
  EXPECT_FALSE(p.matches_ip(ip("9.255.255.255"), 1));
  EXPECT_FALSE(p.matches_name("10.1.1.1.example.com", 1));

  HostPattern v6 = must_parse("2001:db8::/32");
  EXPECT_TRUE(v6.matches_ip(ip("2001:db8:ffff::1"), 1));
  EXPECT_FALSE(v6.matches_ip(ip("2001:db9::1"), 1));

  HostPattern all = must_parse("0.0.0.0/0");
  EXPECT_TRUE(all.matches_ip(ip("203.0.113.9"), 1));
  EXPECT_FALSE(all.matches_ip(ip("2001:db8::1"), 1));

  HostPattern host32 = must_parse("192.168.1.7/32");
  EXPECT_TRUE(host32.matches_ip(ip("192.168.1.7"), 1));
  EXPECT_FALSE(host32.matches_ip(ip("192.168.1.6"), 1));

  HostPattern with_port = must_parse("[2001:db8::/32]:443");
  EXPECT_TRUE(with_port.matches_ip(ip("2001:db8::5"), 443));
  EXPECT_FALSE(with_port.matches_ip(ip("2001:db8::5"), 444));
  HostPattern v4_port = must_parse("10.0.0.0/8:22");
  EXPECT_TRUE(v4_port.matches_ip(ip("10.1.1.1"), 22));
  EXPECT_FALSE(v4_port.matches_ip(ip("10.1.1.1"), 23));

  HostPattern mapped = must_parse("::ffff:10.0.0.0/104");
  EXPECT_FALSE(mapped.net.addr.v6);
  EXPECT_EQ(mapped.net.prefix, 8);

  std::string why = refusal("10.0.0.1/8");
  EXPECT_NE(why.find("host bits"), std::string::npos);
  EXPECT_NE(why.find("10.0.0.0/8"), std::string::npos);
  refusal("2001:db8::1/32");
  refusal("10.0.0.0/33");
  refusal("2001:db8::/129");
  refusal("10.0.0.0/");
  refusal("10.0.0.0/x");
  refusal("10.0.0.0/-1");
  refusal("::ffff:10.0.0.0/8");
}

TEST(HostPattern, RefusesMalformedEntriesWithReasons) {
  EXPECT_NE(refusal("").find("empty"), std::string::npos);
  EXPECT_NE(refusal("exa mple.com").find("spaces"), std::string::npos);
  EXPECT_NE(refusal(" example.com").find("spaces"), std::string::npos);
  EXPECT_NE(refusal("a.*.com").find("'*'"), std::string::npos);
  EXPECT_NE(refusal("*example.com").find("'*'"), std::string::npos);
  EXPECT_NE(refusal("example.*").find("'*'"), std::string::npos);
  EXPECT_NE(refusal("**.example.com").find("'*'"), std::string::npos);
  std::string url = refusal("https://api.example.com/v1");
  EXPECT_NE(url.find("\"api.example.com:443\""), std::string::npos) << url;
  EXPECT_NE(refusal("http://x.org").find("\"x.org:80\""), std::string::npos);
  EXPECT_NE(refusal("example.com/path").find("paths"), std::string::npos);
  EXPECT_NE(refusal("bücher.de").find("punycode"), std::string::npos);
  refusal("a..b");
  refusal(".example.com");
  refusal("example.com..");
  refusal("exa$mple.com");
  refusal(std::string(64, 'a') + ".com");
  refusal(std::string(250, 'a') + ".com");
  refusal("127.1");  // inet_aton would read it as 127.0.0.1
  refusal("0x7f.0.0.1");
  refusal("1.2.3.4.5");
  refusal(std::string_view("a.com\0b", 7));
  refusal("a.com\n");
  must_parse(std::string(63, 'a') + ".com");
  must_parse("_service._tcp.example.com");
  must_parse("xn--bcher-kva.de");
  must_parse("localhost");
  must_parse("1password.com");
}

TEST(NormalizeHost, CanonicalizesNamesAndAddresses) {
  EXPECT_EQ(normalize_host("Example.COM."), "example.com");
  EXPECT_EQ(normalize_host("[::FFFF:10.0.0.1]"), "10.0.0.1");
  EXPECT_EQ(normalize_host("2001:DB8::1"), "2001:db8::1");
  EXPECT_EQ(normalize_host("10.0.0.1."), "10.0.0.1");
  EXPECT_EQ(normalize_host(""), "");
  EXPECT_EQ(normalize_host("."), "");
  EXPECT_EQ(normalize_host("a b"), "");
  EXPECT_EQ(normalize_host("*.example.com"), "");
  EXPECT_EQ(normalize_host("127.1"), "");
  EXPECT_EQ(normalize_host("a..b"), "");
}

}  // namespace
}  // namespace cordon::policy
