// The session record written by `cordon run`: the directory, policy.json, session.start,
// limit.hit/session.end events and summary.json.
#include "launcher/session/session.h"

#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "launcher/diagnostics.h"
#include "launcher/session/record_summary.h"
#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"
#include "policy/serialize.h"
#include "record/chain_head.h"

namespace cordon::launcher {

namespace {

constexpr int kMaxIdAttempts = 16;
// summary.json's event counts come from a bounded scan so a huge log cannot stall the exit.
constexpr size_t kMaxScanBytes = 16u << 20;

// mkdir -p with mode 0700 for every directory cordon creates; existing ones are left alone.
Status make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') {
      continue;
    }
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return sys_error("mkdir(\"" + prefix + "\", 0700)",
                       "set CORDON_STATE_DIR to a writable directory");
    }
  }
  return {};
}

std::string current_dir() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) != nullptr ? std::string(buf) : std::string();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) {
    return {};
  }
  return buf;
}

std::string rfc3339_of(std::chrono::system_clock::time_point tp) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(tp.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(us / 1000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(us % 1000000));
  return buf;
}

Status write_all(int fd, const std::string& data, const std::string& what) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return sys_error("write(" + what + ")");
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

std::string pretty_json(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// Creates dir/<name> exclusively (never through a symlink) and writes `data` to it; `mtime`, when
// given, is stamped on it with full nanosecond precision.
Status write_new_file(int dir_fd, const char* name, const std::string& data, bool sync,
                      const struct timespec* mtime = nullptr) {
  int fd = ::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return sys_error(std::string("openat(session dir, \"") + name + "\", O_CREAT|O_EXCL)");
  }
  UniqueFd f(fd);
  TRY(write_all(fd, data, name));
  if (mtime != nullptr) {
    const struct timespec times[2] = {*mtime, *mtime};
    if (::futimens(fd, times) != 0) {
      return sys_error(std::string("futimens(") + name + ")");
    }
  }
  if (sync && ::fsync(fd) != 0) {
    return sys_error(std::string("fsync(") + name + ")");
  }
  if (::close(f.release()) != 0) {
    return sys_error(std::string("close(") + name + ")");
  }
  return {};
}

// The top-level "kind" of one events.jsonl line, found by a structural scan instead of a full
// parse (5-10x faster, and finish() is on the exit path). nullopt when the line is not a
// balanced JSON object or has no string "kind" at the top level.
std::optional<std::string> top_level_kind(std::string_view line) {
  if (line.size() < 2 || line.front() != '{' || line.back() != '}') {
    return std::nullopt;
  }
  int depth = 0;
  bool in_string = false, escaped = false, expect_key = false, want_value = false;
  size_t str_start = 0;
  std::optional<std::string> kind;
  bool key_is_kind = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        if (depth == 1) {
          std::string_view text = line.substr(str_start, i - str_start);
          if (expect_key) {
            key_is_kind = text == "kind";
            expect_key = false;
          } else if (want_value && key_is_kind) {
            if (text.find('\\') != std::string_view::npos) {
              return std::nullopt;  // escaped kind: let the caller parse it properly
            }
            kind = std::string(text);
          }
          want_value = false;
        }
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        str_start = i + 1;
        break;
      case '{':
      case '[':
        ++depth;
        expect_key = depth == 1;
        want_value = false;
        break;
      case '}':
      case ']':
        if (--depth < 0 || (depth == 0 && i + 1 != line.size())) {
          return std::nullopt;
        }
        break;
      case ',':
        expect_key = depth == 1;
        break;
      case ':':
        want_value = depth == 1;
        break;
      default:
        want_value = want_value && (c == ' ');
        break;
    }
  }
  if (depth != 0 || in_string) {
    return std::nullopt;
  }
  return kind;
}

// Counts events by kind over the first kMaxScanBytes of events.jsonl.
nlohmann::json count_events(int dir_fd) {
  nlohmann::json out = nlohmann::json::object();
  std::map<std::string, uint64_t, std::less<>> kinds;
  uint64_t total = 0, unparseable = 0;
  bool truncated = false;
  if (auto fd = store::open_file(dir_fd, "events.jsonl"); fd.ok()) {
    auto scanned = store::for_each_line(
        fd->get(), kMaxScanBytes, [&](size_t, std::string_view line, bool complete) {
          if (line.empty() && complete) {
            return;
          }
          ++total;
          std::optional<std::string> kind;
          if (complete) {
            kind = top_level_kind(line);
            if (!kind) {
              auto j = store::parse_event(line);
              if (j.is_object() && j.contains("kind") && j["kind"].is_string()) {
                kind = j["kind"].get<std::string>();
              }
            }
          }
          if (kind) {
            ++kinds[*kind];
          } else {
            ++unparseable;
          }
        });
    truncated = scanned.ok() && *scanned;
  }
  out["total"] = total;
  out["by_kind"] = kinds;
  if (unparseable > 0) {
    out["unparseable"] = unparseable;
  }
  if (truncated) {
    out["truncated_at_bytes"] = kMaxScanBytes;
  }
  return out;
}

}  // namespace

CowChanges count_cow_changes(const std::string& upper, const std::string& lower, uint64_t limit) {
  namespace fs = std::filesystem;
  CowChanges c;
  std::error_code ec;
  fs::recursive_directory_iterator it(upper, fs::directory_options::skip_permission_denied, ec);
  for (uint64_t seen = 0; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++seen > limit) {
      c.more = true;
      break;
    }
    std::string rel = it->path().string().substr(upper.size());
    struct stat st {};
    // A directory the lower also has was only copied up to hold a change beneath it.
    bool dir = it->is_directory(ec) && !it->is_symlink(ec);
    if (!dir || ::lstat((lower + rel).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      ++c.count;
    }
  }
  return c;
}

SessionPaths session_paths(const std::string& root, const std::string& id) {
  SessionPaths p;
  p.dir = root + "/" + id;
  p.policy = p.dir + "/policy.json";
  p.events = p.dir + "/events.jsonl";
  p.summary = p.dir + "/summary.json";
  p.upper = p.dir + "/upper";
  p.snapshots = p.dir + "/snapshots";
  p.work = p.dir + "/work";
  p.control = p.dir + "/control.sock";
  return p;
}

namespace {

// A fresh id for a session started at `secs`, with 24 random bits.
Result<std::string> draw_session_id(int64_t secs) {
  uint8_t rnd[3];
  if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) {
    return sys_error("getrandom(3 bytes) for a session id");
  }
  return store::make_session_id(secs, (uint32_t{rnd[0]} << 16) | (uint32_t{rnd[1]} << 8) | rnd[2]);
}

}  // namespace

Result<Session> Session::create(const policy::Policy& effective,
                                const std::vector<std::string>& argv, const std::string& workspace,
                                const policy::Policy* learned_from) {
  // record.events_to first: a sink that cannot be opened stops the run before a session exists.
  std::optional<EventSinkTarget> sink;
  if (!effective.record.events_to.empty()) {
    auto t = open_event_sink(effective.record.events_to);
    if (!t.ok()) {
      return std::move(t).error().with_context("record.events_to (--events-to)");
    }
    sink = std::move(t).value();
  }
  // record.otlp likewise: a URL that does not parse or resolve is an error now, not a silent
  // loss of every event later.
  std::optional<OtlpTarget> otlp;
  if (!effective.record.otlp.empty()) {
    auto t = prepare_otlp(effective.record.otlp);
    if (!t.ok()) {
      return std::move(t).error().with_context("record.otlp (--otlp)");
    }
    otlp = std::move(t).value();
  }
  const std::string root = sessions_root();
  TRY(make_dirs(root));
  ASSIGN_OR_RETURN(UniqueFd root_fd, store::open_root(root));

  // The directory is made under a name no reader lists, locked, and only then renamed to its
  // id: a session is never visible without the lock its live cordon holds, so `cordon prune`
  // cannot take one that is starting for one that ended. The rename refuses an id already taken
  // (another session started in the same second drew the same suffix): draw again.
  auto now = std::chrono::system_clock::now();
  int64_t secs = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  ASSIGN_OR_RETURN(std::string staging, draw_session_id(secs));
  staging = ".new-" + staging;
  if (::mkdirat(root_fd.get(), staging.c_str(), 0700) != 0) {
    return sys_error("mkdirat(\"" + root + "\", \"" + staging + "\", 0700)",
                     "set CORDON_STATE_DIR to a writable directory");
  }
  auto unstage = [&](Error e) -> Error {
    ::unlinkat(root_fd.get(), staging.c_str(), AT_REMOVEDIR);
    return e;
  };
  UniqueFd dir(
      ::openat(root_fd.get(), staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir || !store::try_lock_session(dir.get())) {
    return unstage(sys_error("opening and locking " + root + "/" + staging));
  }
  std::string id;
  for (int attempt = 0;; ++attempt) {
    auto drawn = draw_session_id(secs);
    if (!drawn.ok()) {
      return unstage(std::move(drawn).error());
    }
    id = std::move(*drawn);
    if (::renameat2(root_fd.get(), staging.c_str(), root_fd.get(), id.c_str(), RENAME_NOREPLACE) ==
        0) {
      break;
    }
    if (errno != EEXIST || attempt + 1 >= kMaxIdAttempts) {
      return unstage(
          sys_error("renameat2(\"" + staging + "\", \"" + id + "\", RENAME_NOREPLACE) in " + root));
    }
  }

  Session s;
  s.id_ = id;
  s.paths_ = session_paths(root, id);
  s.argv_ = argv;
  s.workspace_ = workspace;
  s.learn_ = learned_from != nullptr;
  s.t0_ = std::chrono::steady_clock::now();
  s.started_at_ = rfc3339_of(now);
  s.memory_limit_ = effective.process.memory;
  s.pids_limit_ = effective.process.pids;
  s.timeout_ = effective.process.timeout;
  s.record_max_bytes_ = effective.record.max_bytes;

  // On failure below, remove the half-made directory so `cordon ls` does not list a ghost.
  auto fail = [&](Error e) -> Error {
    for (const char* name : {"events.jsonl", "events.jsonl.head", "policy.json", kRequestedPolicy,
                             "upper", "work", "snapshots"}) {
      ::unlinkat(root_fd.get(), (id + "/" + name).c_str(), 0);
      ::unlinkat(root_fd.get(), (id + "/" + name).c_str(), AT_REMOVEDIR);
    }
    ::unlinkat(root_fd.get(), id.c_str(), AT_REMOVEDIR);
    return std::move(e).with_context("creating session " + s.paths_.dir);
  };

  s.dir_ = std::move(dir);
  const int dfd = s.dir_.get();

  // No fsync here: create() is on the start-up path; finish() syncs what must survive.
  // Paths and argv are bytes, not necessarily UTF-8: replace, never throw, when serialising.
  std::string policy_text = pretty_json(policy::to_record_json(effective));
  // policy.json's mtime is the creation instant to the nanosecond (the kernel's own timestamps
  // are only jiffy-precise): it orders sessions whose ids share a second.
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const struct timespec created = {static_cast<time_t>(ns / 1000000000),
                                   static_cast<long>(ns % 1000000000)};
  if (auto st = write_new_file(dfd, "policy.json", policy_text, false, &created); !st.ok()) {
    return fail(std::move(st).error());
  }
  if (learned_from != nullptr) {
    std::string requested = pretty_json(policy::to_record_json(*learned_from));
    if (auto st = write_new_file(dfd, kRequestedPolicy, requested, false, nullptr); !st.ok()) {
      return fail(std::move(st).error());
    }
  }
  // work/: overlayfs' workdir for upper/ in cow mode (it must be on upper/'s filesystem).
  for (const char* sub : {"upper", "work", "snapshots"}) {
    if (::mkdirat(dfd, sub, 0700) != 0) {
      return fail(sys_error(std::string("mkdirat(\"") + sub + "\", 0700)"));
    }
  }
  int efd = ::openat(dfd, "events.jsonl",
                     O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (efd < 0) {
    return fail(sys_error("openat(\"events.jsonl\", O_APPEND|O_CREAT|O_EXCL)"));
  }
  UniqueFd events_fd(efd);
  // The record's head (record/chain_head.h): every writer of the record chains through it, the
  // sidecars by an open of it handed over with events.jsonl's.
  auto head = record::open_head_file(dfd, "events.jsonl" + std::string(record::kHeadSuffix));
  if (!head.ok()) {
    return fail(std::move(head).error());
  }
  s.events_ = record::EventLog::adopt(std::move(events_fd), id, "launcher",
                                      record::RecordLimits::from(effective.record),
                                      std::move(head).value());
  if (sink) {
    auto shipping = start_event_sink(s.paths_.events, std::move(*sink));
    if (!shipping.ok()) {
      return fail(std::move(shipping).error());
    }
    s.sink_ = std::move(shipping).value();
  }
  if (otlp) {
    auto shipping = start_otlp_exporter(s.paths_.events, id, std::move(*otlp));
    if (!shipping.ok()) {
      return fail(std::move(shipping).error());
    }
    s.otlp_ = std::move(shipping).value();
  }
  return s;
}

Status Session::started(pid_t init_pid, const std::string& limits_line) {
  init_pid_ = init_pid;
  limits_line_ = limits_line;
  nlohmann::json f = {
      {"argv", argv_},
      {"workspace", workspace_},
      {"cwd", current_dir()},
      {"uid", ::getuid()},
      {"limits", limits_line},
      {"init_pid", init_pid},
      {"cordon_version", CORDON_VERSION},
      {"hostname", host_name()},
  };
  if (learn_) {
    f["learn"] = true;  // network widened to every public name: said wherever the record is read
  }
  return events_.emit("session.start", std::move(f), record::Tier::kEssential);
}

SessionEnd Session::with_limits(SessionEnd end) const {
  if (end.memory_limit == 0) {
    end.memory_limit = memory_limit_;
  }
  if (end.pids_limit == 0) {
    end.pids_limit = pids_limit_;
  }
  if (end.timeout.count() == 0) {
    end.timeout = timeout_;
  }
  return end;
}

void Session::close(const SessionEnd& end, bool quiet) {
  if (auto f = finish(end); !f.ok()) {
    say("session record: " + f.error().to_string());
  }
  if (!quiet) {
    std::fputs(summary(end).c_str(), stderr);
  }
}

std::string Session::summary(const SessionEnd& end) const {
  return format_summary(id_, with_limits(end)) + record_line_;
}

Status Session::finish(const SessionEnd& given) {
  if (!dir_.valid()) {
    return make_error("Session::finish on a session that was never created");
  }
  if (finished_) {
    return make_error("Session::finish called twice for " + id_ + "; the first end stands");
  }
  finished_ = true;
  const SessionEnd end = with_limits(given);
  Status first_error;
  auto keep = [&](Status st) {
    if (!st.ok() && first_error.ok()) {
      first_error = std::move(st);
    }
  };

  // The launcher's own drops; every other writer has stopped and said its own by now.
  keep(events_.report_drops());

  // Every limit that was reached, once, whichever way the launcher learned about it.
  std::set<std::string> hits;
  if (!end.limit_hit.empty()) {
    hits.insert(end.limit_hit);
  }
  if (end.usage.oom_killed) {
    hits.insert("memory");
  }
  if (end.usage.pids_limit_hit) {
    hits.insert("pids");
  }
  if (end.timed_out) {
    hits.insert("timeout");
  }
  for (const auto& limit : hits) {
    nlohmann::json f = {{"limit", limit}};
    // The configured limit that was reached, always as {"value", "unit"}.
    if (limit == "memory") {
      f["value"] = end.memory_limit;
      f["unit"] = "bytes";
    } else if (limit == "pids") {
      f["value"] = end.pids_limit;
      f["unit"] = "tasks";
    } else if (limit == "timeout") {
      f["value"] = end.timeout.count();
      f["unit"] = "ms";
    }
    keep(events_.emit("limit.hit", std::move(f), record::Tier::kEssential));
  }

  nlohmann::json fields = {
      {"exit_code", end.exit_code},
      {"timed_out", end.timed_out},
      {"duration_ms", end.duration.count()},
      {"peak_memory", end.usage.peak_memory},
      {"cpu_ms", end.usage.cpu.count() / 1000},
      {"limits_backend", end.limits_backend},
  };
  if (end.signal) {
    fields["signal"] = *end.signal;
    fields["signal_name"] = text::signal_name(*end.signal);
  }
  if (!hits.empty()) {
    fields["limits_hit"] = hits;
  }
  if (!end.error.empty()) {
    fields["error"] = end.error;
  }
  if (!end.canaries_touched.empty()) {
    fields["canaries_touched"] = end.canaries_touched;
  }
  if (end.exfil_killed) {
    fields["ended_by"] = "network.on_exfil";
  }
  if (end.cow_changed) {
    fields["cow_changed"] = *end.cow_changed;
    fields["cow_changed_more"] = end.cow_changed_more;
    fields["upper"] = end.cow_upper;
    fields["cow_backend"] = end.cow_fallback.empty() ? "cordon-fs" : "overlay";
  }
  keep(events_.emit("session.end", fields, record::Tier::kLast));

  // The log is complete from here on for what matters: make it durable before the summary that
  // describes it, so a crash never leaves a summary that counts events the disk lost.
  if (events_.enabled() && ::fdatasync(events_.fd()) != 0) {
    keep(sys_error("fdatasync(events.jsonl)"));
  }

  nlohmann::json summary = fields;
  summary["session"] = id_;
  summary["argv"] = argv_;
  summary["workspace"] = workspace_;
  summary["uid"] = ::getuid();
  summary["cordon_version"] = CORDON_VERSION;
  summary["started_at"] = started_at_;
  summary["ended_at"] = record::now_rfc3339();
  summary["init_pid"] = init_pid_;
  summary["limits"] = limits_line_;
  if (learn_) {
    summary["learn"] = true;
  }
  summary["events"] = count_events(dir_.get());
  if (auto fd = store::open_file(dir_.get(), "events.jsonl"); fd.ok()) {
    RecordStats rec = collect_record_stats(fd->get());
    summary["record"] = rec.to_json(record_max_bytes_);
    record_line_ = rec.exit_line(record_max_bytes_);
  }
  // session.end is written: the followers have all there will be. Ones that cannot keep up cost
  // the session's end at most this long together, never the program anything.
  const auto ship_deadline = std::chrono::steady_clock::now() + kShippingGrace;
  auto shipped = [&](std::unique_ptr<RecordFollower>& f, const char* field, const char* flag) {
    if (!f) {
      return;
    }
    RecordFollower::Stats st = f->stop(ship_deadline);
    summary["record"][field] = {{"target", f->name()}, {"sent", st.sent}, {"dropped", st.dropped}};
    if (!st.error.empty()) {
      summary["record"][field]["error"] = st.error;
    }
    if (st.dropped > 0 || !st.error.empty()) {
      record_line_ += std::string("cordon: ") + flag + " " + f->name() + ": " +
                      std::to_string(st.dropped) + " of " + std::to_string(st.sent + st.dropped) +
                      " events not delivered" + (st.error.empty() ? "" : " (" + st.error + ")") +
                      "; events.jsonl has them all\n";
    }
  };
  shipped(sink_, "events_to", "events-to");
  shipped(otlp_, "otlp", "otlp");

  // tmp + fsync + rename + fsync(dir): readers see no summary or the whole of it, never a part.
  const char* tmp = "summary.json.tmp";
  ::unlinkat(dir_.get(), tmp, 0);  // left by a crash between write and rename
  Status written = write_new_file(dir_.get(), tmp, pretty_json(summary), true);
  if (!written.ok()) {
    ::unlinkat(dir_.get(), tmp, 0);
    keep(std::move(written));
  } else if (::renameat(dir_.get(), tmp, dir_.get(), "summary.json") != 0) {
    keep(sys_error("renameat(summary.json.tmp, summary.json)"));
  } else if (::fsync(dir_.get()) != 0) {
    keep(sys_error("fsync(session dir)"));
  }
  return first_error;
}

}  // namespace cordon::launcher
