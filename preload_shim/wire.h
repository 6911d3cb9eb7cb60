// The shim -> collector record format: one binary message per event, shared by both sides.
#pragma once

#include <stddef.h>
#include <stdint.h>

// Plain constants only: this header is included by the no-libstdc++ shim and by the collector.
// Layout (host byte order; sender and receiver are on the same machine):
//   Header (20 bytes), then fields: u8 tag, u8 zero, u16 length, `length` bytes of value.
// Sockaddr fields carry the raw struct sockaddr bytes; integers are u32.
// Identity (exe, argv) is per process image, and so is the connection (opened lazily, O_CLOEXEC;
// forked children share it and the image): it is sent once per connection in kHello. Everything a
// message says is the sender's claim: the collector takes the sender's pid from the kernel
// (SCM_CREDENTIALS, per message), its exe and argv from /proc, and the addresses of a connect from
// the socket itself, passed along (SCM_RIGHTS). Events stay ~100 bytes.
namespace cordon::preload_shim::wire {

inline constexpr uint32_t kMagic = 0x31534443;  // "CDS1"
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderSize = 20;
inline constexpr size_t kFieldHeaderSize = 4;
inline constexpr size_t kMaxMessage = 2048;

// Bounds on the identity every event carries (exe and argv copied once at load).
inline constexpr size_t kMaxArgs = 8;
inline constexpr size_t kMaxArgvBytes = 512;
inline constexpr size_t kMaxPathBytes = 256;

// The file names of the canaries' decoys (launcher/canaries.cc plants only these). A successful
// open of any file so named is a kFsCanary message with its device and inode, whether or not the
// session has canaries: the collector, which alone knows the decoys, keeps the ones that are and
// drops the rest. Nothing in the sandbox can tell from the shim which files are decoys.
inline constexpr const char* kDecoyNames[] = {"credentials", "id_ed25519", ".env"};

enum Kind : uint8_t {
  kProcStart = 1,   // a dynamically linked image started (sent from the shim's constructor)
  kProcExec = 2,    // exec*/posix_spawn* called: the target program and its argv
  kNetConnect = 3,  // connect() on AF_INET/AF_INET6
  kNetSend = 4,     // sendto/sendmsg with an explicit destination (first per destination)
  kNetBind = 5,
  kNetListen = 6,
  kNetDns = 7,      // getaddrinfo(name)
  kFsOpen = 8,      // open/openat/creat/fopen (failures with EACCES/EPERM by default)
  kHello = 9,       // first message on every connection: the image's exe/argv (not an event)
  kFsRefused = 10,  // --no-namespaces: a hooked path call refused by the file rules
  kFsCanary = 11,   // a file named like a canary's decoy opened (kPath, kVia, kDev, kIno)
  kKindMax = 11,
};

enum Decision : uint8_t { kNoDecision = 0, kAllow = 1, kDeny = 2 };

enum Tag : uint8_t {
  kExe = 1,                   // string: the sending image's executable (kHello)
  kArg = 2,                   // string, repeated: the sending image's argv (bounded; kHello)
  kArgvTruncated = 3,         // u32: the real argc when argv was cut to the bounds
  kPath = 4,                  // string: exec target or opened path
  kTargetArg = 5,             // string, repeated: the exec target's argv (bounded)
  kLocal = 6,                 // sockaddr
  kRemote = 7,                // sockaddr
  kName = 8,                  // string: getaddrinfo node
  kService = 9,               // string: getaddrinfo service
  kErrno = 10,                // u32: errno of the hooked call (0 = success)
  kFlags = 11,                // u32: open flags
  kVia = 12,                  // string: which libc entry point
  kSession = 13,              // string: CORDON_SESSION as the process saw it
  kBacklog = 14,              // u32
  kGaiResult = 15,            // u32 (two's complement int): getaddrinfo's return value
  kResolved = 16,             // sockaddr, repeated: addresses getaddrinfo returned (at most 4)
  kChildPid = 17,             // u32: posix_spawn's child
  kTargetArgvTruncated = 18,  // u32
  kRule = 19,                 // string: the policy path that refused ("filesystem.deny[1]")
  kRequested = 20,            // string: the path as the program passed it
  kOp = 21,                   // string: read, write, create, exec, rename, unlink, ...
  kHostPath = 22,             // string: the resolved absolute path
  kChannelFd = 23,            // u32: the sender's fd number of this connection (kHello)
  kDev = 24,                  // u64: st_dev of an opened file (kFsCanary)
  kIno = 25,                  // u64: st_ino of an opened file (kFsCanary)
  kTagMax = 25,
};

// Header offsets.
inline constexpr size_t kOffMagic = 0;     // u32
inline constexpr size_t kOffVersion = 4;   // u8
inline constexpr size_t kOffKind = 5;      // u8
inline constexpr size_t kOffDecision = 6;  // u8
inline constexpr size_t kOffReserved = 7;  // u8, zero
inline constexpr size_t kOffPid = 8;       // u32, the sender's pid in its own pid namespace
inline constexpr size_t kOffPpid = 12;     // u32
inline constexpr size_t kOffDropped =
    16;  // u32, events this process dropped since its last sent one

}  // namespace cordon::preload_shim::wire
