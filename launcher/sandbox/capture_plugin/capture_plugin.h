// The C entry points of cordon-capture.so (capture_plugin.cc), shared with
// launcher/sandbox/netns.cc, the only caller. The plugin holds everything that needs libnftables: a
// sandbox with network loads it with dlopen; `cordon run` without network never loads libnftables
// and its five dependencies.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// One host loopback service (netproxy::LoopbackForward): a v4 or v6 network and a port range.
struct CordonCaptureLoopback {
  uint8_t v6;
  uint8_t prefix;
  uint8_t addr[16];  // v4 in the first 4 bytes
  uint16_t port_lo, port_hi;
};
#define CORDON_CAPTURE_MAX_LOOPBACK 32

struct CordonCaptureArgs {
  uint32_t size;  // sizeof(CordonCaptureArgs): a plugin from another build refuses a mismatch
  uint16_t proxy_port;
  uint16_t dns_port;
  uint16_t nflog_group;
  uint16_t n_loopback;
  CordonCaptureLoopback loopback[CORDON_CAPTURE_MAX_LOOPBACK];
};

// Installs the capture ruleset (netproxy::capture_ruleset) in the caller's network namespace,
// which must be new (no earlier copy of the table is replaced). 0 on success; otherwise -1 and a
// NUL-terminated message in err.
typedef int (*CordonCaptureInstallFn)(const CordonCaptureArgs* args, char* err, size_t errlen);

// Opens the NFLOG socket for args->nflog_group in the caller's network namespace
// (netproxy::open_nflog_socket): the fd (O_CLOEXEC), or -1 and a message in err.
typedef int (*CordonCaptureOpenNflogFn)(const CordonCaptureArgs* args, char* err, size_t errlen);
}

namespace cordon::launcher {
inline constexpr const char* kCapturePluginFile = "cordon-capture.so";
inline constexpr const char* kCaptureInstallSymbol = "cordon_capture_install";
inline constexpr const char* kCaptureOpenNflogSymbol = "cordon_capture_open_nflog";
}  // namespace cordon::launcher
