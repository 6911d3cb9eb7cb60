// Decoding of shim messages (preload_shim/wire.h) into events.jsonl records. Input is hostile:
// any process in the sandbox can connect to the collector and send arbitrary bytes.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/result.h"

namespace cordon::preload_shim {

// The sender as the kernel saw it (SCM_CREDENTIALS), in the collector's pid namespace.
struct PeerCredentials {
  bool valid = false;
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// One message -> {"kind": ..., "pid": ..., ...} without ts/session/source (EventLog adds them).
// Fails, naming what is wrong, on a bad magic/version/kind or a field that overruns the message.
Result<nlohmann::json> decode_message(const uint8_t* data, size_t len, const PeerCredentials& cred);

// A raw sockaddr as text: "1.2.3.4:80", "[::1]:443", "unix:/path", or "family=N".
std::string sockaddr_text(const void* data, size_t len);

// "proc.exec" for wire::kProcExec, "shim.hello" for the per-connection identity message, "" for
// an unknown kind.
const char* kind_name(uint8_t kind);

}  // namespace cordon::preload_shim
