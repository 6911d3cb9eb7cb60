// The supervisor's side of a detached session (`cordon run --detach`): the control socket that
// `cordon exec` and `cordon stop` connect to, the socketpair to the sandbox's exec server, and the
// idle timer. Everything here runs in the supervisor, outside the sandbox.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/supervise.h"
#include "record/events.h"

namespace cordon::launcher {

// The default for --idle-timeout: a session no exec used for this long ends.
inline constexpr std::chrono::minutes kDefaultIdleTimeout{15};
// In the session directory: the control socket and the session's --name.
inline constexpr const char* kExecSocketName = "exec.sock";
inline constexpr const char* kSessionNameFile = "name";

struct SessionControlOptions {
  std::string session_dir;  // 0700, the caller's: the socket inside is out of others' reach
  std::string name;         // --name ("" = none), written to kSessionNameFile
  std::chrono::milliseconds idle_timeout = kDefaultIdleTimeout;  // 0 = none
};

class SessionControl {
 public:
  enum class End { None, Stopped, Idle };

  // Binds the control socket (0600) and makes the exec server's socketpair (CLOEXEC both ends:
  // no program of the sandbox inherits either).
  static Result<std::unique_ptr<SessionControl>> open(const SessionControlOptions& o,
                                                      const record::EventLog& events);
  SessionControl(const SessionControl&) = delete;
  SessionControl& operator=(const SessionControl&) = delete;
  ~SessionControl();  // unlinks the socket; callers still waiting see the connection close

  // The end the clone hands to init (contain.h's exec_fd).
  int sandbox_end() const { return sandbox_end_.get(); }
  // After the clone: closes our copy of the sandbox's end, remembers init's pid and starts the
  // idle timer. (Callers from inside any sandbox are refused by their pid namespace.)
  void started(pid_t init_pid);
  // For supervise(): new connections, the exec server's reports, the idle timer, the waiting
  // callers. Each returns
  // true when the session must end now (`cordon stop`, the idle timeout). They hold `this`.
  std::vector<SuperviseSpec::Watch> watches();
  // Why the session was ended from here (None: it was not).
  End end() const { return end_; }

 private:
  SessionControl(const record::EventLog& events) : events_(events) {}
  bool on_connection();
  bool on_reports();
  bool on_idle();
  bool on_callers();
  void arm_idle();
  void signal_program(uint64_t id, int sig);

  struct Pending {
    UniqueFd conn;  // the caller's connection: its reply goes there
    uid_t uid = 0;
    nlohmann::json argv;  // for exec.start, written once the server says the pid
  };

  const record::EventLog& events_;
  std::string socket_path_;
  // callers_: an epoll set of the pending callers' connections (a signal to pass on, or the
  // caller gone), so that any number of them is one watch.
  UniqueFd listen_, supervisor_end_, sandbox_end_, idle_, callers_;
  std::chrono::milliseconds idle_timeout_{0};
  pid_t init_pid_ = -1;
  uint64_t next_id_ = 0;
  std::map<uint64_t, Pending> pending_;
  std::vector<UniqueFd> stoppers_;  // `cordon stop` callers: they wait for the record's end
  End end_ = End::None;
};

}  // namespace cordon::launcher
