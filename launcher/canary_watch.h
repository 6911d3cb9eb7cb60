// Reads of the canaries' decoy files, seen by the kernel: an inotify watch on each decoy's host
// file, which every open through its read-only mount in the sandbox reaches whatever the program
// is (static, raw syscalls). inotify names no process; the preload shim's fs.canary does.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/plan.h"
#include "record/events.h"

namespace cordon::launcher {

class CanaryWatch {
 public:
  CanaryWatch() = default;
  // Watches each decoy for IN_OPEN; with no decoys, nothing (fd() is -1).
  static Result<CanaryWatch> start(const std::vector<DecoyFile>& decoys);

  int fd() const { return fd_.get(); }
  // Reads every pending notification: one fs.canary event (source launcher, "via": "inotify")
  // per open of a decoy.
  void drain(const record::EventLog& events);
  // The canaries whose files were opened, by name.
  const std::set<std::string>& touched() const { return touched_; }

 private:
  struct Watched {
    int wd;
    DecoyFile decoy;
  };
  UniqueFd fd_;
  std::vector<Watched> watched_;
  std::set<std::string> touched_;
};

}  // namespace cordon::launcher
