// libFuzzer target: DNS query parsing and the response writer fed with what was parsed.
#include <cstddef>
#include <cstdint>
#include <span>

#include "netproxy/wire/dns_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace dns = cordon::netproxy::wire::dns;
  dns::Query q;
  std::span<const uint8_t> in(data, size);
  auto r = dns::parse_query(in, &q);
  if (r == dns::ParseResult::Ok) {
    if (q.name.size() > 255) {
      __builtin_trap();
    }
    dns::Answer a;
    a.rdata = {127, 0, 0, 1};
    auto out = dns::build_response(q, dns::kNoError, {a, a}, dns::kMaxUdpReply);
    if (out.size() > dns::kMaxUdpReply) {
      __builtin_trap();
    }
  }
  size_t pos = 12;
  std::string name;
  dns::read_name(in, &pos, &name);
  return 0;
}
