// format_summary: the few "cordon: " lines printed on stderr when `cordon run` ends.
#include <signal.h>
#include <string.h>

#include <cstdio>

#include "launcher/session/session.h"
#include "launcher/session/session_text.h"

namespace cordon::launcher {

std::string format_summary(const std::string& id, const SessionEnd& end) {
  std::string out = "cordon: session " + id + " ";
  std::string how;
  if (end.signal) {
    how = "terminated by " + text::signal_name(*end.signal) + " (exit " +
          std::to_string(end.exit_code) + ")";
  } else {
    how = "exit " + std::to_string(end.exit_code);
  }
  out +=
      (end.error.empty() ? "ended: " : "failed: ") + how + " after " + text::duration(end.duration);
  std::string usage;
  if (end.usage.cpu.count() > 0) {
    usage = "cpu " +
            text::duration(std::chrono::duration_cast<std::chrono::milliseconds>(end.usage.cpu));
  }
  if (end.usage.peak_memory > 0) {
    usage += (usage.empty() ? "" : ", ") + std::string("peak memory ") +
             text::size(end.usage.peak_memory);
  }
  if (!usage.empty()) {
    out += " (" + usage + ")";
  }
  out += "\n";

  if (!end.error.empty()) {
    out += "cordon: error: " + text::one_line(end.error, 200) + "\n";
  }
  if (end.timed_out || end.limit_hit == "timeout") {
    out += "cordon: timed out after " +
           text::duration(end.timeout.count() > 0 ? end.timeout : end.duration) + "; sent SIGTERM";
    if (end.signal && *end.signal == SIGKILL) {
      out += ", then SIGKILL";
    }
    out += "\n";
  } else if (end.limit_hit == "memory" || (end.limit_hit.empty() && end.usage.oom_killed)) {
    out += "cordon: killed: memory limit";
    if (end.memory_limit > 0) {
      out += " (" + text::size(end.memory_limit) + ")";
    }
    out += " reached\n";
  } else if (end.limit_hit == "pids" || (end.limit_hit.empty() && end.usage.pids_limit_hit)) {
    out += "cordon: process limit";
    if (end.pids_limit > 0) {
      out += " (" + std::to_string(end.pids_limit) + " tasks)";
    }
    out += " reached: a fork or clone was refused\n";
  } else if (end.exfil_killed) {
    out +=
        "cordon: killed: a secret or canary was sent toward a host it is not bound to and "
        "network.on_exfil is kill (exit " +
        std::to_string(end.exit_code) + ")\n";
  } else if (!end.limit_hit.empty()) {
    out += "cordon: " + text::one_line(end.limit_hit, 60) + " limit reached\n";
  }
  if (!end.limits_backend.empty()) {
    // Limits::describe() already reads "limits: ...".
    std::string line = text::one_line(end.limits_backend, 200);
    out +=
        line.rfind("limits:", 0) == 0 ? "cordon: " + line + "\n" : "cordon: limits: " + line + "\n";
  }
  if (end.cow_changed) {
    uint64_t n = *end.cow_changed;
    out += "cordon: " + std::string(end.cow_changed_more ? "more than " : "") + std::to_string(n) +
           (n == 1 && !end.cow_changed_more ? " file" : " files") +
           " changed in the copy-on-write layer (the workspace is untouched): " + end.cow_upper +
           "\n";
    if (n > 0) {
      out += "cordon: review: cordon diff " + id + "   apply: cordon commit " + id +
             "   undo: cordon rollback " + id + "\n";
    }
  }
  if (!end.cow_fallback.empty()) {
    out += "cordon: copy-on-write ran on kernel overlayfs, not cordon-fs (" +
           text::one_line(end.cow_fallback, 200) +
           "): deny rules covered only files present at start, protected paths are held back "
           "at commit instead; no live snapshot/rollback\n";
  }
  if (!end.workspace_unwritable.empty()) {
    out += "cordon: " + end.workspace_unwritable + "\n";
  }
  if (!end.cow_daemon_died.empty()) {
    out += "cordon: warning: cordon-fs ended during the session (" +
           text::one_line(end.cow_daemon_died, 60) +
           "); the workspace failed with ENOTCONN from then on; the changes before are kept\n";
  }
  if (end.userns_refused > 0) {
    out += "cordon: refused " + std::to_string(end.userns_refused) + " attempt" +
           (end.userns_refused == 1 ? "" : "s") +
           " to create a user namespace (an agent's own sandbox, such as bubblewrap, cannot "
           "start); process.nested_sandbox: true allows it (see `cordon policy explain`)\n";
  }
  if (!end.view_daemon_died.empty()) {
    out += "cordon: warning: the cordon-fs view of " + text::one_line(end.view_daemon_died, 200) +
           " ended during the session; that directory failed with ENOTCONN from then on\n";
  }
  if (!end.canaries_touched.empty()) {
    std::string names;
    for (const auto& c : end.canaries_touched) {
      names += (names.empty() ? "" : ", ") + c;
    }
    out += "cordon: ALERT: canary touched: " + names +
           " (decoy secrets: the program read or sent them; see fs.canary and net.exfil in "
           "cordon log " +
           id + ")\n";
  }
  out += end.net_lines;
  out += "cordon: log: cordon log " + id + "\n";
  return out;
}

}  // namespace cordon::launcher
