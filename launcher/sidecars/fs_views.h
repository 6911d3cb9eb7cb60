// cordon-fs in direct mode for the plan's views (LaunchPlan::views): a read-write directory (a
// filesystem.write grant, the rw workspace) whose deny, deny_write and protect rules must hold
// for paths created later too, decided by the daemon at every access. One daemon per view.
#pragma once

#include <string>
#include <vector>

#include "launcher/plan.h"
#include "launcher/session/session.h"
#include "launcher/sidecars/cowfs_sidecar.h"

namespace cordon::launcher {

// Why views cannot be mounted here ("" when they can): no cordon-fs binary, or no FUSE for this
// uid. Unlike cow mode there is no fallback: cordon then refuses a plan that needs a view.
std::string fs_views_unavailable_reason();

// Starts a daemon per view (call wait_ready() on each before the clone) and points each view's
// mountpoint at its mount. The processes stop their daemons when destroyed.
Result<std::vector<CowFsProcess>> start_fs_views(const Session& session, LaunchPlan& plan);

}  // namespace cordon::launcher
