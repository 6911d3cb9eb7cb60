// The merged copy-on-write view: the FUSE ops table, construction, I/O counters. The ops
// themselves live in cowfs_*.cc by concern; cowfs_impl.h holds their lock order and reply rule.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fusefs/cowfs_impl.h"
#include "fusefs/kernel/passthrough.h"
#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {

void CowFs::Impl::op_init(void*, fuse_conn_info* conn) { ask_view_capabilities(conn); }

fuse_lowlevel_ops CowFs::Impl::make_ops() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.setattr = op_setattr;
  ops.readlink = op_readlink;
  ops.mknod = op_mknod;
  ops.mkdir = op_mkdir;
  ops.symlink = op_symlink;
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.rename = op_rename;
  ops.link = op_link;
  ops.open = op_open;
  ops.create = op_create;
  ops.read = op_read;
  ops.write_buf = op_write_buf;
  ops.flush = op_flush;
  ops.release = op_release;
  ops.fsync = op_fsync;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.readdirplus = op_readdirplus;
  ops.releasedir = op_releasedir;
  ops.fsyncdir = op_fsyncdir;
  ops.statfs = op_statfs;
  ops.setxattr = op_setxattr;
  ops.getxattr = op_getxattr;
  ops.listxattr = op_listxattr;
  ops.removexattr = op_removexattr;
  ops.fallocate = op_fallocate;
  ops.lseek = op_lseek;
  ops.copy_file_range = op_copy_file_range;
  return ops;
}

TmpfileHandler CowFs::tmpfile_handler() {
  return [](void* userdata, const TmpfileRequest& req, TmpfileReply* reply) -> int {
    auto* self = static_cast<CowFs*>(userdata);
    std::shared_lock lk(self->layer_mu_);
    return firewall([&] { return Impl::do_tmpfile(self, req, reply); });
  };
}

const fuse_lowlevel_ops& CowFs::operations() {
  static const fuse_lowlevel_ops ops = Impl::make_ops();
  return ops;
}

CowFs::CowFs(FsConfig config, UniqueFd lower, UniqueFd upper, Usage usage, IdMap ids)
    : config_(std::move(config)),
      lower_root_(std::move(lower)),
      upper_root_(std::move(upper)),
      access_(config_.policy, config_.events, config_.view_root,
              config_.view_root.empty() ? (config_.direct ? config_.upper : config_.lower) : ""),
      ids_(ids),
      quota_(config_.policy.quota.bytes, config_.policy.quota.inodes, usage) {}

CowFs::~CowFs() = default;

CowFs::IoStats CowFs::io_stats() const {
  IoStats s;
  s.passthrough = passthrough_enabled();
  s.reads = reads_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  s.passthrough_opens = pt_opens_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace cordon::fusefs
