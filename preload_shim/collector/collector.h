// The launcher-side end of the shim's event channel: a listening unix SOCK_SEQPACKET socket whose
// messages become events.jsonl records with source "shim".
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "preload_shim/wire.h"
#include "record/events.h"

namespace cordon::preload_shim {

class Collector {
 public:
  struct Stats {
    std::atomic<uint64_t> events{0};       // records written
    std::atomic<uint64_t> malformed{0};    // messages rejected by decode_message
    std::atomic<uint64_t> dropped{0};      // events shims reported as dropped (full buffers)
    std::atomic<uint64_t> connections{0};  // process images that connected
    std::atomic<uint64_t> refused{0};      // connections past kMaxConnections, closed at once
  };
  // Each connection is an fd in cordon: a sandbox cannot make it run out of them.
  static constexpr size_t kMaxConnections = 4096;

  // Binds `socket_path` (a stale socket there is replaced; any other file is an error), mode 0666
  // so every uid in the sandbox can report; `log` receives the records.
  static Result<std::unique_ptr<Collector>> listen(const std::string& socket_path,
                                                   record::EventLog log);
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  // Serves until `stop_fd` (an eventfd or pipe) becomes readable, then drains what is queued.
  // Meant for a thread of its own; exceptions never leave it.
  Status run(int stop_fd);
  // One bounded step for callers with their own loop: waits up to timeout_ms, handles what is
  // ready.
  Status poll_once(int timeout_ms);

  // The canaries' decoy files as the sandbox's kernel names them. A shim's fs.canary message (an
  // open of a file named like a decoy, wire::kDecoyNames) becomes a record only when its device
  // and inode are one of these, with that decoy's canary; the rest are dropped. Callable from
  // any thread; set before the program starts, so none of its opens is judged without them.
  struct DecoyId {
    uint64_t dev = 0, ino = 0;
    std::string canary;
  };
  void set_decoys(std::vector<DecoyId> decoys);

  int epoll_fd() const { return epoll_.get(); }
  const std::string& socket_path() const { return path_; }
  const Stats& stats() const { return stats_; }

 private:
  Collector();
  Status wait_and_dispatch(int timeout_ms, bool* stop, uint64_t* handled = nullptr);
  void accept_all();
  // Reads every queued message on `fd`; false when the peer is gone.
  bool read_all(int fd);
  struct Connection;
  // `passed`: the socket a connect record came with (SCM_RIGHTS), or -1.
  void handle(Connection& conn, const uint8_t* data, size_t len, const ::ucred* cred, int passed);
  // Appends the records read in one wake-up, in the order they were read.
  void flush_pending();

  std::string path_;
  record::EventLog log_;
  UniqueFd listen_fd_;
  UniqueFd epoll_;
  size_t pidns_depth_ = 1;  // own_pidns_depth(): where a sender's sandbox pid is in its NSpid
  std::unordered_map<int, std::unique_ptr<Connection>> conns_;
  // Read, checked and acknowledged, not yet appended: a wake-up answers every new sender's hello
  // before it spends time on the record (a chained append costs tens of microseconds), so a
  // short-lived process is identified before it exits.
  std::vector<nlohmann::json> pending_;
  struct RecvBatch {
    static constexpr int kSize = 32;
    alignas(8) uint8_t data[kSize][wire::kMaxMessage + 64];
    // Credentials and at most one fd: the kernel closes any further fds a sender attaches.
    alignas(cmsghdr) char control[kSize][CMSG_SPACE(sizeof(::ucred)) + CMSG_SPACE(sizeof(int))];
    iovec iov[kSize];
    mmsghdr msgs[kSize];
  };
  std::unique_ptr<RecvBatch> batch_;  // receive buffers, allocated once
  // Keeps an fs.canary record when it names a decoy (and says which); false: drop it.
  bool match_decoy(nlohmann::json& ev);
  std::mutex decoys_mu_;
  std::vector<DecoyId> decoys_;
  Stats stats_;
};

}  // namespace cordon::preload_shim
