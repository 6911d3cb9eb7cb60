// DNS wire format (RFC 1035): a bounded parser for one-question queries and a response writer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cordon::netproxy::wire::dns {

enum Type : uint16_t {
  kA = 1,
  kNs = 2,
  kCname = 5,
  kSoa = 6,
  kNull = 10,
  kPtr = 12,
  kMx = 15,
  kTxt = 16,
  kAaaa = 28,
  kSrv = 33,
  kOpt = 41,
  kHttps = 65,
  kAny = 255
};
enum Rcode : uint8_t {
  kNoError = 0,
  kFormErr = 1,
  kServFail = 2,
  kNxDomain = 3,
  kNotImp = 4,
  kRefused = 5
};

constexpr size_t kMaxMessage = 4096;  // largest query accepted (UDP with EDNS; TCP the same)
constexpr size_t kMaxUdpReply = 512;  // classic limit; larger answers set TC

struct Query {
  uint16_t id = 0;
  uint16_t flags = 0;  // as received (opcode and RD are echoed)
  std::string name;    // lowercased, no trailing dot; "" for the root
  uint16_t qtype = 0;
  uint16_t qclass = 0;
};

enum class ParseResult {
  Ok,
  FormErr,  // a header we can answer to, but a malformed question: reply FORMERR
  NotImp,   // an opcode other than QUERY: reply NOTIMP
  Drop,     // not a query at all (too short, a response, oversized): send nothing
};

// Parses `msg`. Name compression is followed only backwards and at most 32 jumps, so pointer
// loops end; labels are at most 63 bytes and names 255.
ParseResult parse_query(std::span<const uint8_t> msg, Query* out);

// Decodes a (possibly compressed) name at `*pos`; advances *pos past it. Exposed for tests/fuzz.
bool read_name(std::span<const uint8_t> msg, size_t* pos, std::string* name);

struct Answer {
  uint16_t type = kA;  // kA (4-byte rdata) or kAaaa (16-byte rdata)
  std::vector<uint8_t> rdata;
  uint32_t ttl = 30;
};

// A response echoing the question of `q`. `max_size` bounds the message (TC set if answers had to
// be left out).
std::vector<uint8_t> build_response(const Query& q, Rcode rcode, const std::vector<Answer>& answers,
                                    size_t max_size);
// A response to a message whose question could not be parsed: header only.
std::vector<uint8_t> build_header_only(uint16_t id, uint16_t flags, Rcode rcode);

std::string type_name(uint16_t type);  // "A", "AAAA", "TXT", ... or "TYPE123"

}  // namespace cordon::netproxy::wire::dns
