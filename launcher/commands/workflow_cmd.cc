// `cordon snapshot / rollback / commit / discard ID`: the review workflow of a cow session (diff:
// diff_cmd.cc). Snapshot and rollback of a running cordon-fs session go through its control
// socket (so the kernel's caches are invalidated and the program sees the restored tree at once);
// everything else works on the layers on disk with the fusefs library, in either layer format.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fusefs/commit.h"
#include "fusefs/control.h"
#include "fusefs/safe_io.h"
#include "fusefs/workflow.h"
#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/session/cow_session.h"

namespace cordon::launcher {
namespace {

using fusefs::Change;
using fusefs::ChangeKind;

constexpr int kDone = kReviewDone;
constexpr int kRefused = kReviewRefused;

// One request on the control socket; the reply's "error" becomes an Error.
Result<nlohmann::json> control_request(const CowSession& s, const nlohmann::json& req) {
  ASSIGN_OR_RETURN(UniqueFd fd, connect_control(s.control));
  std::string line = req.dump() + "\n";
  if (::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(line.size())) {
    return sys_error("send() on " + s.control);
  }
  std::string reply;
  char buf[4096];
  // A snapshot copies the whole upper layer: generous, but bounded.
  while (reply.find('\n') == std::string::npos && reply.size() < 65536) {
    pollfd p{fd.get(), POLLIN, 0};
    int n = ::poll(&p, 1, 600000);
    if (n <= 0) {
      return make_error("cordon-fs did not answer on " + s.control + " within 10 minutes");
    }
    ssize_t got = ::read(fd.get(), buf, sizeof buf);
    if (got <= 0) {
      return make_error("cordon-fs closed " + s.control + " without an answer",
                        "it may have ended with the session; run the command again");
    }
    reply.append(buf, static_cast<size_t>(got));
  }
  auto j = nlohmann::json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return make_error("unreadable answer from cordon-fs: " + reply.substr(0, 200));
  }
  if (!j.value("ok", false)) {
    return make_error("cordon-fs: " + j.value("error", std::string("refused")));
  }
  return j;
}

std::vector<std::string> list_snapshots(const std::string& dir) {
  std::vector<std::string> out;
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd) {
    int err = 0;
    for (auto& n : fusefs::list_dir(fd.get(), &err)) {
      if (fusefs::valid_snapshot_name(n)) {
        out.push_back(n);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string snapshot_list_text(const std::string& dir) {
  auto names = list_snapshots(dir);
  if (names.empty()) {
    return "this session has no snapshots";
  }
  std::string t = "its snapshots:";
  for (const auto& n : names) {
    t += " " + n;
  }
  return t;
}

bool is_dir(const std::string& p) {
  UniqueFd fd(::open(p.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  return fd.valid();
}

std::string default_snapshot_name() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "snap-%Y%m%d-%H%M%S", &tm);
  return buf;
}

UniqueFd open_dir_fd(const std::string& p) {
  return UniqueFd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

// The session, resolved, or the exit code to return.
struct Opened {
  std::optional<CowSession> s;
  int rc = kDone;
};

Opened open_for(const char* cmd, const std::string& id) {
  bool refused = false;
  auto s = open_cow_session(id, &refused);
  if (!s.ok()) {
    return {std::nullopt,
            refused ? say_refused(cmd, s.error().to_string()) : say_failed(cmd, s.error())};
  }
  return {std::move(*s), kDone};
}

fusefs::CommitOptions commit_options(const CowSession& s, const policy::FilesystemPolicy* pol) {
  fusefs::CommitOptions o;
  o.policy = pol;
  o.format = s.format;
  o.session_dir = s.dir;
  o.session_id = s.id;
  o.since = s.since;
  o.workspace_id = s.workspace_id;
  return o;
}

// How many changes earlier commits of the session applied (their record, <session>/committed).
uint64_t committed_before(const CowSession& s) {
  std::ifstream f(s.dir + "/committed");
  uint64_t total = 0, n = 0;
  while (f >> n) {
    total += n;
  }
  return total;
}

void record_committed(const CowSession& s, size_t n) {
  std::ofstream(s.dir + "/committed", std::ios::app) << n << "\n";
}

// One line per held-back change, except that what lies beneath a held-back directory is
// counted on that directory's line (a whole .git/hooks is one line, not twenty).
void print_held(const std::vector<fusefs::Held>& held) {
  for (size_t i = 0; i < held.size();) {
    const fusefs::Held& top = held[i];
    size_t beneath = 0;
    size_t j = i + 1;
    for (; j < held.size() && held[j].path.rfind(top.path + "/", 0) == 0; ++j) {
      ++beneath;
    }
    std::string more = beneath == 0 ? "" : " (and " + std::to_string(beneath) + " beneath it)";
    std::printf("  %s: %s%s\n", shown(top.path).c_str(), shown(top.why).c_str(), more.c_str());
    i = j;
  }
}

}  // namespace

int snapshot_command(const std::string& id, const std::string& name_arg) {
  Opened o = open_for("snapshot", id);
  if (!o.s) {
    return o.rc;
  }
  const CowSession& s = *o.s;
  std::string name = name_arg.empty() ? default_snapshot_name() : name_arg;
  if (!fusefs::valid_snapshot_name(name)) {
    return say_refused("snapshot", "\"" + name +
                                       "\" is not a snapshot name: use 1-64 of A-Z a-z 0-9 . _ -, "
                                       "not starting with '.'");
  }
  const std::string dest = s.snapshots + "/" + name;
  if (is_dir(dest)) {
    return say_refused("snapshot", "session " + s.id + " already has a snapshot \"" + name +
                                       "\"; pick another name (" + snapshot_list_text(s.snapshots) +
                                       ")");
  }
  if (s.live_control) {
    auto r = control_request(s, {{"op", "snapshot"}, {"name", name}});
    if (!r.ok()) {
      return say_failed("snapshot", r.error());
    }
  } else if (s.running) {
    return say_refused("snapshot", "session " + s.id +
                                       " is still running on kernel overlayfs, whose layer cannot "
                                       "be copied consistently while mounted; snapshot it once "
                                       "the program has ended");
  } else if (auto st = fusefs::snapshot_layer(s.upper, dest); !st.ok()) {
    return say_failed("snapshot", st.error());
  }
  std::printf("cordon: snapshot \"%s\" of session %s%s: %s\n", name.c_str(), s.id.c_str(),
              s.running ? " (taken live)" : "", shown(dest).c_str());
  std::printf("cordon: back to it with: cordon rollback %s %s\n", s.id.c_str(), name.c_str());
  return kDone;
}

int rollback_command(const std::string& id, const std::string& name) {
  Opened o = open_for("rollback", id);
  if (!o.s) {
    return o.rc;
  }
  const CowSession& s = *o.s;
  std::string snap;
  if (!name.empty()) {
    if (!fusefs::valid_snapshot_name(name) || !is_dir(s.snapshots + "/" + name)) {
      return say_refused("rollback", "session " + s.id + " has no snapshot \"" + name + "\"; " +
                                         snapshot_list_text(s.snapshots));
    }
    snap = s.snapshots + "/" + name;
  }
  if (s.live_control) {
    nlohmann::json req = {{"op", "rollback"}};
    if (!name.empty()) {
      req["name"] = name;
    }
    auto r = control_request(s, req);
    if (!r.ok()) {
      return say_failed("rollback", r.error());
    }
  } else if (s.running) {
    return say_refused("rollback", "session " + s.id +
                                       " is still running on kernel overlayfs, whose layer cannot "
                                       "change under the mounted view; roll back once the program "
                                       "has ended");
  } else if (auto st = fusefs::restore_layer(s.upper, snap); !st.ok()) {
    return say_failed("rollback", st.error());
  }
  std::printf("cordon: session %s rolled back to %s%s\n", s.id.c_str(),
              name.empty() ? "its start" : ("snapshot \"" + name + "\"").c_str(),
              s.running ? " (live: the program sees it now)" : "");
  return kDone;
}

int commit_command(const std::string& id, const std::vector<std::string>& paths,
                   bool include_protected, bool unverified_workspace) {
  Opened o = open_for("commit", id);
  if (!o.s) {
    return o.rc;
  }
  const CowSession& s = *o.s;
  if (s.workspace.empty()) {
    // Imported with no workspace bound: the archive's own path is never written implicitly.
    return say_refused("commit", no_workspace_message(s));
  }
  if (s.running) {
    return say_refused("commit",
                       "session " + s.id + " is still running; commit once the program has ended");
  }
  if (!s.workspace_id && !unverified_workspace) {
    return say_refused(
        "commit",
        "session " + s.id +
            " was recorded by a cordon that did not note which "
            "directory its workspace " +
            s.workspace +
            " was, so cordon cannot tell whether "
            "it was replaced since (for a symlink to another directory); check that it is "
            "the directory the session ran on and commit with --unverified-workspace");
  }
  // A workspace swapped since the session is the user's state to fix, not cordon failing: say
  // so as a refusal. commit_layers opens it again and checks again; only that fd is written.
  if (auto ws = open_session_workspace(s); !ws.ok()) {
    return say_refused("commit", ws.error().to_string());
  }
  std::string note;
  policy::FilesystemPolicy pol = review_policy(s, &note);
  if (!note.empty()) {
    say_in("commit", shown(note));
  }
  fusefs::CommitOptions opts = commit_options(s, &pol);
  opts.only = paths;
  opts.include_protected = include_protected;
  auto r = fusefs::commit_layers(s.workspace, s.upper, opts);
  if (!r.ok()) {
    return say_failed("commit", r.error());
  }
  if (!r->recovered.empty()) {
    std::printf("cordon commit: %s\n", shown(r->recovered).c_str());
  }
  if (!r->conflicts.empty()) {
    // One message: the conflicting paths follow its first line, indented, without the prefix.
    std::string msg = "refused: " + std::to_string(r->conflicts.size()) + " change" +
                      (r->conflicts.size() == 1 ? "" : "s") + " conflict with " +
                      shown(s.workspace) + " as it is now; nothing was applied:";
    for (const auto& c : r->conflicts) {
      msg += "\n  " + shown(c);
    }
    say_in("commit", msg);
    say_in("commit", "review with `cordon diff " + s.id +
                         "`; commit the other paths by naming them, or `cordon discard " + s.id +
                         "`");
    return kRefused;
  }
  for (const auto& c : r->applied) {
    std::printf("  %s %s\n", fusefs::change_letter(c.kind), shown(c.path).c_str());
  }
  if (!r->applied.empty()) {
    record_committed(s, r->applied.size());
  }
  for (const auto& w : r->warnings) {
    std::printf("cordon: warning: %s\n", shown(w).c_str());
  }
  std::printf("cordon: committed %zu change%s of session %s to %s\n", r->applied.size(),
              r->applied.size() == 1 ? "" : "s", s.id.c_str(), shown(s.workspace).c_str());
  if (!r->held.empty()) {
    std::printf("cordon: held back %zu change%s; they stay in the session (`cordon diff %s`):\n",
                r->held.size(), r->held.size() == 1 ? "" : "s", s.id.c_str());
    print_held(r->held);
  }
  return kDone;
}

int discard_command(const std::string& id) {
  Opened o = open_for("discard", id);
  if (!o.s) {
    return o.rc;
  }
  const CowSession& s = *o.s;
  if (s.running) {
    return say_refused("discard", "session " + s.id +
                                      " is still running; undo its changes live with `cordon "
                                      "rollback " +
                                      s.id + "`, or discard once it has ended");
  }
  // A commit killed half-way must be undone first, or "as it was" would not be true.
  auto recovered = fusefs::recover_commit(s.workspace, s.upper, commit_options(s, nullptr));
  if (!recovered.ok()) {
    return say_failed("discard", recovered.error());
  }
  if (!recovered->empty()) {
    std::printf("cordon discard: %s\n", shown(*recovered).c_str());
  }
  if (auto st = fusefs::discard_layer(s.upper); !st.ok()) {
    return say_failed("discard", st.error());
  }
  UniqueFd snaps = open_dir_fd(s.snapshots);
  if (snaps) {
    if (int rc = fusefs::clear_dir(snaps.get()); rc != 0) {
      errno = -rc;
      return say_failed("discard", sys_error("clearing " + s.snapshots));
    }
  }
  uint64_t kept = committed_before(s);
  std::string state = kept == 0 ? shown(s.workspace) + " is as it was: cordon changed nothing in it"
                                : "the " + std::to_string(kept) + " change" +
                                      (kept == 1 ? "" : "s") + " committed before stay in " +
                                      shown(s.workspace) + "; cordon changed nothing else in it";
  std::printf(
      "cordon: discarded every uncommitted change and snapshot of session %s; %s (the "
      "log stays: cordon log %s)\n",
      s.id.c_str(), state.c_str(), s.id.c_str());
  return kDone;
}

}  // namespace cordon::launcher
