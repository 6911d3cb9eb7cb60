// What the kernel offers that libfuse 3.14 does not speak: INIT flags, and FUSE_TMPFILE.
//
// Debian 12's libfuse 3.14 answers INIT with protocol 7.31 and drops FUSE_PARALLEL_DIROPS and
// FUSE_HANDLE_KILLPRIV from its reply even when conn->want asks for them (seen in the reply bytes
// with strace). Without the first, the kernel serializes every lookup and readdir of a directory;
// without a killpriv flag it asks security.capability (a GETXATTR round trip) before every
// write(2) and GETATTRs before every chown. FUSE_PARALLEL_DIROPS and FUSE_HANDLE_KILLPRIV_V2
// leave the layout of every other message unchanged, so adding them to the reply is safe for a
// library that does not know them. FUSE_TMPFILE (7.37) has the layout of FUSE_CREATE; libfuse
// would answer it ENOSYS, so the read hook answers it before libfuse sees it.
#include "fusefs/kernel/kernel_init.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "fusefs/kernel/passthrough.h"
#include "fusefs/kernel/uring.h"
#include "fusefs/kernel/uring_abi.h"

namespace cordon::fusefs {

namespace {

// One session per process: the hooks get only the session's userdata (the CowFs), so the little
// state they need lives here.
std::atomic<bool> g_init_seen{false};
std::atomic<uint64_t> g_init_unique{0};
std::atomic<uint32_t> g_offered{0};
std::atomic<uint32_t> g_wanted{0};
std::atomic<uint32_t> g_added{0};
std::atomic<uint32_t> g_offered2{0};  // flags2 of the INIT request (with FUSE_INIT_EXT)
std::atomic<bool> g_want_passthrough{false};
std::atomic<bool> g_passthrough{false};

std::atomic<TmpfileHandler> g_tmpfile{nullptr};
std::atomic<bool> g_want_uring{false};
std::atomic<bool> g_uring_accepted{false};
std::atomic<uint64_t> g_dev_requests{0};
// Per opcode; slot 0 (no opcode uses it) counts the ones past the table.
constexpr size_t kOpcodeSlots = 64;
std::atomic<uint64_t> g_by_opcode[kOpcodeSlots];
std::atomic<InitDoneHandler> g_init_done{nullptr};
std::atomic<void*> g_init_done_ctx{nullptr};

// Every reply goes out here: into the ring entry when this thread serves that ring request
// (uring.h), else to /dev/fuse.
ssize_t deliver(int fd, const iovec* iov, int count) {
  ssize_t written;
  if (uring_take_reply(iov, count, &written)) {
    return written;
  }
  return ::writev(fd, iov, count);
}

void to_fuse_attr(const struct stat& st, fuse_attr* a) {
  std::memset(a, 0, sizeof(*a));
  a->ino = st.st_ino;
  a->size = static_cast<uint64_t>(st.st_size);
  a->blocks = static_cast<uint64_t>(st.st_blocks);
  a->atime = static_cast<uint64_t>(st.st_atim.tv_sec);
  a->mtime = static_cast<uint64_t>(st.st_mtim.tv_sec);
  a->ctime = static_cast<uint64_t>(st.st_ctim.tv_sec);
  a->atimensec = static_cast<uint32_t>(st.st_atim.tv_nsec);
  a->mtimensec = static_cast<uint32_t>(st.st_mtim.tv_nsec);
  a->ctimensec = static_cast<uint32_t>(st.st_ctim.tv_nsec);
  a->mode = st.st_mode;
  a->nlink = static_cast<uint32_t>(st.st_nlink);
  a->uid = st.st_uid;
  a->gid = st.st_gid;
  a->rdev = static_cast<uint32_t>(st.st_rdev);
  a->blksize = static_cast<uint32_t>(st.st_blksize);
}

void split_timeout(double t, uint64_t* sec, uint32_t* nsec) {
  t = std::max(t, 0.0);
  *sec = static_cast<uint64_t>(t);
  *nsec = static_cast<uint32_t>((t - static_cast<double>(*sec)) * 1e9);
}

// Answers one FUSE_TMPFILE request (the same layout as FUSE_CREATE: fuse_create_in, then the
// name, which for a tmpfile says nothing) with a create-style reply.
void answer_tmpfile(int fd, const fuse_in_header& h, const char* body, size_t body_len,
                    void* userdata, TmpfileHandler handler) {
  fuse_out_header out{};
  out.unique = h.unique;
  TmpfileReply reply;
  int rc = -EINVAL;
  if (body_len >= sizeof(fuse_create_in)) {
    fuse_create_in in;
    std::memcpy(&in, body, sizeof(in));
    TmpfileRequest req;
    req.parent = h.nodeid;
    req.uid = h.uid;
    req.gid = h.gid;
    req.pid = h.pid;
    req.flags = in.flags;
    req.mode = in.mode;
    rc = handler(userdata, req, &reply);
  }
  if (rc != 0) {
    out.error = rc;
    out.len = sizeof(out);
    iovec one = {&out, sizeof(out)};
    (void)!deliver(fd, &one, 1);  // ENOENT: the opener was interrupted; nothing to undo
    return;
  }
  fuse_entry_out e{};
  e.nodeid = reply.entry.ino;
  e.generation = reply.entry.generation;
  split_timeout(reply.entry.entry_timeout, &e.entry_valid, &e.entry_valid_nsec);
  split_timeout(reply.entry.attr_timeout, &e.attr_valid, &e.attr_valid_nsec);
  to_fuse_attr(reply.entry.attr, &e.attr);
  fuse_open_out o{};
  o.fh = reply.fh;
  o.open_flags = (reply.keep_cache ? FOPEN_KEEP_CACHE : 0) | (reply.noflush ? FOPEN_NOFLUSH : 0);
  out.len = sizeof(out) + sizeof(e) + sizeof(o);
  iovec iov[3] = {{&out, sizeof(out)}, {&e, sizeof(e)}, {&o, sizeof(o)}};
  // If the write fails (the opener was interrupted), the kernel never learns of the handle or the
  // lookup; a RELEASE/FORGET never comes for them. The handler's objects then live until unmount.
  (void)!deliver(fd, iov, 3);
}

ssize_t hook_read(int fd, void* buf, size_t len, void* userdata) {
  for (;;) {
    ssize_t n = ::read(fd, buf, len);
    if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) {
      return n;
    }
    g_dev_requests.fetch_add(1, std::memory_order_relaxed);
    fuse_in_header h;
    std::memcpy(&h, buf, sizeof(h));
    // INIT is the first request: remember what the kernel offered and which reply to patch.
    if (n >= static_cast<ssize_t>(sizeof(fuse_in_header) + sizeof(uint32_t) * 4) &&
        !g_init_seen.load(std::memory_order_relaxed) && h.opcode == FUSE_INIT) {
      const char* in = static_cast<char*>(buf) + sizeof(h);
      uint32_t flags;
      std::memcpy(&flags, in + offsetof(fuse_init_in, flags), sizeof(flags));
      g_offered = flags;
      uint32_t flags2 = 0;
      if ((flags & passthrough::kInitExt) &&
          n >= static_cast<ssize_t>(sizeof(h) + passthrough::kInitInFlags2 + sizeof(flags2))) {
        std::memcpy(&flags2, in + passthrough::kInitInFlags2, sizeof(flags2));
      }
      g_offered2 = flags2;
      g_init_unique = h.unique;
      g_init_seen = true;
    }
    if (!dispatch_hooks(fd, static_cast<const char*>(buf), static_cast<size_t>(n), userdata)) {
      return n;
    }
  }
}

ssize_t hook_writev(int fd, struct iovec* iov, int count, void*) {
  fuse_out_header out;
  if (count == 2 && iov[0].iov_len >= sizeof(out) && g_init_seen.load(std::memory_order_relaxed) &&
      iov[1].iov_len >= offsetof(fuse_init_out, flags) + sizeof(uint32_t)) {
    std::memcpy(&out, iov[0].iov_base, sizeof(out));
    uint64_t want_unique = g_init_unique.load();
    if (want_unique != 0 && out.unique == want_unique && out.error == 0 &&
        g_init_unique.compare_exchange_strong(want_unique, 0)) {
      // Patch a copy: libfuse owns the buffer.
      char patched[sizeof(fuse_init_out)] = {};
      size_t n = std::min(iov[1].iov_len, sizeof(patched));
      std::memcpy(patched, iov[1].iov_base, n);
      uint32_t flags;
      std::memcpy(&flags, patched + offsetof(fuse_init_out, flags), sizeof(flags));
      uint32_t add = g_wanted.load() & g_offered.load() & ~flags;
      flags |= add;
      // Passthrough lives in flags2, read by the kernel only with FUSE_INIT_EXT in flags; the
      // kernel refuses it together with FUSE_WRITEBACK_CACHE, which we never ask for.
      if (g_want_passthrough.load() && (g_offered.load() & passthrough::kInitExt) &&
          (g_offered2.load() & passthrough::kFlags2Passthrough) &&
          !(flags & FUSE_WRITEBACK_CACHE) && n >= passthrough::kInitOutMaxStackDepth + 4) {
        flags |= passthrough::kInitExt;
        uint32_t flags2;
        std::memcpy(&flags2, patched + passthrough::kInitOutFlags2, sizeof(flags2));
        flags2 |= passthrough::kFlags2Passthrough;
        std::memcpy(patched + passthrough::kInitOutFlags2, &flags2, sizeof(flags2));
        uint32_t depth = passthrough::kMaxStackDepth;
        std::memcpy(patched + passthrough::kInitOutMaxStackDepth, &depth, sizeof(depth));
        g_passthrough = true;
      }
      // FUSE over io_uring (flags2 too): only when our rings are ready to register (uring.h).
      bool uring = false;
      if (g_want_uring.load() && kernel_offered_io_uring() &&
          n >= passthrough::kInitOutFlags2 + sizeof(uint32_t)) {
        flags |= passthrough::kInitExt;
        uint32_t flags2;
        std::memcpy(&flags2, patched + passthrough::kInitOutFlags2, sizeof(flags2));
        flags2 |= uring_abi::kFlags2OverIoUring;
        std::memcpy(patched + passthrough::kInitOutFlags2, &flags2, sizeof(flags2));
        uring = true;
      }
      std::memcpy(patched + offsetof(fuse_init_out, flags), &flags, sizeof(flags));
      g_added = add;
      // The kernel sizes ring payloads as max(FUSE_MIN_READ_BUFFER, max_write, max_pages pages).
      uint32_t max_write = 0;
      uint16_t max_pages = 0;
      std::memcpy(&max_write, patched + uring_abi::kInitOutMaxWrite, sizeof(max_write));
      std::memcpy(&max_pages, patched + uring_abi::kInitOutMaxPages, sizeof(max_pages));
      size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      size_t max_payload = std::max({uring_abi::kMinReadBuffer, static_cast<size_t>(max_write),
                                     static_cast<size_t>(max_pages) * page});
      iovec copy[2] = {iov[0], {patched, n}};
      // INIT is answered synchronously: once writev returns, the kernel has applied the reply
      // and accepts ring registrations.
      ssize_t rc = ::writev(fd, copy, 2);
      const bool accepted = uring && rc >= 0;
      g_uring_accepted = accepted;
      if (InitDoneHandler done = g_init_done.load(); done != nullptr) {
        done(g_init_done_ctx.load(), accepted, max_payload);
      }
      return rc;
    }
  }
  // An OPEN or CREATE reply the op asked to patch: fuse_open_out is the tail of the argument.
  if (passthrough::open_patch_armed() && count == 2 && iov[0].iov_len >= sizeof(out) &&
      iov[1].iov_len >= passthrough::kOpenOutSize &&
      iov[1].iov_len <= sizeof(fuse_entry_out) + passthrough::kOpenOutSize) {
    std::memcpy(&out, iov[0].iov_base, sizeof(out));
    char patched[sizeof(fuse_entry_out) + passthrough::kOpenOutSize];
    size_t n = iov[1].iov_len;
    std::memcpy(patched, iov[1].iov_base, n);
    if (passthrough::take_open_patch(out.unique, out.error == 0,
                                     patched + n - passthrough::kOpenOutSize)) {
      iovec copy[2] = {iov[0], {patched, n}};
      return deliver(fd, copy, 2);
    }
  }
  return deliver(fd, iov, count);
}

// Replies carrying file data (READ) go out by splice from a pipe: no copy through our memory, and
// no 128 KiB allocation per read (libfuse's copying fallback mallocs each reply's buffer).
ssize_t hook_splice_send(int fdin, off_t* offin, int fdout, off_t* offout, size_t len,
                         unsigned int flags, void*) {
  ssize_t written;
  if (offin == nullptr && uring_take_spliced_reply(fdin, len, &written)) {
    return written;
  }
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

}  // namespace

void ask_view_capabilities(fuse_conn_info* conn) {
  auto want = [&](unsigned cap) {
    if (conn->capable & cap) {
      conn->want |= cap;
    }
  };
  want(FUSE_CAP_SPLICE_READ);
  want(FUSE_CAP_SPLICE_WRITE);
  want(FUSE_CAP_SPLICE_MOVE);
  want(FUSE_CAP_READDIRPLUS);
  // Always READDIRPLUS, not "auto": with auto the kernel asks for attributes only in a
  // directory's first readdir batch (~170 entries of 32 KiB) and then sends one LOOKUP per
  // further entry that find, git or ls -l stats (2824 LOOKUPs for a 3000-file directory).
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  want(FUSE_CAP_PARALLEL_DIROPS);
  want(FUSE_CAP_CACHE_SYMLINKS);
  // The daemon is the only writer of the view: the kernel must not drop cached pages just because
  // an mtime it saw changed (that mtime changed through us).
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  // Writeback caching would let write(2) succeed into the page cache and fail later at flush: the
  // byte quota has to refuse at write(2), so writes go through.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // We clear suid/sgid on write and truncate ourselves (kill_suid_sgid; chown by the daemon
  // clears them in the host kernel): spares a GETATTR before every chown.
  want(FUSE_CAP_HANDLE_KILLPRIV);
  // No FUSE lock ops: the kernel keeps POSIX and flock locks locally, which is right for a view
  // that only this machine's sandbox uses.
  conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
  conn->max_write = 1u << 20;
  conn->max_readahead = 1u << 20;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  conn->time_gran = 1;
}

Status add_init_flags(fuse_session* se, const InitAdditions& add, TmpfileHandler tmpfile) {
  uint32_t wanted = 0;
  if (add.parallel_dirops) {
    wanted |= FUSE_PARALLEL_DIROPS;
  }
  if (add.handle_killpriv_v2) {
    wanted |= FUSE_HANDLE_KILLPRIV_V2;
  }
  g_wanted = wanted;
  g_want_passthrough = add.passthrough;
  g_want_uring = add.io_uring;
  g_tmpfile = tmpfile;
  fuse_custom_io io{};
  io.read = hook_read;
  io.writev = hook_writev;
  io.splice_send = hook_splice_send;
  // No splice_receive: every request then comes through hook_read (FUSE_TMPFILE must). Little is
  // lost: libfuse 3.14 receives by splice only through a pipe of its whole buffer (1 MiB + a
  // page), more than pipe-max-size allows by default, so it reads /dev/fuse with read(2) anyway.
  int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se));
  if (rc != 0) {
    errno = -rc;
    return sys_error("fuse_session_custom_io on the mounted session's /dev/fuse fd");
  }
  return {};
}

uint32_t init_flags_added() { return g_added.load(); }

bool passthrough_enabled() { return g_passthrough.load(); }

void set_init_done_handler(InitDoneHandler handler, void* ctx) {
  g_init_done_ctx = ctx;
  g_init_done = handler;
}

bool dispatch_hooks(int dev_fd, const char* req, size_t len, void* userdata) {
  fuse_in_header h;
  std::memcpy(&h, req, sizeof(h));
  TmpfileHandler tmpfile = g_tmpfile.load(std::memory_order_relaxed);
  if (tmpfile != nullptr && h.opcode == FUSE_TMPFILE) {
    answer_tmpfile(dev_fd, h, req + sizeof(h), len - sizeof(h), userdata, tmpfile);
    return true;
  }
  g_by_opcode[h.opcode < kOpcodeSlots ? h.opcode : 0].fetch_add(1, std::memory_order_relaxed);
  // The op runs and replies in this thread: its open reply can be patched by unique id.
  passthrough::note_request(h.unique);
  return false;
}

bool kernel_offered_io_uring() {
  return g_init_seen.load() && (g_offered.load() & passthrough::kInitExt) &&
         (g_offered2.load() & uring_abi::kFlags2OverIoUring);
}

bool io_uring_accepted() { return g_uring_accepted.load(); }

uint64_t dev_requests_read() { return g_dev_requests.load(std::memory_order_relaxed); }

std::vector<std::pair<std::string, uint64_t>> requests_by_opcode() {
  // Names as in <linux/fuse.h> without the FUSE_ prefix; 52 is FUSE_STATX, newer than the header.
  static constexpr std::pair<uint32_t, const char*> kNames[] = {
      {FUSE_LOOKUP, "LOOKUP"},
      {FUSE_FORGET, "FORGET"},
      {FUSE_GETATTR, "GETATTR"},
      {FUSE_SETATTR, "SETATTR"},
      {FUSE_READLINK, "READLINK"},
      {FUSE_SYMLINK, "SYMLINK"},
      {FUSE_MKNOD, "MKNOD"},
      {FUSE_MKDIR, "MKDIR"},
      {FUSE_UNLINK, "UNLINK"},
      {FUSE_RMDIR, "RMDIR"},
      {FUSE_RENAME, "RENAME"},
      {FUSE_LINK, "LINK"},
      {FUSE_OPEN, "OPEN"},
      {FUSE_READ, "READ"},
      {FUSE_WRITE, "WRITE"},
      {FUSE_STATFS, "STATFS"},
      {FUSE_RELEASE, "RELEASE"},
      {FUSE_FSYNC, "FSYNC"},
      {FUSE_SETXATTR, "SETXATTR"},
      {FUSE_GETXATTR, "GETXATTR"},
      {FUSE_LISTXATTR, "LISTXATTR"},
      {FUSE_REMOVEXATTR, "REMOVEXATTR"},
      {FUSE_FLUSH, "FLUSH"},
      {FUSE_INIT, "INIT"},
      {FUSE_OPENDIR, "OPENDIR"},
      {FUSE_READDIR, "READDIR"},
      {FUSE_RELEASEDIR, "RELEASEDIR"},
      {FUSE_FSYNCDIR, "FSYNCDIR"},
      {FUSE_GETLK, "GETLK"},
      {FUSE_SETLK, "SETLK"},
      {FUSE_SETLKW, "SETLKW"},
      {FUSE_ACCESS, "ACCESS"},
      {FUSE_CREATE, "CREATE"},
      {FUSE_INTERRUPT, "INTERRUPT"},
      {FUSE_BMAP, "BMAP"},
      {FUSE_DESTROY, "DESTROY"},
      {FUSE_IOCTL, "IOCTL"},
      {FUSE_POLL, "POLL"},
      {FUSE_NOTIFY_REPLY, "NOTIFY_REPLY"},
      {FUSE_BATCH_FORGET, "BATCH_FORGET"},
      {FUSE_FALLOCATE, "FALLOCATE"},
      {FUSE_READDIRPLUS, "READDIRPLUS"},
      {FUSE_RENAME2, "RENAME2"},
      {FUSE_LSEEK, "LSEEK"},
      {FUSE_COPY_FILE_RANGE, "COPY_FILE_RANGE"},
      {FUSE_SETUPMAPPING, "SETUPMAPPING"},
      {FUSE_REMOVEMAPPING, "REMOVEMAPPING"},
      {FUSE_SYNCFS, "SYNCFS"},
      {FUSE_TMPFILE, "TMPFILE"},
      {52, "STATX"},
  };
  std::vector<std::pair<std::string, uint64_t>> out;
  uint64_t unnamed = g_by_opcode[0].load(std::memory_order_relaxed);
  for (size_t op = 1; op < kOpcodeSlots; ++op) {
    uint64_t n = g_by_opcode[op].load(std::memory_order_relaxed);
    if (n == 0) {
      continue;
    }
    auto it = std::find_if(std::begin(kNames), std::end(kNames),
                           [op](const auto& e) { return e.first == op; });
    if (it == std::end(kNames)) {
      unnamed += n;
    } else {
      out.emplace_back(it->second, n);
    }
  }
  if (unnamed != 0) {
    out.emplace_back("OTHER", unnamed);
  }
  return out;
}

}  // namespace cordon::fusefs
