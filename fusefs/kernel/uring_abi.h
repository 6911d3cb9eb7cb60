// The FUSE-over-io_uring kernel ABI (include/uapi/linux/fuse.h, protocol 7.42 = Linux 6.14), which
// Debian 12's headers (7.38) and libfuse 3.14 lack. Written from the uapi header's layout; the
// static_asserts pin the sizes the kernel checks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cordon::fusefs::uring_abi {

// FUSE_OVER_IO_URING is 1ULL << 41 of the 64-bit INIT flags: bit 9 of flags2 (with FUSE_INIT_EXT).
inline constexpr uint32_t kFlags2OverIoUring = 1u << 9;

// fuse_init_out fields the payload size depends on (the kernel demands a payload buffer of at
// least max(FUSE_MIN_READ_BUFFER, max_write, max_pages * PAGE_SIZE)).
inline constexpr size_t kInitOutMaxWrite = 20;  // u32
inline constexpr size_t kInitOutMaxPages = 28;  // u16
inline constexpr size_t kMinReadBuffer = 8192;  // FUSE_MIN_READ_BUFFER

inline constexpr size_t kInOutHeaderSize = 128;  // FUSE_URING_IN_OUT_HEADER_SZ
inline constexpr size_t kOpInOutSize = 128;      // FUSE_URING_OP_IN_OUT_SZ

struct EntInOut {  // struct fuse_uring_ent_in_out
  uint64_t flags;
  uint64_t commit_id;   // set by the kernel per request; echoed in the commit command
  uint32_t payload_sz;  // bytes of the payload, in either direction
  uint32_t padding;
  uint64_t reserved;
};

struct ReqHeader {                // struct fuse_uring_req_header: iov[0] of a registered entry
  char in_out[kInOutHeaderSize];  // fuse_in_header on fetch, fuse_out_header on commit
  char op_in[kOpInOutSize];       // the request's first argument (the per-op struct)
  EntInOut ring_ent_in_out;
};

enum Cmd : uint32_t {  // enum fuse_uring_cmd, the SQE's cmd_op
  kCmdRegister = 1,
  kCmdCommitAndFetch = 2,
};

struct CmdReq {  // struct fuse_uring_cmd_req, in the SQE's 80-byte command area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;  // the queue = the CPU whose requests it serves
  uint8_t padding[6];
};

static_assert(sizeof(EntInOut) == 32);
static_assert(offsetof(EntInOut, payload_sz) == 16);
static_assert(sizeof(ReqHeader) == 288);
static_assert(offsetof(ReqHeader, ring_ent_in_out) == 256);
static_assert(sizeof(CmdReq) == 24);
static_assert(offsetof(CmdReq, qid) == 16);

}  // namespace cordon::fusefs::uring_abi
