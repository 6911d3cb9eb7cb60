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

}  // namespace cordon::netproxy::wire
