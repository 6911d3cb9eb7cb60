// The control socket of a running cordon-fs: one JSON object per line in, one per line out.
//   {"op":"snapshot","name":"before-refactor"}  ->
//   {"ok":true,"path":".../snapshots/before-refactor"}
//   {"op":"rollback","name":"before-refactor"}  -> {"ok":true}   (no name: back to the start)
//   {"op":"status"}                             -> {"ok":true,"bytes":N,"inodes":N}
//   errors                                      -> {"ok":false,"error":"..."}
#pragma once

#include <string>
#include <thread>

#include "base/result.h"
#include "base/unique_fd.h"
#include "fusefs/cowfs.h"

namespace cordon::fusefs {

class ControlServer {
 public:
  // Binds `socket_path` (mode 0600, replacing a stale socket) and serves on a thread.
  static Result<std::unique_ptr<ControlServer>> start(const std::string& socket_path, CowFs* fs,
                                                      std::string snapshots_dir);
  ~ControlServer();  // stops the thread, removes the socket

  // Handles one request line; public for tests.
  static std::string handle(CowFs* fs, const std::string& snapshots_dir, const std::string& line);

 private:
  ControlServer() = default;
  void serve();

  std::string path_;
  std::string snapshots_;
  CowFs* fs_ = nullptr;
  UniqueFd listen_;
  UniqueFd stop_;  // eventfd
  std::thread thread_;
};

// A snapshot name: 1-64 of [A-Za-z0-9._-], not starting with '.'.
bool valid_snapshot_name(const std::string& name);

}  // namespace cordon::fusefs
