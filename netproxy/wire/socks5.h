// SOCKS5 (RFC 1928) message parsing and replies, on byte spans so they can be fuzzed.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "netproxy/wire/peek.h"
#include "policy/host_pattern.h"

namespace cordon::netproxy::wire::socks5 {

enum Reply : uint8_t {
  kSucceeded = 0x00,
  kGeneralFailure = 0x01,
  kNotAllowed = 0x02,  // connection not allowed by ruleset
  kNetworkUnreachable = 0x03,
  kHostUnreachable = 0x04,
  kConnectionRefused = 0x05,
  kTtlExpired = 0x06,
  kCommandNotSupported = 0x07,
  kAddressTypeNotSupported = 0x08,
};

struct Greeting {
  ParseStatus status = ParseStatus::NeedMore;
  size_t size = 0;       // bytes consumed
  bool no_auth = false;  // method 0x00 offered
};
Greeting parse_greeting(std::span<const uint8_t> data);

struct Request {
  ParseStatus status = ParseStatus::NeedMore;
  size_t size = 0;
  // When status is Done but the request cannot be served, `error` holds the reply code to send.
  std::optional<Reply> error;
  uint8_t command = 0;
  std::string host;                     // ATYP 0x03 (domain name)
  std::optional<policy::IpAddress> ip;  // ATYP 0x01 / 0x04
  uint16_t port = 0;
};
Request parse_request(std::span<const uint8_t> data);

// A reply with a bound address (0.0.0.0:0 when `bound` is empty).
std::vector<uint8_t> make_reply(Reply code, const std::optional<policy::IpAddress>& bound = {},
                                uint16_t bound_port = 0);

}  // namespace cordon::netproxy::wire::socks5
