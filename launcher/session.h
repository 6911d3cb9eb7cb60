// The session record: $XDG_STATE_HOME/cordon/sessions/<id>/ (root: /var/lib/cordon/sessions/<id>/)
// with policy.json, events.jsonl, summary.json, upper/, snapshots/, control.sock.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/limits.h"
#include "policy/base/result.h"
#include "policy/policy.h"
#include "policy/record/events.h"

namespace cordon::launcher {

struct SessionPaths {
  std::string dir, policy, events, summary, upper, snapshots, control;
};

// The sessions root for the invoking user: $XDG_STATE_HOME/cordon/sessions,
// ~/.local/state/cordon/sessions, or /var/lib/cordon/sessions for root.
std::string sessions_root();
SessionPaths session_paths(const std::string& root, const std::string& id);

// How the program ended; what session.end and summary.json record.
struct SessionEnd {
  int exit_code = 0;                 // what cordon exits with
  std::optional<int> signal;         // the program died of this signal
  bool timed_out = false;
  std::string limit_hit;             // "" or "memory" / "pids" / "timeout" / ...
  std::chrono::milliseconds duration{0};
  Usage usage;
  std::string limits_backend;        // Limits::describe()
  std::string error;                 // cordon's own failure, if any
};

class Session {
 public:
  // Creates a fresh session directory (0700) with a sortable unique id
  // ("20261122-105747-3f9a2c"), writes policy.json (the effective policy) and opens events.jsonl.
  static Result<Session> create(const policy::Policy& effective,
                                const std::vector<std::string>& argv, const std::string& workspace);
  const std::string& id() const { return id_; }
  const SessionPaths& paths() const { return paths_; }
  const record::EventLog& events() const { return events_; }

  // Writes session.start (argv, workspace, limits line, pid of init).
  Status started(pid_t init_pid, const std::string& limits_line);
  // Writes limit.hit for each limit reached, session.end and summary.json (atomically: tmp+rename).
  Status finish(const SessionEnd& end);

 private:
  std::string id_;
  SessionPaths paths_;
  record::EventLog events_;
  std::vector<std::string> argv_;
  std::string workspace_;
  std::chrono::steady_clock::time_point t0_;
};

// The short summary printed on stderr at exit (unless --quiet), a few lines, each starting "cordon: ".
std::string format_summary(const std::string& id, const SessionEnd& end);

// `ID` as users type it: a full id, a unique prefix of one, or "last". Errors list candidates.
Result<std::string> resolve_session(const std::string& root, std::string_view id);

// `cordon ls` and `cordon log ID [--json]`. Return the process exit code.
int ls_command();
int log_command(const std::string& id, bool json);

}  // namespace cordon::launcher
