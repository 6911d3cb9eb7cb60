// The one mapping from how the program ended to `cordon run`'s exit status and messages.
#include "launcher/exit_status.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

#include "launcher/diagnostics.h"
#include "launcher/run_options.h"
#include "launcher/session/session_text.h"
#include "policy/loader.h"

namespace cordon::launcher {
namespace {

int exec_failed(int e, const ExitFacts& facts, SessionEnd& end) {
  if (e == ENOENT || e == ENOTDIR) {
    end.error = facts.command + ": command not found";
    if (facts.not_found_hint) {
      if (auto hint = facts.not_found_hint()) {
        end.error += " in the sandbox; " + *hint;
      }
    }
    say(end.error);
    return kExitNotFound;
  }
  end.error = facts.command + ": " + std::strerror(e);
  say(end.error);
  return kExitCannotExec;
}

}  // namespace

int exit_status(const Outcome& out, const ExitFacts& facts, SessionEnd& end) {
  if (out.setup_error) {
    end.error = *out.setup_error;
    return fail(end.error);
  }
  if (out.exec_errno) {
    return exec_failed(*out.exec_errno, facts, end);
  }
  if (out.alarm) {
    end.exfil_killed = true;
    if (WIFSIGNALED(out.init_status)) {
      end.signal = WTERMSIG(out.init_status);
    }
    return kExitExfil;
  }
  if (out.timed_out) {
    end.timed_out = true;
    end.limit_hit = "timeout";
    say("killed: timeout (" + policy::format_duration(facts.timeout) + ") reached");
    return kExitTimeout;
  }
  if (out.term_killed) {
    // cordon was told to end (SIGTERM) and the program outlived its grace: the status says why
    // the session ended, as the program's own death of SIGTERM would.
    end.signal = SIGKILL;
    say("killed: SIGTERM received; the program had not ended when kill_grace ran out or a "
        "second SIGTERM came");
    return 128 + SIGTERM;
  }
  // The program's own status (from init); init's status if init died before it could report.
  int st = out.program_status.value_or(out.init_status);
  if (WIFSIGNALED(st)) {
    int sig = WTERMSIG(st);
    end.signal = sig;
    if (sig == SIGKILL && end.usage.oom_killed) {
      end.limit_hit = "memory";
      say("killed: memory limit (" + text::size(facts.memory) + ") reached");
    } else if (end.usage.pids_limit_hit) {
      end.limit_hit = "pids";
    }
    return 128 + sig;
  }
  if (end.usage.oom_killed) {
    end.limit_hit = "memory";
  } else if (end.usage.pids_limit_hit) {
    end.limit_hit = "pids";
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : kExitCordonFailed;
}

}  // namespace cordon::launcher
