// libFuzzer target: nfnetlink_log datagrams and the IP headers inside them.
#include <cstddef>
#include <cstdint>
#include <span>

#include "netproxy/wire/nflog_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  auto batch = cordon::netproxy::wire::parse_nflog(in);
  // Every packet message is at least a netlink header (16) + nfgenmsg (4).
  if (batch.packets.size() + batch.unreadable > size / 20) {
    __builtin_trap();
  }
  auto p = cordon::netproxy::wire::parse_ip_packet(in);
  if (p && p->proto.empty()) {
    __builtin_trap();
  }
  return 0;
}
