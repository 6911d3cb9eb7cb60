// inotify on the canaries' decoy files (see canary_watch.h).
#include "launcher/sidecars/canary_watch.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "launcher/channel.h"

namespace cordon::launcher {

Result<CanaryWatch> CanaryWatch::from_child(int channel, const std::vector<DecoyFile>& decoys) {
  ASSIGN_OR_RETURN(Msg msg, recv_until(channel, MsgKind::Decoys,
                                       "the sandbox ended before it reported the canaries' files"));
  CanaryWatch w;
  std::istringstream in(msg.text);
  for (const auto& d : decoys) {
    Watched one{-1, 0, 0, d.canary, d.target};
    if (!(in >> one.wd >> one.dev >> one.ino) || one.wd < 0) {
      return make_error("the sandbox's report on the canaries' files is malformed");
    }
    w.watched_.push_back(std::move(one));
  }
  if (!msg.fd || msg.value != static_cast<int32_t>(decoys.size())) {
    return make_error("the sandbox's report on the canaries' files is malformed");
  }
  w.fd_ = std::move(msg.fd);
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
          touched_.insert(w.canary);
          (void)events.emit("fs.canary", {{"canary", w.canary},
                                          {"path", w.target},
                                          {"via", "inotify"},
                                          {"reason", "the " + w.canary + " canary's decoy file " +
                                                         w.target + " was opened"}});
        }
      }
    }
  }
}

}  // namespace cordon::launcher
