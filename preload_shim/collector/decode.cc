// Shim message decoding: strict header checks, bounded fields, unknown tags skipped.
#include "preload_shim/collector/decode.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

#include "preload_shim/wire.h"

namespace cordon::preload_shim {

namespace {

uint64_t read_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string as_string(const uint8_t* p, size_t n) {
  return std::string(reinterpret_cast<const char*>(p), n);
}

}  // namespace

const char* kind_name(uint8_t kind) {
  switch (kind) {
    case wire::kProcStart:
      return "proc.start";
    case wire::kProcExec:
      return "proc.exec";
    case wire::kNetConnect:
      return "net.connect";
    case wire::kNetSend:
      return "net.send";
    case wire::kNetBind:
      return "net.bind";
    case wire::kNetListen:
      return "net.listen";
    case wire::kNetDns:
      return "net.dns";
    case wire::kFsOpen:
      return "fs.open";
    case wire::kHello:
      return "shim.hello";
    case wire::kFsRefused:
      return "fs.refused";
    case wire::kFsCanary:
      return "fs.canary";
    default:
      return "";
  }
}

std::string sockaddr_text(const void* data, size_t len) {
  sockaddr_storage ss{};
  std::memcpy(&ss, data, std::min(len, sizeof ss));
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (ss.ss_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  if (ss.ss_family == AF_UNIX && len > offsetof(sockaddr_un, sun_path)) {
    const auto* un = reinterpret_cast<const sockaddr_un*>(&ss);
    size_t n = std::min(len - offsetof(sockaddr_un, sun_path), sizeof un->sun_path);
    return "unix:" + std::string(un->sun_path, strnlen(un->sun_path, n));
  }
  return "family=" + std::to_string(ss.ss_family);
}

Result<nlohmann::json> decode_message(const uint8_t* data, size_t len,
                                      const PeerCredentials& cred) {
  if (len < wire::kHeaderSize) {
    return make_error("shim message of " + std::to_string(len) +
                      " bytes is shorter than its header");
  }
  if (read_u32(data + wire::kOffMagic) != wire::kMagic) {
    return make_error("shim message has a bad magic number");
  }
  if (data[wire::kOffVersion] != wire::kVersion) {
    return make_error("shim message has version " + std::to_string(data[wire::kOffVersion]) +
                      ", this collector reads version " + std::to_string(wire::kVersion));
  }
  uint8_t kind = data[wire::kOffKind];
  const char* name = kind_name(kind);
  if (*name == '\0') {
    return make_error("shim message has unknown kind " + std::to_string(kind));
  }
  nlohmann::json ev = nlohmann::json::object();
  ev["kind"] = name;
  ev["pid"] = read_u32(data + wire::kOffPid);
  ev["ppid"] = read_u32(data + wire::kOffPpid);
  switch (data[wire::kOffDecision]) {
    case wire::kAllow:
      ev["decision"] = "allow";
      break;
    case wire::kDeny:
      ev["decision"] = "deny";
      if (kind != wire::kFsRefused) {
        ev["rule"] = "network.allow";  // the shim's only network rule; fs.refused names its own
      }
      break;
    default:
      break;
  }
  if (uint32_t dropped = read_u32(data + wire::kOffDropped); dropped != 0) {
    ev["dropped_before"] = dropped;
  }
  if (cred.valid) {
    // Kernel-verified, unlike the self-reported pid; in the collector's pid namespace.
    ev["cred"] = {{"pid", cred.pid}, {"uid", cred.uid}, {"gid", cred.gid}};
  }

  nlohmann::json argv = nlohmann::json::array();
  nlohmann::json target_argv = nlohmann::json::array();
  nlohmann::json resolved = nlohmann::json::array();
  size_t off = wire::kHeaderSize;
  while (off < len) {
    if (len - off < wire::kFieldHeaderSize) {
      return make_error("shim message field header at offset " + std::to_string(off) +
                        " is truncated");
    }
    uint8_t tag = data[off];
    uint16_t flen;
    std::memcpy(&flen, data + off + 2, 2);
    const uint8_t* v = data + off + wire::kFieldHeaderSize;
    if (flen > len - off - wire::kFieldHeaderSize) {
      return make_error("shim message field " + std::to_string(tag) + " of " +
                        std::to_string(flen) + " bytes overruns the message");
    }
    off += wire::kFieldHeaderSize + flen;
    bool is_u32 = tag == wire::kArgvTruncated || tag == wire::kErrno || tag == wire::kFlags ||
                  tag == wire::kBacklog || tag == wire::kGaiResult || tag == wire::kChildPid ||
                  tag == wire::kTargetArgvTruncated || tag == wire::kChannelFd;
    const bool is_u64 = tag == wire::kDev || tag == wire::kIno;
    if (is_u64 && flen != 8) {
      return make_error("shim message field " + std::to_string(tag) + " must be 8 bytes, has " +
                        std::to_string(flen));
    }
    if (is_u32 && flen != 4) {
      return make_error("shim message field " + std::to_string(tag) + " must be 4 bytes, has " +
                        std::to_string(flen));
    }
    switch (tag) {
      case wire::kExe:
        ev["exe"] = as_string(v, flen);
        break;
      case wire::kArg:
        argv.push_back(as_string(v, flen));
        break;
      case wire::kArgvTruncated:
        ev["argc"] = read_u32(v);
        break;
      case wire::kPath:
        ev["path"] = as_string(v, flen);
        break;
      case wire::kTargetArg:
        target_argv.push_back(as_string(v, flen));
        break;
      case wire::kTargetArgvTruncated:
        ev["target_argc"] = read_u32(v);
        break;
      case wire::kLocal:
        ev["local"] = sockaddr_text(v, flen);
        break;
      case wire::kRemote:
        ev["remote"] = sockaddr_text(v, flen);
        break;
      case wire::kName:
        ev["name"] = as_string(v, flen);
        break;
      case wire::kService:
        ev["service"] = as_string(v, flen);
        break;
      case wire::kErrno:
        if (read_u32(v) != 0) {
          ev["errno"] = read_u32(v);
          ev["error"] = std::strerror(static_cast<int>(read_u32(v)));
        }
        break;
      case wire::kFlags:
        ev["flags"] = read_u32(v);
        break;
      case wire::kVia:
        ev["via"] = as_string(v, flen);
        break;
      case wire::kSession:
        ev["shim_session"] = as_string(v, flen);
        break;
      case wire::kBacklog:
        ev["backlog"] = read_u32(v);
        break;
      case wire::kGaiResult:
        ev["result"] = static_cast<int32_t>(read_u32(v));
        break;
      case wire::kResolved:
        resolved.push_back(sockaddr_text(v, flen));
        break;
      case wire::kChildPid:
        ev["child_pid"] = read_u32(v);
        break;
      case wire::kRule:
        ev["rule"] = as_string(v, flen);
        break;
      case wire::kRequested:
        ev["requested"] = as_string(v, flen);
        break;
      case wire::kOp:
        ev["op"] = as_string(v, flen);
        break;
      case wire::kHostPath:
        ev["host_path"] = as_string(v, flen);
        break;
      case wire::kChannelFd:
        ev["channel_fd"] = read_u32(v);
        break;
      case wire::kDev:
        ev["dev"] = read_u64(v);
        break;
      case wire::kIno:
        ev["ino"] = read_u64(v);
        break;
      default:
        break;  // a newer shim's field: skip it
    }
  }
  if (!argv.empty()) {
    ev["argv"] = std::move(argv);
  }
  if (kind == wire::kProcExec) {
    ev["target_argv"] = std::move(target_argv);
  }
  if (kind == wire::kNetDns) {
    ev["addresses"] = std::move(resolved);
  }
  return ev;
}

}  // namespace cordon::preload_shim
