// The hand-written parsers on hostile and well-formed input: TLS ClientHello (SNI), HTTP request
// heads, SOCKS5 messages and DNS queries.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "netproxy/wire/dns_message.h"
#include "netproxy/wire/http_head.h"
#include "netproxy/wire/sni.h"
#include "netproxy/wire/socks5.h"

namespace cordon::netproxy::wire {
namespace {

using Bytes = std::vector<uint8_t>;

void put16(Bytes& b, size_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

// A ClientHello handshake message (no record header) with GREASE, SNI `host` and filler.
Bytes hello_message(const std::string& host, bool grease = true) {
  Bytes body;
  put16(body, 0x0303);
  body.insert(body.end(), 32, 0x11);  // random
  body.push_back(32);
  body.insert(body.end(), 32, 0x22);  // session id
  put16(body, 4);
  put16(body, 0x1301);
  put16(body, 0x0a0a);  // GREASE cipher
  body.push_back(1);
  body.push_back(0);
  Bytes ext;
  if (grease) {
    put16(ext, 0x2a2a);  // GREASE extension, empty
    put16(ext, 0);
  }
  if (!host.empty()) {
    put16(ext, 0);  // server_name
    put16(ext, host.size() + 5);
    put16(ext, host.size() + 3);
    ext.push_back(0);
    put16(ext, host.size());
    ext.insert(ext.end(), host.begin(), host.end());
  }
  put16(ext, 0x002b);  // supported_versions
  put16(ext, 3);
  ext.push_back(2);
  put16(ext, 0x0304);
  put16(body, ext.size());
  body.insert(body.end(), ext.begin(), ext.end());
  Bytes msg{1, 0, 0, 0};
  msg[1] = static_cast<uint8_t>(body.size() >> 16);
  msg[2] = static_cast<uint8_t>(body.size() >> 8);
  msg[3] = static_cast<uint8_t>(body.size());
  msg.insert(msg.end(), body.begin(), body.end());
  return msg;
}

// Wraps a handshake message into TLS records of at most `frag` bytes each.
Bytes records(const Bytes& msg, size_t frag) {
  Bytes out;
  for (size_t off = 0; off < msg.size(); off += frag) {
    size_t n = std::min(frag, msg.size() - off);
    out.push_back(22);
    out.push_back(3);
    out.push_back(1);
    put16(out, n);
    out.insert(out.end(), msg.begin() + static_cast<long>(off),
               msg.begin() + static_cast<long>(off + n));
  }
  return out;
}

TEST(SniParser, FindsSniPastGrease) {
  auto data = records(hello_message("api.example.com"), 16384);
  auto h = parse_client_hello(data);
  ASSERT_EQ(h.status, ParseStatus::Done);
  EXPECT_TRUE(h.has_sni);
  EXPECT_EQ(h.sni, "api.example.com");
}

TEST(SniParser, ReassemblesRecordsFragmentedAcrossReads) {
  auto data = records(hello_message("fragmented.test"), 7);  // many tiny records
  for (size_t cut = 0; cut < data.size(); ++cut) {
    auto h = parse_client_hello(std::span<const uint8_t>(data).first(cut));
    ASSERT_EQ(h.status, ParseStatus::NeedMore) << cut;  // every prefix asks for more
  }
  auto h = parse_client_hello(data);
  ASSERT_EQ(h.status, ParseStatus::Done);
  EXPECT_EQ(h.sni, "fragmented.test");
}

TEST(SniParser, NoSniAndNotTls) {
  auto h = parse_client_hello(records(hello_message(""), 16384));
  EXPECT_EQ(h.status, ParseStatus::Done);
  EXPECT_FALSE(h.has_sni);
  std::string get = "GET / HTTP/1.1\r\n";
  EXPECT_EQ(parse_client_hello({reinterpret_cast<const uint8_t*>(get.data()), get.size()}).status,
            ParseStatus::NotThis);
}

TEST(SniParser, RejectsLengthsPointingPastTheEnd) {
  auto msg = hello_message("x.test");
  // Corrupt the extensions length to claim more than there is.
  size_t ext_len_at = 4 + 2 + 32 + 1 + 32 + 2 + 4 + 1 + 1;
  msg[ext_len_at] = 0xff;
  EXPECT_EQ(parse_client_hello(records(msg, 16384)).status, ParseStatus::NotThis);
  // A record that is not a handshake, and a handshake that is not a ClientHello.
  auto bad = records(hello_message("x.test"), 16384);
  bad[0] = 23;
  EXPECT_EQ(parse_client_hello(bad).status, ParseStatus::NotThis);
  auto server_hello = records(hello_message("x.test"), 16384);
  server_hello[5] = 2;
  EXPECT_EQ(parse_client_hello(server_hello).status, ParseStatus::NotThis);
}

TEST(HttpHead, ParsesHostAndRejectsSmuggling) {
  std::string req = "GET /x?y HTTP/1.1\r\nUser-Agent: t\r\nhOsT: Api.Test:8080\r\n\r\nbody";
  auto h = parse_http_head({reinterpret_cast<const uint8_t*>(req.data()), req.size()});
  ASSERT_EQ(h.status, ParseStatus::Done);
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/x?y");
  EXPECT_EQ(h.host, "Api.Test");
  EXPECT_EQ(h.host_port, 8080);
  EXPECT_EQ(h.head_size, req.size() - 4);
  auto parse = [](const std::string& s) {
    return parse_http_head({reinterpret_cast<const uint8_t*>(s.data()), s.size()}).status;
  };
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), ParseStatus::NotThis);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), ParseStatus::NotThis);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHo"), ParseStatus::NeedMore);
  EXPECT_EQ(parse("GE"), ParseStatus::NeedMore);
  EXPECT_EQ(parse("SSH-2.0-x\r\n"), ParseStatus::NotThis);
  EXPECT_EQ(parse(std::string("\x16\x03\x01", 3)), ParseStatus::NotThis);
  EXPECT_EQ(parse("GET / HTTP/2.0\r\n\r\n"), ParseStatus::NotThis);
  EXPECT_EQ(parse(std::string(20000, 'A')), ParseStatus::NotThis);
  // A bare LF before the head's end: lenient servers split lines there, so it is not a head we
  // judge, complete or not; one in the body after a whole head does not matter.
  EXPECT_EQ(parse("POST / HTTP/1.1\nHost: a\n\n"), ParseStatus::NotThis);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n"), ParseStatus::NotThis);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\n\r\nbody\n"), ParseStatus::Done);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a:1:1\r\n\r\n"), ParseStatus::NotThis);
}

TEST(HttpHead, FoldedLinesAreFlaggedAndNotRead) {
  auto parse = [](const std::string& s) {
    return parse_http_head({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  };
  auto folded = parse("GET / HTTP/1.1\r\nHost: a.test\r\n .evil.test\r\nX: 1\r\n\r\n");
  ASSERT_EQ(folded.status, ParseStatus::Done);
  EXPECT_TRUE(folded.obs_fold);
  EXPECT_EQ(folded.host, "a.test");
  EXPECT_TRUE(parse("GET / HTTP/1.1\r\nX: 1\r\n\t2\r\nHost: a\r\n\r\n").obs_fold);
  EXPECT_TRUE(parse("GET / HTTP/1.1\r\n Host: a\r\n\r\n").obs_fold);
  auto plain = parse("GET / HTTP/1.1\r\nHost: a\r\nX: 1 2\t3\r\n\r\n");
  ASSERT_EQ(plain.status, ParseStatus::Done);
  EXPECT_FALSE(plain.obs_fold);

  EXPECT_TRUE(has_obs_fold("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"));
  EXPECT_TRUE(has_obs_fold("HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\n\r\n"));
  EXPECT_FALSE(has_obs_fold("GET / HTTP/1.1\r\nX: a b\r\nY:\tc\r\n\r\n"));
  EXPECT_FALSE(has_obs_fold("GET / HTTP/1.1\r\n"));
  EXPECT_FALSE(has_obs_fold(""));
}

TEST(HttpHead, AbsoluteFormTargets) {
  std::string host, path;
  uint16_t port = 0;
  ASSERT_TRUE(parse_absolute_http("http://Api.Test:81/a/b?c#frag", &host, &port, &path));
  EXPECT_EQ(host, "Api.Test");
  EXPECT_EQ(port, 81);
  EXPECT_EQ(path, "/a/b?c");
  ASSERT_TRUE(parse_absolute_http("http://[::1]/", &host, &port, &path));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 80);
  ASSERT_TRUE(parse_absolute_http("http://x.test?q", &host, &port, &path));
  EXPECT_EQ(path, "/?q");
  EXPECT_FALSE(parse_absolute_http("http://user@evil.test/", &host, &port, &path));
  EXPECT_FALSE(parse_absolute_http("https://x.test/", &host, &port, &path));
  EXPECT_FALSE(parse_absolute_http("/relative", &host, &port, &path));
  EXPECT_FALSE(parse_absolute_http("http://x.test:99999/", &host, &port, &path));
}

TEST(Socks5Parser, GreetingAndRequests) {
  Bytes g{5, 2, 2, 0};
  auto gr = socks5::parse_greeting(g);
  EXPECT_EQ(gr.status, ParseStatus::Done);
  EXPECT_TRUE(gr.no_auth);
  EXPECT_EQ(socks5::parse_greeting(Bytes{5, 3, 0}).status, ParseStatus::NeedMore);
  EXPECT_EQ(socks5::parse_greeting(Bytes{4, 1, 0}).status, ParseStatus::NotThis);

  Bytes dom{5, 1, 0, 3, 8, 'a', 'p', 'i', '.', 't', 'e', 's', 't', 0x01, 0xbb};
  auto r = socks5::parse_request(dom);
  ASSERT_EQ(r.status, ParseStatus::Done);
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.host, "api.test");
  EXPECT_EQ(r.port, 443);
  for (size_t cut = 0; cut < dom.size(); ++cut) {
    EXPECT_EQ(socks5::parse_request(std::span<const uint8_t>(dom).first(cut)).status,
              ParseStatus::NeedMore);
  }
  Bytes v6{5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1, 0, 80};
  r = socks5::parse_request(v6);
  ASSERT_TRUE(r.ip);
  EXPECT_FALSE(r.ip->v6);  // IPv4-mapped decoded, so v4 rules apply
  EXPECT_EQ(r.ip->to_string(), "10.0.0.1");
  EXPECT_EQ(*socks5::parse_request(Bytes{5, 2, 0, 1, 1, 2, 3, 4, 0, 80}).error,
            socks5::kCommandNotSupported);
  EXPECT_EQ(*socks5::parse_request(Bytes{5, 1, 0, 9}).error, socks5::kAddressTypeNotSupported);
  Bytes nul{5, 1, 0, 3, 3, 'a', 0, 'b', 0, 80};
  EXPECT_EQ(*socks5::parse_request(nul).error, socks5::kHostUnreachable);
}

Bytes dns_query(const std::string& name, uint16_t type, uint16_t id = 0x1234) {
  Bytes q;
  put16(q, id);
  put16(q, 0x0100);  // RD
  put16(q, 1);
  put16(q, 0);
  put16(q, 0);
  put16(q, 0);
  size_t start = 0;
  while (start < name.size()) {
    auto dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<uint8_t>(dot - start));
    q.insert(q.end(), name.begin() + static_cast<long>(start),
             name.begin() + static_cast<long>(dot));
    start = dot + 1;
  }
  q.push_back(0);
  put16(q, type);
  put16(q, 1);
  return q;
}

TEST(DnsMessage, ParsesAndAnswers) {
  dns::Query q;
  ASSERT_EQ(dns::parse_query(dns_query("Api.Test", dns::kA), &q), dns::ParseResult::Ok);
  EXPECT_EQ(q.name, "api.test");
  EXPECT_EQ(q.qtype, dns::kA);
  dns::Answer a;
  a.rdata = {127, 0, 0, 1};
  auto resp = dns::build_response(q, dns::kNoError, {a, a}, 512);
  EXPECT_EQ(resp[0], 0x12);
  EXPECT_EQ(resp[2] & 0x80, 0x80);  // QR
  EXPECT_EQ(resp[2] & 0x01, 0x01);  // RD echoed
  EXPECT_EQ(resp[7], 2);            // ANCOUNT
  // The response parses back as a message whose question is ours (pointer 0xc00c resolves).
  size_t pos = 12;
  std::string name;
  ASSERT_TRUE(dns::read_name(resp, &pos, &name));
  EXPECT_EQ(name, "api.test");
  pos += 4;
  ASSERT_TRUE(dns::read_name(resp, &pos, &name));
  EXPECT_EQ(name, "api.test");
  // Truncation sets TC.
  auto small = dns::build_response(q, dns::kNoError, {a, a, a}, 12 + 14 + 16 * 2);
  EXPECT_EQ(small[2] & 0x02, 0x02);
  EXPECT_EQ(small[7], 2);
}

TEST(DnsMessage, PointerLoopsAndBadLengthsAreRejected) {
  dns::Query q;
  Bytes loop = dns_query("a", dns::kA);
  // Replace the name with a pointer to itself (offset 12): a loop.
  loop.resize(12);
  loop.push_back(0xc0);
  loop.push_back(12);
  put16(loop, 1);
  put16(loop, 1);
  EXPECT_EQ(dns::parse_query(loop, &q), dns::ParseResult::FormErr);
  // A forward pointer.
  Bytes fwd(loop.begin(), loop.begin() + 12);
  fwd.push_back(0xc0);
  fwd.push_back(20);
  put16(fwd, 1);
  put16(fwd, 1);
  EXPECT_EQ(dns::parse_query(fwd, &q), dns::ParseResult::FormErr);
  // A label running past the end.
  Bytes past(loop.begin(), loop.begin() + 12);
  past.push_back(40);
  past.push_back('a');
  EXPECT_EQ(dns::parse_query(past, &q), dns::ParseResult::FormErr);
  // Names over 255 bytes.
  std::string longname;
  for (int i = 0; i < 5; ++i) longname += std::string(60, 'a') + ".";
  longname += "test";
  EXPECT_EQ(dns::parse_query(dns_query(longname, dns::kA), &q), dns::ParseResult::FormErr);
  // Too short, a response, an oversized message: dropped.
  EXPECT_EQ(dns::parse_query(Bytes(5, 0), &q), dns::ParseResult::Drop);
  auto resp = dns_query("a.test", dns::kA);
  resp[2] |= 0x80;
  EXPECT_EQ(dns::parse_query(resp, &q), dns::ParseResult::Drop);
  EXPECT_EQ(dns::parse_query(Bytes(5000, 0), &q), dns::ParseResult::Drop);
  auto notify = dns_query("a.test", dns::kA);
  notify[2] |= 0x20;  // opcode 4
  EXPECT_EQ(dns::parse_query(notify, &q), dns::ParseResult::NotImp);
}

// What makes the proxy wait for the rest of a first flight (first_flight.cc): a begun request
// head or TLS record, however short; never a line protocol's first word.
TEST(FirstFlightCommitment, RegisteredMethodsAndTlsRecordHeadersOnly) {
  auto b = [](std::string_view s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  for (std::string_view yes : {"G", "GE", "GET", "GET ", "GET /x", "POS", "PROPF", "DELETE /a"}) {
    EXPECT_TRUE(http_request_begun(b(yes))) << yes;
  }
  for (std::string_view no :
       {"", "ping", "PING", "PI", "last words", "get /", "FOO /x", "GETX /"}) {
    EXPECT_FALSE(http_request_begun(b(no))) << no;
  }
  EXPECT_TRUE(tls_record_begun(b("\x16")));
  EXPECT_TRUE(tls_record_begun(b(std::string_view("\x16\x03", 2))));
  EXPECT_TRUE(tls_record_begun(b(std::string_view("\x16\x03\x01\x02", 4))));
  EXPECT_FALSE(tls_record_begun(b(std::string_view("\x16\x04", 2))));
  EXPECT_FALSE(tls_record_begun(b(std::string_view("\x16\x03\x09", 3))));
  EXPECT_FALSE(tls_record_begun(b("P")));
}

}  // namespace
}  // namespace cordon::netproxy::wire
