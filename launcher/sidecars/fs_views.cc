// Starting the cordon-fs views of a session (see fs_views.h).
#include "launcher/sidecars/fs_views.h"

#include <fcntl.h>
#include <unistd.h>

#include "record/chain_head.h"

namespace cordon::launcher {

std::string fs_views_unavailable_reason() { return cordon_fs_unavailable_reason(); }

Result<std::vector<CowFsProcess>> start_fs_views(const Session& session, LaunchPlan& plan) {
  std::vector<CowFsProcess> procs;
  if (plan.views.empty()) {
    return procs;
  }
  detach_stale_cow_mounts(sessions_root());  // views a SIGKILLed cordon left behind
  const SessionPaths& p = session.paths();
  for (size_t i = 0; i < plan.views.size(); ++i) {
    FsView& v = plan.views[i];
    // An open of its own per daemon: writers of the record exclude each other with flock(2),
    // which only tells distinct open file descriptions apart.
    UniqueFd events(::open(p.events.c_str(), O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
    if (!events) {
      return sys_error("open(\"" + p.events + "\", O_APPEND) for cordon-fs views");
    }
    ASSIGN_OR_RETURN(UniqueFd head,
                     record::open_head_file(AT_FDCWD, p.events + std::string(record::kHeadSuffix)));
    CowFsSpawn s;
    s.binary = find_cowfs_binary();
    s.session_dir = p.dir;
    s.session_id = session.id();
    s.events_fd = events.get();
    s.events_head_fd = head.get();
    s.allow_other = plan.ids.uid != ::geteuid();
    s.home = plan.home;
    s.direct_dir = v.dir;
    s.view_root = v.workspace ? "" : v.dir;
    s.view_index = static_cast<int>(i);
    auto proc = spawn_cowfs(s);
    if (!proc.ok()) {
      return std::move(proc).error().with_context("cordon-fs view of " + v.dir);
    }
    v.mountpoint = proc->mountpoint();
    procs.push_back(std::move(proc).value());
  }
  return procs;
}

}  // namespace cordon::launcher
