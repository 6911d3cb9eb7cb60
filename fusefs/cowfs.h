// cordon-fs's filesystem: the merged copy-on-write view of an upper layer over a lower directory,
// served through the libfuse3 low-level API, with path policy and quotas.
#pragma once

#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

#include "base/result.h"
#include "base/unique_fd.h"
#include "fusefs/access_control.h"
#include "fusefs/id_map.h"
#include "fusefs/inode_table.h"
#include "fusefs/kernel/kernel_init.h"
#include "fusefs/quota.h"
#include "policy/policy.h"
#include "record/events.h"

namespace cordon::fusefs {

struct FsConfig {
  std::string lower;  // the real workspace; never written
  std::string upper;  // the session's layer directory (created if missing)
  policy::FilesystemPolicy policy;
  const record::EventLog* events = nullptr;  // may be null or disabled
  double cache_timeout = 86400.0;  // attr/entry validity: the daemon is the view's only writer
  // cow mode: the ids the sandbox's requests carry. Set, the workspace owner's files are shown as
  // theirs (id_map.h); unset, the view shows the host's owners.
  std::optional<Ids> agent;
  std::optional<Ids> owner;  // the workspace's owner; unset: the owner of `lower`
  // Direct mode (cordon-fs --direct): `upper` is a real host directory, written at once, with no
  // lower layer: a pass-through view whose job is the path policy, for a filesystem.write grant
  // or a read-write workspace. No quota, no snapshots, and no page or directory cache kept
  // across opens: the host may change the directory while the view is mounted.
  bool direct = false;
  // Paths are decided as view_root + "/" + the path in the view (absolute host paths: a grant
  // outside the workspace); empty: workspace-relative paths.
  std::string view_root;
};

class CowFs {
 public:
  // Opens both layers, removes leftovers of an interrupted copy-up, scans the upper for quota.
  static Result<std::unique_ptr<CowFs>> create(FsConfig config);
  ~CowFs();

  static const fuse_lowlevel_ops& operations();
  // Answers FUSE_TMPFILE (O_TMPFILE), which libfuse 3.14 cannot dispatch: see kernel_init.h.
  static TmpfileHandler tmpfile_handler();
  // Needed for cache invalidation on rollback; set once the session exists.
  void set_session(fuse_session* se) { session_ = se; }

  // Copies the upper layer to `dest_dir` (which must not exist) at a consistent point: ops are
  // paused for the copy. Reflinks where the filesystem can.
  Status snapshot_to(const std::string& dest_dir);
  // Replaces the upper layer by a copy of `snapshot_dir` ("" = empty: back to the start), while
  // mounted: ops are paused, every known inode is re-resolved, then the kernel's caches of the
  // view are invalidated so the program sees the restored tree at once.
  Status rollback_to(const std::string& snapshot_dir);

  Usage usage() const { return quota_.usage(); }
  // Data-path counters since mount (the control socket's status shows them): FUSE_READ and
  // FUSE_WRITE requests served, and opens answered with FUSE passthrough.
  struct IoStats {
    bool passthrough = false;  // the kernel accepted FUSE_PASSTHROUGH at INIT
    uint64_t reads = 0, writes = 0, passthrough_opens = 0;
  };
  IoStats io_stats() const;
  const AccessControl& access() const { return access_; }
  // Whether the view serves extended attributes: always for --direct (the host directory's own),
  // for the copy-on-write view only when the policy's filesystem.xattrs says so.
  bool keeps_xattrs() const { return config_.direct || config_.policy.xattrs; }

  // The ops, defined in cowfs_*.cc behind fusefs/cowfs_impl.h (public so the FUSE callbacks can
  // reach them; not an API).
  struct Impl;

 private:
  CowFs(FsConfig config, UniqueFd lower, UniqueFd upper, Usage usage, IdMap ids);
  friend struct Impl;

  FsConfig config_;
  UniqueFd lower_root_;
  UniqueFd upper_root_;
  AccessControl access_;
  IdMap ids_;
  Quota quota_;
  InodeTable table_;
  std::shared_mutex layer_mu_;
  fuse_session* session_ = nullptr;
  std::atomic<uint64_t> reads_{0}, writes_{0}, pt_opens_{0};
  std::atomic<bool> pt_failure_logged_{false};
};

}  // namespace cordon::fusefs
