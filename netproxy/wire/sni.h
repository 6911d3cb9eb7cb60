// TLS ClientHello parser: finds the SNI host name in the first bytes a client sends.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "netproxy/wire/peek.h"

namespace cordon::netproxy::wire {

struct ClientHello {
  ParseStatus status = ParseStatus::NeedMore;
  bool has_sni = false;
  std::string sni;  // as sent (not yet normalised); empty when the hello carries none
};

// Bounds-checked; handles a ClientHello split over several TLS records (record-layer
// fragmentation) and GREASE / unknown extensions (skipped by length). `data` is everything read so
// far from the connection. NotThis for anything that is not a TLS handshake record.
ClientHello parse_client_hello(std::span<const uint8_t> data);

// True when the first byte could start a TLS handshake record (content type 22).
inline bool looks_like_tls(std::span<const uint8_t> data) { return !data.empty() && data[0] == 22; }

// True when `data` is, or begins, a TLS handshake record header (22, 3, version 0 to 4): a flight
// that has begun a ClientHello, however few of its bytes have come.
inline bool tls_record_begun(std::span<const uint8_t> data) {
  return looks_like_tls(data) && (data.size() < 2 || data[1] == 3) &&
         (data.size() < 3 || data[2] <= 4);
}

}  // namespace cordon::netproxy::wire
