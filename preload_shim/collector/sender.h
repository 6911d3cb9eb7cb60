// Who sent a shim record, as the kernel tells it: one per collector connection. The shim passes
// its own end of the connection along with its hello; the image behind the connection (exe, argv)
// is read from /proc, and then trusted once the sender is seen still holding that very socket
// close-on-exec (so it has not exec'd since it sent). Each sender's pid comes from the kernel's
// per-message credentials; a connect's addresses come from the socket passed with it. What the
// message itself said about any of these is kept under "claimed" when it differs.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/unique_fd.h"

namespace cordon::preload_shim {

class Sender {
 public:
  // `pidns_depth`: own_pidns_depth() of the collector.
  explicit Sender(size_t pidns_depth) : depth_(pidns_depth) {}

  // The connection's hello (decoded): the image's claimed exe/argv and its fd number for the
  // connection; `passed`, the socket it came with (the sender's end, kept to compare), or -1.
  void hello(const nlohmann::json& ev, const ucred& cred, int passed);
  // Rewrites a decoded record from this connection: pid, ppid, exe, argv from the kernel, claims
  // that differ under "claimed"; for net.connect, local/remote from `passed` (a socket the
  // message carried, or -1).
  void apply(nlohmann::json& ev, const ucred& cred, int passed);

 private:
  struct Pids {
    int64_t pid = -1, ppid = -1;  // in the sandbox's pid namespace; -1 = not known
  };
  Pids pids_of(pid_t host_pid);
  void verify(pid_t host_pid);

  size_t depth_;
  int channel_fd_ = -1;  // the sender's number for its end
  UniqueFd channel_;     // its end, as passed with the hello, until the image is verified
  nlohmann::json claimed_ = nlohmann::json::object();  // the hello's exe/argv/argc
  bool verified_ = false;
  nlohmann::json image_ = nlohmann::json::object();  // the kernel's exe/argv/argc, once verified
  std::unordered_map<pid_t, bool> tried_;            // senders the image was checked against
  std::unordered_map<pid_t, Pids> pids_;             // host pid -> sandbox pids (bounded)
};

}  // namespace cordon::preload_shim
