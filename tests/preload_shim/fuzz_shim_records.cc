// libFuzzer target: what the shim's collector parses from bytes a sandboxed process controls (a
// message on /run/cordon/shim.sock, its own /proc/PID/cmdline) and from /proc text. The first byte
// picks the parser; the rest is its input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "preload_shim/collector/decode.h"
#include "preload_shim/collector/sender_identity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace shim = cordon::preload_shim;
  switch (data[0] % 4) {
    case 0: {
      auto ev = shim::decode_message(data + 1, size - 1, {true, 1, 2, 3});
      if (ev.ok()) {
        (void)ev->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      }
      break;
    }
    case 1: {
      auto argv = shim::parse_cmdline(text, 8, 512);
      size_t bytes = 0;
      for (const auto& a : argv.args) {
        bytes += a.size();
      }
      if (argv.args.size() > 8 || bytes > 512 || argv.argc < argv.args.size()) {
        __builtin_trap();
      }
      break;
    }
    case 2: {
      auto ids = shim::parse_status(text);
      if (ids && ids->nspid.empty()) {
        __builtin_trap();
      }
      break;
    }
    default:
      (void)shim::parse_fdinfo_flags(text);
      break;
  }
  return 0;
}
