// Empty pipes for the splice(2) data path, reused across connections so that a busy proxy does not
// pipe2()/close() per chunk. A pipe is lent only while bytes are in flight: idle connections hold
// none.
#pragma once

#include <optional>
#include <vector>

#include "base/unique_fd.h"

namespace cordon::netproxy {

struct Pipe {
  UniqueFd r, w;
};

class PipePool {
 public:
  // An empty pipe, pooled or new; nullopt when pipe2 fails (EMFILE: the caller copies instead).
  std::optional<Pipe> acquire();
  // Takes back a pipe with nothing in it; beyond kMaxIdle it is closed.
  void release(Pipe p);
  size_t idle() const { return idle_.size(); }
  static constexpr size_t kMaxIdle = 64;
  // Each new pipe is enlarged to this (F_SETPIPE_SZ) when the system allows: fewer wakeups per
  // MiB. The kernel allocates pipe pages only while data sits in them.
  static constexpr int kPipeSize = 256 * 1024;

 private:
  std::vector<Pipe> idle_;
};

}  // namespace cordon::netproxy
