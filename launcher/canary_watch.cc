// inotify on the canaries' decoy files (see canary_watch.h).
#include "launcher/canary_watch.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>

namespace cordon::launcher {

Result<CanaryWatch> CanaryWatch::start(const std::vector<DecoyFile>& decoys) {
  CanaryWatch w;
  if (decoys.empty()) {
    return w;
  }
  w.fd_.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!w.fd_) {
    return sys_error("inotify_init1() for the canaries' files",
                     "raise fs.inotify.max_user_instances, or set \"canaries\": false");
  }
  for (const auto& d : decoys) {
    const int wd = ::inotify_add_watch(w.fd_.get(), d.host_path.c_str(), IN_OPEN);
    if (wd < 0) {
      return sys_error("inotify_add_watch(\"" + d.host_path + "\", IN_OPEN) for a canary",
                       "raise fs.inotify.max_user_watches, or set \"canaries\": false");
    }
    w.watched_.push_back({wd, d});
  }
  return w;
}

void CanaryWatch::drain(const record::EventLog& events) {
  if (!fd_) {
    return;
  }
  alignas(inotify_event) char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n <= 0) {
      return;  // EAGAIN: all read
    }
    for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if ((ev->mask & IN_OPEN) == 0) {
        continue;  // IN_IGNORED, IN_Q_OVERFLOW
      }
      for (const auto& w : watched_) {
        if (w.wd == ev->wd) {
          touched_.insert(w.decoy.canary);
          (void)events.emit("fs.canary",
                            {{"canary", w.decoy.canary},
                             {"path", w.decoy.target},
                             {"via", "inotify"},
                             {"reason", "the " + w.decoy.canary + " canary's decoy file " +
                                            w.decoy.target + " was opened"}});
        }
      }
    }
  }
}

}  // namespace cordon::launcher
