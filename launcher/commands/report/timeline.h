// The session as lanes: one per process image the shim saw start (pid, exe, argv), in tree order
// under a first lane for cordon itself, and which lane each event belongs to.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cordon::launcher::report {

inline constexpr size_t kMaxLanes = 1000;  // processes past it are drawn on cordon's lane

class Timeline {
 public:
  // Reads the shim's proc.start records (the lanes), its credentials (host pid -> sandbox pid)
  // and the launcher's net.attribution joins (proxy client -> sandbox pid). `t_ms[i]` is event
  // i's time in milliseconds from the session's start.
  Timeline(const std::vector<nlohmann::json>& events, const std::vector<double>& t_ms);

  // The lane of event i: its process's, else its parent's, else 0 (cordon's).
  size_t lane_of(size_t i) const { return lane_[i]; }
  // The lanes in display order: id, parent, depth, pid, exe, argv, t0, t1 (ms).
  nlohmann::json lanes_json() const;
  // Removes from `view` (view_of an event on lane `lane`) the fields the lane's proc.start holds
  // with the same value, and returns which as a mask of kFold* bits (0: none). The page puts
  // them back when it shows the event: the shim repeats them in every record.
  unsigned fold(nlohmann::json& view, size_t lane) const;
  static constexpr unsigned kFoldExe = 1, kFoldArgv = 2, kFoldArgc = 4, kFoldCred = 8,
                            kFoldPpid = 16;
  // The text that names lane `lane` in a table: "curl (pid 4)".
  std::string label(size_t lane) const;

 private:
  struct Lane {
    int64_t pid = -1, ppid = -1;
    size_t parent = 0;
    std::string exe;
    nlohmann::json argv, argc, cred;  // as view_of shows them
    double t0 = 0, t1 = 0;
    // pid and ppid as the process claimed them: gone before they were checked
    bool claimed = false;
  };
  // 0 when unknown. Lanes of claimed pids and of verified ones are looked up apart, so a process
  // that lies about its pid never lands on the lane of the process it names.
  size_t find(int64_t pid, double t, bool claimed = false) const;
  size_t assign(const nlohmann::json& ev, double t) const;

  std::vector<Lane> lanes_;
  std::map<int64_t, std::vector<size_t>> by_pid_;  // sandbox pid -> its lanes, in start order
  std::map<int64_t, std::vector<size_t>> by_claimed_pid_;  // the same for claimed pids
  std::map<int64_t, int64_t> sandbox_pid_;                 // host pid -> sandbox pid
  std::map<std::string, int64_t> client_pid_;              // proxy client address -> sandbox pid
  std::vector<size_t> lane_;
};

}  // namespace cordon::launcher::report
