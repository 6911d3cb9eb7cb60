// The sandbox's root: a tmpfs composed from the plan's mount list, then pivot_root into it.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/plan.h"

namespace cordon::launcher {

// cow mode: the session's upper/ and work/, opened by the child while it still has the invoking
// user's host uid (as root: uid 0, owner of the 0700 session directory). After the switch to the
// sandbox's id the session directory is out of its reach; the fds are not.
struct CowLayers {
  UniqueFd upper;
  UniqueFd work;
  UniqueFd fuse_view;  // cow through cordon-fs: a detached clone of the host mount (open_tree)
  std::vector<UniqueFd> views;  // LaunchPlan::views' mounts, cloned the same way, in order
};

// Parent side, once the session exists (cow mode only; a no-op otherwise): hands upper/ and work/
// to the sandbox's id. overlayfs creates its work/work directory and checks every create/rename
// in upper/ with the credentials of the mounter, and the mounter is the sandbox's id. upper/ also
// takes the workspace's permission bits, since it becomes the merged root's inode.
Status prepare_cow_layers_from_parent(const LaunchPlan& plan);

// Child side, before become_sandbox_user_in_child (cow mode only; empty fds otherwise). Through
// cordon-fs only fuse_view is set: the daemon's mount at plan.cow_mount, cloned. Every
// LaunchPlan::views mount is cloned too, whatever the mode.
Result<CowLayers> open_cow_layers_in_child(const LaunchPlan& plan);

// Child side, in the new user + mount + pid namespaces, after the id switch. Replays
// plan.mounts under a fresh tmpfs root, makes the root read-only, pivots into it, detaches the
// host's tree and chdirs to plan.cwd. Any failure aborts with the syscall, its arguments, errno
// and a fix: a half-built root is never used. `cow` is consumed: its fds are closed on return.
Status compose_root_in_child(const LaunchPlan& plan, CowLayers cow);

// Child side, in new user + mount + pid namespaces: a fresh procfs at `dst` with the kernel knobs
// beneath it read-only (unless `nested_sandbox`), as the sandbox's root gets it. Fails where the
// host's /proc is partly covered by other mounts (masked /proc in containers).
Status mount_proc(const std::string& dst, bool nested_sandbox);

// Child side, in new user + mount namespaces: creates (and drops) the superblock of the overlay
// that cow mode mounts when cordon-fs is not available, on these scratch directories, so the
// kernel's own checks of the upper layer's filesystem run (cordon doctor). True when tried;
// false when the kernel cannot take overlay layers by fd (before Linux 6.13) and nothing was
// tried. The error carries the kernel's fs_context message ("... not supported as upperdir").
Result<bool> try_cow_overlay(const std::string& lower, const std::string& upper,
                             const std::string& work);

}  // namespace cordon::launcher
