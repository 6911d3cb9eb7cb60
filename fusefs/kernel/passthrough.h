// FUSE passthrough (Linux 6.9+): the kernel ABI that Debian 12's headers and libfuse 3.14 lack,
// whether this daemon may use it, backing-file registration, the choice of an open's io mode, and
// the patch of the open reply that carries FOPEN_PASSTHROUGH and the backing id.
//
// With passthrough the kernel reads and writes an open file straight through a "backing" file the
// daemon registered (its own fd of the upper or lower file), without a FUSE_READ/FUSE_WRITE round
// trip. The kernel keeps one io mode per inode (fs/fuse/iomode.c): *cached* (opens without
// passthrough or direct_io) or *passthrough* with exactly one backing file; while an inode has a
// backing file, every further open must be FOPEN_PASSTHROUGH with that same backing (else the open
// fails with EIO), and a passthrough open while cached opens exist fails too (ETXTBSY, reported as
// EIO). choose_io_mode() keeps the daemon inside those rules.
#pragma once

#include <sys/ioctl.h>

#include <cstdint>
#include <string>

#include "fusefs/inode_table.h"

namespace cordon::fusefs::passthrough {

// ---- kernel ABI (include/uapi/linux/fuse.h, protocol 7.40 = Linux 6.9; this machine's
// linux-libc-dev stops at 7.38) -----------------------------------------------------------------
inline constexpr uint32_t kInitExt = 1u << 30;           // FUSE_INIT_EXT: flags2 is meaningful
inline constexpr uint32_t kFlags2Passthrough = 1u << 5;  // FUSE_PASSTHROUGH (1ULL << 37) in flags2
inline constexpr uint32_t kFopenPassthrough = 1u << 7;   // FOPEN_PASSTHROUGH
// fuse_init_out as of 7.40: flags2 at byte 32, max_stack_depth at 36 (was unused[0]).
inline constexpr size_t kInitOutFlags2 = 32;
inline constexpr size_t kInitOutMaxStackDepth = 36;
// fuse_init_in as of 7.36: flags2 at byte 16, after flags (12).
inline constexpr size_t kInitInFlags2 = 16;
// fuse_open_out as of 7.40: {u64 fh; u32 open_flags; i32 backing_id} (was u32 padding).
inline constexpr size_t kOpenOutSize = 16;
inline constexpr size_t kOpenOutFlags = 8;
inline constexpr size_t kOpenOutBackingId = 12;
struct BackingMap {  // struct fuse_backing_map
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
// FUSE_DEV_IOC_BACKING_OPEN and FUSE_DEV_IOC_BACKING_CLOSE (FUSE_DEV_IOC_MAGIC is 229).
inline constexpr unsigned long kIocBackingOpen = _IOW(229, 1, BackingMap);
inline constexpr unsigned long kIocBackingClose = _IOW(229, 2, uint32_t);
// Our backing files live on ordinary filesystems (stack depth 0): 1 lets the kernel accept them
// and still lets one more stacking filesystem sit on the view. A backing on overlayfs (depth 1)
// is refused by BACKING_OPEN (the open then takes the daemon path).
inline constexpr uint32_t kMaxStackDepth = 1;

// "" when this process may register backing files, else why not. FUSE_DEV_IOC_BACKING_OPEN needs
// CAP_SYS_ADMIN in the initial user namespace, so a rootless daemon (or root inside a user
// namespace) cannot, and must then not offer passthrough at INIT.
std::string unusable_reason();

// Registers `fd` (an fd the daemon opened safely: the kernel opens the backing file from that fd's
// own path object, never from a name) on the session's /dev/fuse fd: the backing id, or -errno.
int open_backing(int dev_fd, int fd);
// Drops a backing id once no open handle of ours refers to it. 0 or -errno.
int close_backing(int dev_fd, int id);

// ---- the io mode of one open -----------------------------------------------------------------
enum class IoMode {
  kCached,             // the daemon path, page cache (today's behaviour)
  kNewBacking,         // register this open's fd as the inode's backing, then kPassthrough
  kPassthrough,        // reads, writes, mmap on the inode's backing file, no daemon round trips
  kPassthroughDirect,  // FOPEN_PASSTHROUGH|FOPEN_DIRECT_IO: read/write through the daemon, mmap
                       // on the backing (the kernel demands FOPEN_PASSTHROUGH once it has one)
  kRefuse,             // no mode is both accepted by the kernel and safe: a writer on an inode
                       // whose backing is the lower file (see choose_io_mode)
};
struct OpenFacts {
  bool enabled = false;           // the kernel accepted FUSE_PASSTHROUGH at INIT
  bool regular = false;           // S_ISREG
  bool writable = false;          // open for writing (or O_TRUNC)
  bool writes_direct_ok = false;  // writes may bypass the daemon: no byte quota, no suid/sgid
  bool on_lower = false;          // the handle's fd is the lower (real workspace) file
  DevIno file;                    // identity of the handle's fd
};
// Decides under the Inode's mu from its passthrough state (Inode::pt_*) and the open's facts.
IoMode choose_io_mode(const Inode& n, const OpenFacts& f);

// ---- the open reply ----------------------------------------------------------------------------
// libfuse 3.14 cannot put FOPEN_PASSTHROUGH or a backing id into fuse_open_out. The op runs and
// replies in the thread that read its request (libfuse's worker loop), so the read hook notes the
// request's unique id per thread, the op asks for a patch of that request's reply, and the writev
// hook applies it to the reply with that unique id (and only a success reply).
void note_request(uint64_t unique);
void expect_open_reply(int32_t backing_id);
// Whether this thread's request asked for a patch (a thread-local load: checked on every reply).
bool open_patch_armed();
// Patches `open_out` (the trailing fuse_open_out of an OPEN or CREATE reply) when `unique` is the
// request a patch was asked for in this thread. Returns whether it patched.
bool take_open_patch(uint64_t unique, bool success, char* open_out);

}  // namespace cordon::fusefs::passthrough
