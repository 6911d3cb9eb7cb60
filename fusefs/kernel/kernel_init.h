// What the kernel offers that libfuse 3.14 does not speak, through libfuse's custom-I/O hook on
// /dev/fuse: capabilities added to the INIT reply, the FUSE_TMPFILE request, and FUSE passthrough
// (FOPEN_PASSTHROUGH and the backing id patched into open replies: passthrough.h).
#pragma once

#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"

namespace cordon::fusefs {

// What a view of ours asks of the kernel in libfuse's init callback (capabilities, sizes): one
// place, so cordon-fs and the floor it is measured against (bench/fs/ram_fs.cc) ask alike.
void ask_view_capabilities(fuse_conn_info* conn);

// Kernel protocol flags (linux/fuse.h) added to the INIT reply when the kernel offered them.
struct InitAdditions {
  bool parallel_dirops = true;  // lookups and readdirs of one directory in parallel
  // The daemon clears suid/sgid itself; the kernel may then mark inodes S_NOSEC.
  bool handle_killpriv_v2 = true;
  // FUSE_PASSTHROUGH (flags2, with FUSE_INIT_EXT) and max_stack_depth: only when the daemon can
  // register backing files (passthrough.h). Never together with writeback caching (not used).
  bool passthrough = false;
  // FUSE_OVER_IO_URING (flags2): only when the daemon's rings are ready to register (uring.h).
  bool io_uring = false;
};

// O_TMPFILE: the kernel sends FUSE_TMPFILE (protocol 7.37), which libfuse 3.14 cannot dispatch
// (it would answer ENOSYS, and the kernel would then refuse every O_TMPFILE with EOPNOTSUPP). The
// hooks answer it themselves through this handler, called with the session's userdata.
struct TmpfileRequest {
  uint64_t parent = 0;  // nodeid of the directory
  uint32_t uid = 0, gid = 0, pid = 0;
  uint32_t flags = 0;  // open(2) flags, O_TMPFILE included
  uint32_t mode = 0;   // with the caller's umask applied by the kernel
};
struct TmpfileReply {
  fuse_entry_param entry{};
  uint64_t fh = 0;
  bool keep_cache = false;
  bool noflush = false;
};
// 0 with *reply filled, or -errno.
using TmpfileHandler = int (*)(void* userdata, const TmpfileRequest& req, TmpfileReply* reply);

// Routes the session's /dev/fuse I/O through hooks that patch the INIT reply (and answer
// FUSE_TMPFILE through `tmpfile`, when given). Call after
// fuse_session_mount, before the loop starts. One session per process (the hooks keep static
// state).
Status add_init_flags(fuse_session* se, const InitAdditions& add, TmpfileHandler tmpfile = nullptr);

// The flags actually added once INIT was answered (0 before).
uint32_t init_flags_added();
// Whether the INIT reply turned FUSE_PASSTHROUGH on (the kernel offered it and we asked).
bool passthrough_enabled();

// Called once, right after the INIT reply was written (the kernel applies it synchronously), with
// whether it turned FUSE_OVER_IO_URING on and the payload size the kernel demands of ring buffers.
using InitDoneHandler = void (*)(void* ctx, bool io_uring, size_t max_payload);
void set_init_done_handler(InitDoneHandler handler, void* ctx);

// What the read hook does with every request before libfuse sees it (answers FUSE_TMPFILE, notes
// the unique for the passthrough open patch), for requests that arrive another way (the io_uring
// transport). True when the request was answered here.
bool dispatch_hooks(int dev_fd, const char* req, size_t len, void* userdata);

// Whether the kernel's INIT offered FUSE_OVER_IO_URING (it does only with enable_uring=Y).
bool kernel_offered_io_uring();
// Whether our INIT reply turned it on.
bool io_uring_accepted();
// Requests read from /dev/fuse (INIT, FORGET, INTERRUPT, and all of them without the ring).
uint64_t dev_requests_read();
// Requests seen so far by either transport, per opcode ("LOOKUP", "GETXATTR", ...; opcodes this
// build has no name for are counted under "OTHER"), only those seen at least once: what a
// workload costs in round trips, op by op.
std::vector<std::pair<std::string, uint64_t>> requests_by_opcode();

}  // namespace cordon::fusefs
