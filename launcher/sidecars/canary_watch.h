// Opens of the canaries' decoy files, seen by the kernel: the inotify instance the sandbox's
// child made on them (sandbox/decoys.h), which every open in the sandbox reaches whatever the
// program is (static, raw syscalls). inotify names no process; the preload shim's fs.canary,
// matched by the collector on the device and inode reported here, does.
#pragma once

#include <cstdint>
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
  struct Watched {
    int wd = -1;
    uint64_t dev = 0, ino = 0;  // the file in the sandbox
    std::string canary;         // DecoyFile's, without the decoy itself
    std::string target;
  };

  CanaryWatch() = default;
  // Reads the sandbox's channel up to the child's MsgKind::Decoys report on `decoys` (in plan
  // order). A setup error the child sends first, or the channel's end, is the error.
  static Result<CanaryWatch> from_child(int channel, const std::vector<DecoyFile>& decoys);

  int fd() const { return fd_.get(); }  // -1 without decoys
  const std::vector<Watched>& watched() const { return watched_; }
  // Reads every pending notification: one fs.canary event (source launcher, "via": "inotify")
  // per open of a decoy.
  void drain(const record::EventLog& events);
  // The canaries whose files were opened, by name.
  const std::set<std::string>& touched() const { return touched_; }

 private:
  UniqueFd fd_;
  std::vector<Watched> watched_;
  std::set<std::string> touched_;
};

}  // namespace cordon::launcher
