// DNS wire format: parse one question, write answers; every read checked against the message end.
#include "netproxy/wire/dns_message.h"

namespace cordon::netproxy::wire::dns {

namespace {

uint16_t get16(std::span<const uint8_t> m, size_t at) {
  return static_cast<uint16_t>((m[at] << 8) | m[at + 1]);
}
void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v & 0xff));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v >> 16));
  put16(out, static_cast<uint16_t>(v & 0xffff));
}

bool write_name(std::vector<uint8_t>& out, const std::string& name) {
  size_t start = 0;
  while (start < name.size()) {
    auto dot = name.find('.', start);
    if (dot == std::string::npos) {
      dot = name.size();
    }
    size_t len = dot - start;
    if (len == 0 || len > 63) {
      return false;
    }
    out.push_back(static_cast<uint8_t>(len));
    out.insert(out.end(), name.begin() + static_cast<long>(start),
               name.begin() + static_cast<long>(dot));
    start = dot + 1;
  }
  out.push_back(0);
  return true;
}

}  // namespace

bool read_name(std::span<const uint8_t> m, size_t* pos, std::string* name) {
  name->clear();
  size_t p = *pos;
  size_t end_of_name = 0;  // where the caller continues: after the first pointer, or the name
  bool jumped = false;
  int jumps = 0;
  size_t wire_len = 1;  // the final root label
  for (;;) {
    if (p >= m.size()) {
      return false;
    }
    uint8_t len = m[p];
    if ((len & 0xc0) == 0xc0) {
      if (p + 1 >= m.size()) {
        return false;
      }
      size_t target = static_cast<size_t>(((len & 0x3f) << 8) | m[p + 1]);
      // Only strictly backward pointers: together with the jump bound, loops cannot happen.
      if (target >= p || ++jumps > 32) {
        return false;
      }
      if (!jumped) {
        end_of_name = p + 2;
        jumped = true;
      }
      p = target;
      continue;
    }
    if ((len & 0xc0) != 0) {
      return false;  // 0x40 / 0x80 label types are obsolete
    }
    if (len == 0) {
      if (!jumped) {
        end_of_name = p + 1;
      }
      break;
    }
    if (p + 1 + len > m.size()) {
      return false;
    }
    wire_len += 1 + len;
    if (wire_len > 255) {
      return false;
    }
    if (!name->empty()) {
      name->push_back('.');
    }
    for (size_t i = 0; i < len; ++i) {
      char c = static_cast<char>(m[p + 1 + i]);
      if (c >= 'A' && c <= 'Z') {
        c = static_cast<char>(c + ('a' - 'A'));
      }
      if (c == '.' || c == '\0') {
        return false;  // would make the text form ambiguous ("a.b" as one label)
      }
      name->push_back(c);
    }
    p += 1 + len;
  }
  *pos = end_of_name;
  return true;
}

ParseResult parse_query(std::span<const uint8_t> m, Query* q) {
  if (m.size() < 12 || m.size() > kMaxMessage) {
    return ParseResult::Drop;
  }
  q->id = get16(m, 0);
  q->flags = get16(m, 2);
  if (q->flags & 0x8000) {
    return ParseResult::Drop;  // a response: never answer those (reflection loops)
  }
  if (((q->flags >> 11) & 0xf) != 0) {
    return ParseResult::NotImp;
  }
  if (get16(m, 4) != 1) {
    return ParseResult::FormErr;
  }
  size_t pos = 12;
  if (!read_name(m, &pos, &q->name)) {
    return ParseResult::FormErr;
  }
  if (pos + 4 > m.size()) {
    return ParseResult::FormErr;
  }
  q->qtype = get16(m, pos);
  q->qclass = get16(m, pos + 2);
  return ParseResult::Ok;
}

std::vector<uint8_t> build_header_only(uint16_t id, uint16_t flags, Rcode rcode) {
  std::vector<uint8_t> out;
  put16(out, id);
  // QR=1, opcode and RD echoed, RA=1.
  put16(out, static_cast<uint16_t>(0x8000 | (flags & 0x7900) | 0x0080 | rcode));
  put16(out, 0);
  put16(out, 0);
  put16(out, 0);
  put16(out, 0);
  return out;
}

std::vector<uint8_t> build_response(const Query& q, Rcode rcode, const std::vector<Answer>& answers,
                                    size_t max_size) {
  std::vector<uint8_t> out;
  put16(out, q.id);
  // QR=1, opcode and RD echoed, AA=1 (we are the authority the sandbox has), RA=1.
  put16(out, static_cast<uint16_t>(0x8000 | (q.flags & 0x7900) | 0x0400 | 0x0080 | rcode));
  put16(out, 1);
  put16(out, 0);  // ancount, patched below
  put16(out, 0);
  put16(out, 0);
  if (!write_name(out, q.name)) {
    return build_header_only(q.id, q.flags, kFormErr);
  }
  put16(out, q.qtype);
  put16(out, q.qclass);
  uint16_t count = 0;
  for (const auto& a : answers) {
    size_t need = 2 + 2 + 2 + 4 + 2 + a.rdata.size();
    if (out.size() + need > max_size) {
      out[2] |= 0x02;  // TC: the client retries over TCP
      break;
    }
    put16(out, 0xc00c);  // pointer to the question name
    put16(out, a.type);
    put16(out, 1);  // IN
    put32(out, a.ttl);
    put16(out, static_cast<uint16_t>(a.rdata.size()));
    out.insert(out.end(), a.rdata.begin(), a.rdata.end());
    ++count;
  }
  out[6] = static_cast<uint8_t>(count >> 8);
  out[7] = static_cast<uint8_t>(count & 0xff);
  return out;
}

std::string type_name(uint16_t t) {
  switch (t) {
    case kA:
      return "A";
    case kNs:
      return "NS";
    case kCname:
      return "CNAME";
    case kSoa:
      return "SOA";
    case kNull:
      return "NULL";
    case kPtr:
      return "PTR";
    case kMx:
      return "MX";
    case kTxt:
      return "TXT";
    case kAaaa:
      return "AAAA";
    case kSrv:
      return "SRV";
    case kOpt:
      return "OPT";
    case kHttps:
      return "HTTPS";
    case kAny:
      return "ANY";
    default:
      return "TYPE" + std::to_string(t);
  }
}

}  // namespace cordon::netproxy::wire::dns
