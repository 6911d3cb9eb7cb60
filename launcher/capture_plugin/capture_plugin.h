// The C entry points of cordon-capture.so (capture_plugin.cc), shared with launcher/netns.cc, the
// only caller. The plugin holds everything that needs libnftables: a sandbox with network loads it
// with dlopen; `cordon run` without network never loads libnftables and its five dependencies.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

struct CordonCaptureArgs {
  uint32_t size;  // sizeof(CordonCaptureArgs): a plugin from another build refuses a mismatch
  uint16_t proxy_port;
  uint16_t dns_port;
  uint16_t nflog_group;
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
