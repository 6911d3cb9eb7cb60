// FUSE passthrough: capability check, backing registration, io mode choice, open reply patch.
#include "fusefs/kernel/passthrough.h"

#include <linux/fuse.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cordon::fusefs::passthrough {

static_assert(sizeof(BackingMap) == 16, "struct fuse_backing_map is 16 bytes");
// The fields the installed header (7.38) already knows sit where the 7.40 layout says.
static_assert(offsetof(fuse_init_out, flags2) == kInitOutFlags2);
static_assert(sizeof(fuse_init_out) >= kInitOutMaxStackDepth + sizeof(uint32_t));
static_assert(offsetof(fuse_init_in, flags2) == kInitInFlags2);
static_assert(sizeof(fuse_open_out) == kOpenOutSize);
static_assert(offsetof(fuse_open_out, open_flags) == kOpenOutFlags);

std::string unusable_reason() {
  // The initial user namespace maps every id to itself.
  std::ifstream map("/proc/self/uid_map");
  std::string line;
  std::getline(map, line);
  std::istringstream l(line);
  unsigned long long inside = 1, outside = 1, count = 0;
  l >> inside >> outside >> count;
  if (inside != 0 || outside != 0 || count != 4294967295ull) {
    return "cordon-fs runs inside a user namespace (uid_map \"" + line +
           "\"); FUSE_DEV_IOC_BACKING_OPEN needs CAP_SYS_ADMIN in the initial one";
  }
  std::ifstream status("/proc/self/status");
  unsigned long long eff = 0;
  bool found = false;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      eff = std::stoull(line.substr(7), nullptr, 16);
      found = true;
      break;
    }
  }
  constexpr int kCapSysAdmin = 21;
  if (!found || !(eff & (1ull << kCapSysAdmin))) {
    return "cordon-fs lacks CAP_SYS_ADMIN (a rootless daemon); FUSE_DEV_IOC_BACKING_OPEN needs it";
  }
  return "";
}

int open_backing(int dev_fd, int fd) {
  BackingMap map{};
  map.fd = fd;
  int id = ::ioctl(dev_fd, kIocBackingOpen, &map);
  return id >= 0 ? id : -errno;
}

int close_backing(int dev_fd, int id) {
  uint32_t bid = static_cast<uint32_t>(id);
  return ::ioctl(dev_fd, kIocBackingClose, &bid) == 0 ? 0 : -errno;
}

IoMode choose_io_mode(const Inode& n, const OpenFacts& f) {
  if (n.pt_opens > 0) {
    // The kernel may hold the inode in passthrough mode on our backing: every open must name that
    // backing. The kernel opens the backing file with the opener's flags, so a writer on a lower
    // backing would write the real workspace: never (the caller moves the writer to a new
    // nodeid instead).
    if (f.writable && !n.pt_backing_writable) {
      return IoMode::kRefuse;
    }
    // Data through the daemon when the backing is not the file this open reads (copied up or
    // rolled back since) or when the daemon must see the writes (quota); mmap then still maps
    // the backing file, the one mode the kernel leaves.
    if (!(n.pt_backing_key == f.file) || (f.writable && !f.writes_direct_ok)) {
      return IoMode::kPassthroughDirect;
    }
    return IoMode::kPassthrough;
  }
  // Cached opens pin the inode in cached mode: a passthrough open now would fail (ETXTBSY).
  if (!f.enabled || !f.regular || n.pt_cached_opens > 0) {
    return IoMode::kCached;
  }
  if (f.writable && !f.writes_direct_ok) {
    return IoMode::kCached;
  }
  return IoMode::kNewBacking;
}

namespace {

struct PendingPatch {
  uint64_t unique = 0;  // the request this thread is serving (from the read hook)
  bool armed = false;   // expect_open_reply was called for it
  int32_t backing_id = -1;
};
thread_local PendingPatch t_pending;

}  // namespace

void note_request(uint64_t unique) { t_pending = PendingPatch{unique, false, -1}; }

void expect_open_reply(int32_t backing_id) {
  t_pending.armed = true;
  t_pending.backing_id = backing_id;
}

bool open_patch_armed() { return t_pending.armed; }

bool take_open_patch(uint64_t unique, bool success, char* open_out) {
  if (!t_pending.armed || t_pending.unique != unique) {
    return false;
  }
  t_pending.armed = false;
  if (!success) {
    return false;
  }
  uint32_t flags;
  std::memcpy(&flags, open_out + kOpenOutFlags, sizeof(flags));
  flags |= kFopenPassthrough;
  std::memcpy(open_out + kOpenOutFlags, &flags, sizeof(flags));
  std::memcpy(open_out + kOpenOutBackingId, &t_pending.backing_id, sizeof(int32_t));
  return true;
}

}  // namespace cordon::fusefs::passthrough
