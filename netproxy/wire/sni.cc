// TLS ClientHello parsing (RFC 8446 section 4.1.2, RFC 6066 section 3), bounds-checked throughout.
#include "netproxy/wire/sni.h"

#include <optional>
#include <vector>

namespace cordon::netproxy::wire {

namespace {

// A cursor over a byte span whose reads fail (return nullopt) instead of running past the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> d) : d_(d) {}
  size_t left() const { return d_.size() - pos_; }
  std::optional<uint32_t> u8() { return num(1); }
  std::optional<uint32_t> u16() { return num(2); }
  std::optional<uint32_t> u24() { return num(3); }
  std::optional<std::span<const uint8_t>> bytes(size_t n) {
    if (left() < n) {
      return std::nullopt;
    }
    auto s = d_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  bool skip(size_t n) { return bytes(n).has_value(); }

 private:
  std::optional<uint32_t> num(size_t n) {
    if (left() < n) {
      return std::nullopt;
    }
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      v = (v << 8) | d_[pos_ + i];
    }
    pos_ += n;
    return v;
  }
  std::span<const uint8_t> d_;
  size_t pos_ = 0;
};

constexpr size_t kMaxHandshake = 64 * 1024;  // a ClientHello larger than this is refused

ClientHello not_tls() { return {ParseStatus::NotThis, false, {}}; }

// Parses a complete ClientHello body (after the 4-byte handshake header).
ClientHello parse_hello_body(std::span<const uint8_t> body) {
  Reader r(body);
  if (!r.skip(2 + 32)) {  // legacy_version, random
    return not_tls();
  }
  auto sid_len = r.u8();
  if (!sid_len || *sid_len > 32 || !r.skip(*sid_len)) {
    return not_tls();
  }
  auto cs_len = r.u16();
  if (!cs_len || *cs_len < 2 || (*cs_len % 2) != 0 || !r.skip(*cs_len)) {
    return not_tls();
  }
  auto comp_len = r.u8();
  if (!comp_len || *comp_len < 1 || !r.skip(*comp_len)) {
    return not_tls();
  }
  ClientHello out{ParseStatus::Done, false, {}};
  if (r.left() == 0) {
    return out;  // no extensions at all (old clients): no SNI
  }
  auto ext_total = r.u16();
  if (!ext_total) {
    return not_tls();
  }
  auto exts = r.bytes(*ext_total);
  if (!exts) {
    return not_tls();
  }
  Reader e(*exts);
  bool seen_sni = false;
  while (e.left() > 0) {
    auto type = e.u16();
    auto len = e.u16();
    if (!type || !len) {
      return not_tls();
    }
    auto ext = e.bytes(*len);
    if (!ext) {
      return not_tls();
    }
    if (*type != 0) {
      continue;  // GREASE (0x?a?a) and every other extension: skipped by length
    }
    if (seen_sni) {
      return not_tls();  // a duplicate extension is illegal; two SNIs could fool a checker
    }
    seen_sni = true;
    Reader s(*ext);
    auto list_len = s.u16();
    if (!list_len || *list_len != s.left()) {
      return not_tls();
    }
    while (s.left() > 0) {
      auto name_type = s.u8();
      auto name_len = s.u16();
      if (!name_type || !name_len) {
        return not_tls();
      }
      auto name = s.bytes(*name_len);
      if (!name) {
        return not_tls();
      }
      if (*name_type == 0) {
        if (out.has_sni || name->empty()) {
          return not_tls();  // RFC 6066: at most one host_name
        }
        out.has_sni = true;
        out.sni.assign(name->begin(), name->end());
      }
    }
  }
  return out;
}

}  // namespace

ClientHello parse_client_hello(std::span<const uint8_t> data) {
  // Reassemble the handshake stream from consecutive handshake records until the whole
  // ClientHello (whose length is in its handshake header) is present.
  std::vector<uint8_t> hs;
  Reader rec(data);
  while (rec.left() > 0) {
    if (rec.left() < 5) {
      return {ParseStatus::NeedMore, false, {}};
    }
    auto type = rec.u8();
    auto major = rec.u8();
    auto minor = rec.u8();
    auto len = rec.u16();
    if (*type != 22 || *major != 3 || *minor > 4 || *len == 0 || *len > 16384 + 2048) {
      return not_tls();
    }
    auto frag = rec.bytes(*len);
    if (!frag) {
      // Partial record: use what there is; the handshake header may already say we need more.
      frag = rec.bytes(rec.left());
      hs.insert(hs.end(), frag->begin(), frag->end());
      break;
    }
    hs.insert(hs.end(), frag->begin(), frag->end());
    if (hs.size() >= 4) {
      uint32_t hlen = (uint32_t{hs[1]} << 16) | (uint32_t{hs[2]} << 8) | hs[3];
      if (hs.size() >= 4 + size_t{hlen}) {
        break;
      }
    }
  }
  if (hs.empty()) {
    return {ParseStatus::NeedMore, false, {}};
  }
  if (hs[0] != 1) {
    return not_tls();  // not a ClientHello
  }
  if (hs.size() < 4) {
    return {ParseStatus::NeedMore, false, {}};
  }
  uint32_t hlen = (uint32_t{hs[1]} << 16) | (uint32_t{hs[2]} << 8) | hs[3];
  if (hlen > kMaxHandshake || hlen < 38) {
    return not_tls();
  }
  if (hs.size() < 4 + size_t{hlen}) {
    return {ParseStatus::NeedMore, false, {}};
  }
  return parse_hello_body(std::span<const uint8_t>(hs).subspan(4, hlen));
}

}  // namespace cordon::netproxy::wire
