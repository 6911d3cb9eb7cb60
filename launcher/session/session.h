// The session record: $XDG_STATE_HOME/cordon/sessions/<id>/ (root: /var/lib/cordon/sessions/<id>/)
// with policy.json, events.jsonl, summary.json, upper/, snapshots/, control.sock.
#pragma once

#include <chrono>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "launcher/limits/limits.h"
#include "launcher/sidecars/event_sink.h"
#include "launcher/sidecars/otlp_exporter.h"
#include "policy/policy.h"
#include "record/events.h"

namespace cordon::launcher {

struct SessionPaths {
  std::string dir, policy, events, summary, upper, snapshots, control;
  std::string work;  // overlayfs' workdir for upper/ (cow mode): same filesystem, empty at start
};

// The sessions root for the invoking user: $XDG_STATE_HOME/cordon/sessions,
// ~/.local/state/cordon/sessions, or /var/lib/cordon/sessions for root.
// $CORDON_STATE_DIR, when set, replaces the state directory: sessions go to
// $CORDON_STATE_DIR/sessions (tests use it to isolate themselves).
std::string sessions_root();
// --state-dir DIR: makes DIR the state directory of this cordon and of every cordon process it
// starts, by setting $CORDON_STATE_DIR to DIR made absolute, so that sessions_root() stays the
// one place that decides where records live. DIR must be an existing directory (in a pod, the
// mountPath of a volume): anything else is an error that names the fix, before a session exists.
Status use_state_dir(const std::string& dir);
SessionPaths session_paths(const std::string& root, const std::string& id);

// How the program ended; what session.end and summary.json record.
struct SessionEnd {
  int exit_code = 0;          // what cordon exits with
  std::optional<int> signal;  // the program died of this signal
  bool timed_out = false;
  std::string limit_hit;  // "" or "memory" / "pids" / "timeout" / ...
  std::chrono::milliseconds duration{0};
  Usage usage;
  std::string limits_backend;  // Limits::describe()
  std::string error;           // cordon's own failure, if any
  // The limits as configured, named in messages ("memory limit (256 MiB) reached"); 0 = unknown.
  // Session::summary() fills them from the effective policy.
  uint64_t memory_limit = 0;
  uint32_t pids_limit = 0;
  std::chrono::milliseconds timeout{0};
  // cow mode: entries changed in the copy-on-write layer (count_cow_changes) and where it is.
  std::optional<uint64_t> cow_changed;
  bool cow_changed_more = false;  // the walk stopped at its bound: "more than cow_changed"
  std::string cow_upper;
  // cow mode ran on kernel overlayfs because cordon-fs could not be used here: why ("" = it ran
  // through cordon-fs, or not in cow mode).
  std::string cow_fallback;
  // Why the program could not write the workspace, when the host's modes kept it out
  // (LaunchPlan::write_warning): one line.
  std::string workspace_unwritable;
  // cordon-fs ended before the program did ("signal 9", ...): the view failed from then on.
  std::string cow_daemon_died;
  // The same for a view of a read-write directory (fs_views.h): "DIR (signal 9)".
  std::string view_daemon_died;
  // Attempts to create a user namespace refused while process.nested_sandbox was off.
  uint64_t userns_refused = 0;
  // network.allow sessions: "cordon: " lines on the network (top hosts, refusals, a proxy death),
  // from net_summary.h; printed as they are.
  std::string net_lines;
  // The canaries touched: a decoy file opened, a decoy value refused on its way out (by name).
  std::set<std::string> canaries_touched;
  // network.on_exfil: kill ended the session (exit kExitExfil).
  bool exfil_killed = false;
};

// Counts what the program changed in a cow session's upper/ against the workspace it lies over:
// every non-directory entry (new or modified files, symlinks, whiteouts for deletions) and every
// directory the lower does not have. Stops after `limit` entries (`more` is then set).
struct CowChanges {
  uint64_t count = 0;
  bool more = false;
};
CowChanges count_cow_changes(const std::string& upper, const std::string& lower, uint64_t limit);

// In a --learn session's directory: the policy the user passed, before --learn widened it.
inline constexpr const char* kRequestedPolicy = "policy.requested.json";

class Session {
 public:
  // Creates a fresh session directory (0700) with a sortable unique id
  // ("20261122-105747-3f9a2c"), writes policy.json (the effective policy) and opens events.jsonl.
  // `learned_from`, for a `cordon run --learn` session: the policy the user asked for, before
  // the widening, kept as kRequestedPolicy for `cordon policy suggest`; session.start then says
  // "learn": true.
  static Result<Session> create(const policy::Policy& effective,
                                const std::vector<std::string>& argv, const std::string& workspace,
                                const policy::Policy* learned_from = nullptr);
  const std::string& id() const { return id_; }
  const SessionPaths& paths() const { return paths_; }
  const record::EventLog& events() const { return events_; }

  // Writes session.start (argv, workspace, limits line, pid of init).
  Status started(pid_t init_pid, const std::string& limits_line);
  // Writes limit.hit for each limit reached, session.end and summary.json (atomically: tmp+rename).
  Status finish(const SessionEnd& end);
  // format_summary(id(), end) with end's configured limits filled in from the effective policy.
  std::string summary(const SessionEnd& end) const;
  // The last step of every `cordon run` path: finish(), a failure to write the record said on
  // stderr (the program's status still stands), then the summary on stderr unless `quiet`.
  void close(const SessionEnd& end, bool quiet);

 private:
  SessionEnd with_limits(SessionEnd end) const;

  std::string id_;
  SessionPaths paths_;
  record::EventLog events_;
  std::vector<std::string> argv_;
  std::string workspace_;
  bool learn_ = false;  // a --learn session (create's learned_from)
  std::chrono::steady_clock::time_point t0_;
  UniqueFd dir_;             // the session directory; files are written relative to it
  std::string started_at_;   // RFC 3339, at create()
  std::string limits_line_;  // from started()
  pid_t init_pid_ = 0;
  uint64_t memory_limit_ = 0;  // the effective policy's limits, for limit.hit and the summary
  uint32_t pids_limit_ = 0;
  std::chrono::milliseconds timeout_{0};
  bool finished_ = false;          // finish() writes session.end once
  uint64_t record_max_bytes_ = 0;  // record.max_bytes, for summary.json
  std::string record_line_;        // the exit summary's record line, from finish()
  // record.events_to (--events-to): every line of the record copied as it is written; finish()
  // gives the sink a moment for the last lines, then counts what it did not take.
  std::unique_ptr<RecordFollower> sink_;
  // record.otlp (--otlp): the same lines as OTLP logs to a collector, stopped alike.
  std::unique_ptr<RecordFollower> otlp_;
};

// The short summary printed on stderr at exit (unless --quiet), a few lines, each starting "cordon:
// ".
std::string format_summary(const std::string& id, const SessionEnd& end);

// `ID` as users type it: a full id, a unique prefix of one, or "last". Errors list candidates.
Result<std::string> resolve_session(const std::string& root, std::string_view id);

// Which events `cordon log` shows; every field empty = all. Filters such as --net slot in here.
struct LogFilter {
  std::vector<std::string> kind_prefixes;  // e.g. {"net."}: kind starts with one of them
  std::string source;                      // launcher | netproxy | fusefs | shim
  std::string decision;                    // allow | deny
  bool empty() const { return kind_prefixes.empty() && source.empty() && decision.empty(); }
};

struct LogOptions {
  bool json = false;   // the raw lines, unchanged
  bool color = false;  // red/green decisions (log_command(id, json): on a tty, unless NO_COLOR)
  LogFilter filter;
  bool net = false;     // --net: the network summary (net_summary.h) instead of the events
  bool follow = false;  // --follow: keep printing new events until the session ends
};

// `cordon ls` and `cordon log ID [--json]`. Return the process exit code.
int ls_command();
// `cordon ls --ids` (hidden, for shell completion): the ids alone, one a line, newest last.
int ls_ids_command();
int log_command(const std::string& id, bool json, bool follow = false);
// `cordon log ID --net`: by host, by method, by status, and the refusals (--json: the net.* lines).
int log_net_command(const std::string& id, bool json);
// `cordon log ID --verify`: checks the record's hash chain and names the first bad line.
inline constexpr int kVerifyOk = 0;           // every line verifies (a torn last line is said)
inline constexpr int kVerifyBroken = 1;       // a line edited, removed, added or moved
inline constexpr int kVerifyCannotCheck = 2;  // no such session, events.jsonl unreadable
int log_verify_command(const std::string& id);
int log_verify_command(const std::string& root, const std::string& id, std::ostream& out,
                       std::ostream& err);
// `cordon log ID --verify --from FILE|-`: in a stream that mixes the record with other output (a
// container's log, where --events-to stdout shares the program's stdout), the lines of session
// ID that continue its hash chain are cordon's; a line that claims the session and does not is
// named. A log agent's prefix before the line's '{' is skipped. Exit: kVerifyOk every line that
// claims the session is in its chain; kVerifyBroken some are not; kVerifyCannotCheck the stream
// is unreadable or holds no line of the session.
int log_verify_stream_command(const std::string& id, std::istream& in, const std::string& name,
                              std::ostream& out, std::ostream& err);
int log_verify_stream_command(const std::string& id, const std::string& path);
// The same over an explicit root and streams (tests, and later filters from main.cc).
int ls_command(const std::string& root, std::ostream& out, std::ostream& err);
int ls_ids_command(const std::string& root, std::ostream& out, std::ostream& err);
int log_command(const std::string& root, const std::string& id, const LogOptions& opts,
                std::ostream& out, std::ostream& err);

}  // namespace cordon::launcher
