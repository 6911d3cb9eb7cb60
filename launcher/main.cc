// `cordon`: parses the command line (CLI11) and dispatches to a subcommand.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/commands.h"
#include "launcher/commands/completion.h"
#include "launcher/commands/report/report_cmd.h"
#include "launcher/diagnostics.h"
#include "launcher/pid1.h"
#include "launcher/session/session.h"
#include "launcher/version.h"
#include "policy/loader.h"

using namespace cordon::launcher;

namespace {

// Finds where `cordon run`'s (or `cordon exec ID`'s) options end and the program begins: at
// "--", or at the first word that is neither an option, nor the value of one, nor one of the
// `leading` words the subcommand takes before the program (exec's ID). Moves the program's words
// into `command` and leaves cordon's own in `args`. Returns whether a program was found.
bool split_run_command(const CLI::App& run, std::vector<std::string>& args,
                       std::vector<std::string>& command, size_t leading = 0) {
  size_t i = 0;
  // Top-level options (--help, --version) come before the subcommand name.
  while (i < args.size() && args[i].rfind("-", 0) == 0) {
    ++i;
  }
  if (i >= args.size() || args[i] != run.get_name()) {
    return false;
  }
  for (++i; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      args.resize(i);
      return !command.empty();
    }
    if (a.size() > 1 && a[0] == '-') {
      // An option: skip its value when it takes one and it isn't attached ("--memory=1G").
      std::string name = a.substr(0, a.find('='));
      const CLI::Option* opt = run.get_option_no_throw(name);
      if (opt != nullptr && opt->get_expected_max() > 0 && a.find('=') == std::string::npos &&
          !(a.size() > 2 && a[1] != '-')) {
        ++i;
      }
      continue;  // unknown options stay in `args` for CLI11 to reject by name
    }
    if (leading > 0) {
      --leading;
      continue;
    }
    command.assign(args.begin() + static_cast<long>(i), args.end());
    args.resize(i);
    return true;
  }
  return false;
}

// --state-dir on every subcommand that makes or reads session records: one variable, given to
// use_state_dir() once after parsing, so sessions_root() stays the one resolver.
void add_state_dir_option(CLI::App* cmd, std::string& dir) {
  cmd->add_option("--state-dir", dir,
                  "Keep and find session records in DIR/sessions (an existing directory, e.g. "
                  "a volume a pod mounts) instead of $CORDON_STATE_DIR or the default")
      ->type_name("DIR");
}

}  // namespace

int main(int argc, char** argv) {
  cordon::launcher::reap_as_pid1();  // a container's entrypoint: a reaper stays pid 1
  CLI::App app{
      "cordon " CORDON_VERSION
      " - run a program (an AI agent, a shell, a build) unmodified in a\n"
      "sandbox that sees only what a policy grants, and records everything it tried.\n\n"
      "Exit status of `cordon run`: the program's own; 128+N if it died of signal N; 124 on\n"
      "timeout; 125 if cordon itself failed; 126 if the program is not executable; 127 if it\n"
      "was not found. Of diff/commit/snapshot/rollback/discard/prune: 0 done, 1 refused, 125\n"
      "failed."};
  app.name("cordon");
  app.require_subcommand(1);
  app.set_version_flag(
      "--version",
      [] {
        std::string report = version_report();
        return report.substr(0, report.size() - 1);  // CLI11 ends it with its own newline
      },
      "Print the version, the git commit and the kernel features cordon finds here");

  RunOptions run;
  auto* run_cmd = app.add_subcommand(
      "run", "Run a program in a sandbox: cordon run [OPTIONS] -- COMMAND [ARGS...]");
  run_cmd->add_flag("--detach,-d", run.detach,
                    "Start a session without a program and print its id: programs join it with "
                    "`cordon exec ID -- COMMAND`, `cordon stop ID` ends it");
  run_cmd
      ->add_option("--name", run.name,
                   "With --detach: a name `cordon exec` and `cordon stop` accept for the id")
      ->type_name("NAME");
  run_cmd
      ->add_option("--idle-timeout", run.idle_timeout,
                   "With --detach: end the session once no `cordon exec` ran for this long, e.g. "
                   "30m, 0 for never (default 15m)")
      ->type_name("DURATION");
  run_cmd
      ->add_option("--policy,-p", run.policy_file,
                   "Policy file (JSON with comments); default: the embedded policy "
                   "(`cordon policy default`)")
      ->type_name("FILE");
  run_cmd
      ->add_option("--agent", run.agent,
                   "Extend the policy with this agent's preset: claude-code, codex, gemini, "
                   "opencode (`cordon policy explain --agent NAME` shows what it adds)")
      ->type_name("NAME");
  run_cmd
      ->add_option("--workspace,-w", run.workspace,
                   "Directory the program works in (filesystem.workspace); default: .")
      ->type_name("DIR");
  run_cmd->add_option("--mode", run.mode, "Workspace mode: cow | ro | rw (filesystem.mode)")
      ->type_name("MODE");
  run_cmd->add_option("--memory", run.memory, "Memory limit, e.g. 512M, 2G (process.memory)")
      ->type_name("SIZE");
  run_cmd->add_option("--cpus", run.cpus, "CPU quota in cores, e.g. 0.5, 2 (process.cpus)")
      ->type_name("N");
  run_cmd->add_option("--pids", run.pids, "Most tasks alive at once (process.pids)")
      ->type_name("N");
  run_cmd->add_option("--nofile", run.nofile, "Most open files per process (process.nofile)")
      ->type_name("N");
  run_cmd
      ->add_option("--timeout", run.timeout,
                   "Wall-clock limit, e.g. 90s, 30m, 0 for none (process.timeout); on expiry "
                   "SIGTERM, then SIGKILL after the grace period, exit 124")
      ->type_name("DURATION");
  // One value per occurrence: a greedy vector option would swallow the "--" before CMD.
  run_cmd->add_option("--env-keep", run.env_keep, "Keep this host variable (repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME");
  run_cmd
      ->add_option("--env-pass", run.env_pass,
                   "Pass this host variable even though process.env.deny matches it, e.g. an "
                   "API key the program needs (repeatable; said at start; its value is never "
                   "recorded) (process.env.pass)")
      ->allow_extra_args(false)
      ->type_name("NAME");
  run_cmd
      ->add_option("--env-set", run.env_set,
                   "Set K=V inside the sandbox (repeatable); a secret's value (a name "
                   "process.env.deny matches) is not recorded")
      ->allow_extra_args(false)
      ->type_name("K=V");
  run_cmd
      ->add_option("--read", run.read,
                   "Show this host path read-only in the sandbox, e.g. a program's install "
                   "tree (repeatable) (filesystem.read)")
      ->allow_extra_args(false)
      ->type_name("PATH");
  run_cmd
      ->add_option("--write", run.write,
                   "Show this host path read-write in the sandbox: writes land on the host at "
                   "once; filesystem.deny, deny_write and protect still hold inside it "
                   "(repeatable) (filesystem.write)")
      ->allow_extra_args(false)
      ->type_name("PATH");
  run_cmd
      ->add_option("--allow-host", run.allow_host,
                   "Allow connections to this host pattern, as in network.allow (repeatable); "
                   "localhost:PORT, 127.0.0.1:PORT or [::1]:PORT reach that port of the host's "
                   "own loopback (a local model server) and nothing else of it")
      ->allow_extra_args(false)
      ->type_name("PATTERN");
  run_cmd
      ->add_option("--inspect", run.inspect,
                   "Inspect HTTPS to this host pattern, as in network.inspect (repeatable): the "
                   "proxy sees and logs its requests and network.rules apply to them. It ends "
                   "TLS with a CA made for the session (or network.ca), which the sandbox "
                   "trusts through /etc/ssl/certs/ca-certificates.crt, SSL_CERT_FILE, "
                   "NODE_EXTRA_CA_CERTS and the like")
      ->allow_extra_args(false)
      ->type_name("PATTERN");
  run_cmd
      ->add_option("--credential", run.credential,
                   "Give the sandbox only a placeholder for the secret in variable NAME; the "
                   "proxy puts the real value back in requests to HOST (repeatable; each host "
                   "allowed and inspected, as in network.credentials) and refuses the "
                   "placeholder toward any other host")
      ->allow_extra_args(false)
      ->type_name("NAME=HOST[,HOST...]");
  std::string state_dir;
  add_state_dir_option(run_cmd, state_dir);
  run_cmd->add_flag("--quiet,-q", run.quiet, "No summary on stderr at exit");
  run_cmd
      ->add_option("--events-to", run.events_to,
                   "Also write the event record, line for line, to stdout, stderr, an open "
                   "file descriptor (e.g. 3) or a file (record.events_to); a slow sink never holds "
                   "up the program: lines it cannot take are counted in summary.json")
      ->type_name("FD|PATH|stdout|stderr");
  run_cmd
      ->add_option("--otlp", run.otlp,
                   "Also send the event record to an OpenTelemetry collector as OTLP/HTTP JSON "
                   "logs (POST URL/v1/logs when URL has no path; https checks the host's "
                   "trusted certificates) (record.otlp). cordon sends them, not the sandbox, "
                   "which gets no way to the collector. A slow or down collector never holds "
                   "up the program: records it does not take are counted in summary.json, and "
                   "cordon waits at most 2 s for it at exit")
      ->type_name("URL");
  run_cmd->add_flag(
      "--ask", run.ask,
      "Ask at cordon's terminal (/dev/tty, outside the sandbox) about each connection or DNS "
      "name the policy refuses only for not being in network.allow; the connection waits for "
      "the answer: o allow once, s for this session, a always (added to the --policy file), d "
      "deny, D deny always (added to network.deny). No answer within --ask-timeout denies. "
      "Refuses to start without a controlling terminal; not with --decider*. See docs/ask.md");
  run_cmd
      ->add_option("--ask-timeout", run.ask_timeout,
                   "How long an --ask question waits for an answer before the connection is "
                   "refused (default 60s)")
      ->type_name("DURATION")
      ->check([](const std::string& v) {
        auto d = cordon::policy::parse_duration(v);
        return d && d->count() > 0 ? std::string() : "not a positive duration, e.g. 500ms or 60s";
      });
  auto* decider_cmd =
      run_cmd
          ->add_option("--decider", run.decider,
                       "Ask this command (run with /bin/sh -c, outside the sandbox, as you) about "
                       "each connection the policy refuses only for not being in network.allow: "
                       "the connection waits for its answer (allow or deny, once or for the "
                       "session). It speaks JSON lines on its stdin and stdout; see "
                       "docs/decider.md. A decider that dies, hangs or answers nonsense means "
                       "deny. Never asked about network.deny, private or metadata addresses")
          ->type_name("CMD");
  run_cmd
      ->add_option("--decider-socket", run.decider_socket,
                   "As --decider, with a decider already listening on this unix socket "
                   "(cordon connects to it; the sandbox cannot)")
      ->type_name("PATH")
      ->excludes(decider_cmd);
  run_cmd
      ->add_option("--decider-timeout", run.decider_timeout,
                   "How long a connection waits for the decider's answer before it is refused "
                   "(default 60s)")
      ->type_name("DURATION")
      ->check([](const std::string& v) {
        auto d = cordon::policy::parse_duration(v);
        return d && d->count() > 0 ? std::string() : "not a positive duration, e.g. 500ms or 60s";
      });
  run_cmd->add_flag("--learn", run.learn,
                    "LEARN MODE, for trusted runs: network.allow is widened to every public host "
                    "name on every port and every open is recorded, so that `cordon policy "
                    "suggest ID` lists what the run used. Private, loopback and metadata "
                    "addresses, raw addresses, network.deny, canaries and credentials stay "
                    "refused as the policy has them; the workspace stays copy-on-write (not with "
                    "--mode rw or --no-namespaces). Said on stderr at start and in the record");
  run_cmd->add_flag("--no-namespaces", run.no_namespaces,
                    "ADVISORY mode, not a sandbox: for hosts without user namespaces. The program "
                    "runs on the host with the preload shim (LD_PRELOAD), its connections go "
                    "through cordon-netproxy on 127.0.0.1 (HTTP_PROXY/ALL_PROXY) and the shim "
                    "refuses the rest; Landlock, seccomp and no_new_privs apply. Static binaries "
                    "and raw syscalls bypass the network rules");
  run_cmd->footer(
      "COMMAND and its arguments follow the options, after `--` or at the first non-option\n"
      "word; everything from there on belongs to the program.\n\n"
      "Overrides take precedence over the policy file; values use the policy's syntax\n"
      "(sizes 512M/2G, durations 90s/30m/1h). Exit status: the program's own; 128+N if it\n"
      "died of signal N; 124 on timeout; 125 if cordon failed (bad flag, bad policy, missing\n"
      "kernel feature); 126 if COMMAND is not executable; 127 if it was not found.\n\n"
      "Each run is recorded in DIR/sessions for --state-dir DIR or CORDON_STATE_DIR=DIR, else\n"
      "/var/lib/cordon/sessions (root) or ${XDG_STATE_HOME:-~/.local/state}/cordon/sessions:\n"
      "policy.json, events.jsonl, summary.json and, in cow mode, upper/ with the program's file\n"
      "changes. See `cordon ls` and `cordon log ID`.");

  auto* policy_cmd = app.add_subcommand("policy", "Show, check and explain policies");
  policy_cmd->require_subcommand(1);
  auto* pol_default = policy_cmd->add_subcommand("default", "Print the embedded default policy");
  std::string pol_file, pol_agent;
  auto* pol_check = policy_cmd->add_subcommand("check", "Validate a policy file");
  pol_check->add_option("FILE", pol_file, "Policy file")->required();
  pol_check->add_option("--agent", pol_agent, "Check it as extending this agent preset");
  auto* pol_explain = policy_cmd->add_subcommand(
      "explain", "Say in words what a policy file (or the default policy) allows and denies");
  pol_explain->add_option("FILE", pol_file, "Policy file; default: the embedded policy");
  pol_explain->add_option("--agent", pol_agent,
                          "With this agent preset (claude-code, codex, gemini, opencode)");
  SuggestOptions suggest;
  auto* pol_suggest = policy_cmd->add_subcommand(
      "suggest",
      "The smallest policy additions a session's refusals call for, each with its evidence");
  pol_suggest->add_option("ID", suggest.id, "Session id, a unique prefix of one, or `last`")
      ->required();
  add_state_dir_option(pol_suggest, state_dir);
  pol_suggest->add_flag("--json", suggest.json, "Print the suggestions as JSON");
  pol_suggest->add_flag("--tighten", suggest.tighten,
                        "Also list network.allow, filesystem.read and filesystem.write entries "
                        "the session never used (listed, never removed)");
  pol_suggest
      ->add_option("--apply", suggest.apply,
                   "Add the suggestions to this policy file (created if missing), each "
                   "after a // comment saying when and why; the file's other content and "
                   "comments are kept, and it is left unchanged unless the result passes "
                   "`cordon policy check`")
      ->type_name("FILE");
  pol_suggest->footer(
      "Suggested: hosts and ports refused for want of a network.allow entry (name:port exactly),\n"
      "host paths outside the workspace that were refused (filesystem.read, or filesystem.write\n"
      "for writes: the path itself, its directory when the write creates it), and programs\n"
      "outside process.exec_allow. Never suggested, but listed with the reason: private,\n"
      "loopback and metadata addresses, localhost and cloud metadata names, sockets and the\n"
      "directories for them (/run, /var/run, /tmp/.X11-unix), cordon's state directory, the\n"
      "policy's own deny rules, canaries and exfiltration, and an entry cordon's loader refuses\n"
      "(each is checked alone, so --apply adds the others).\n"
      "A host path that is not granted is missing in the sandbox (ENOENT), which the record\n"
      "keeps only when the run sets CORDON_SHIM_FS_EVENTS=all (--env-set, process.env.set).\n"
      "Exit status: 0 (also when there is nothing to suggest); 125 for an unknown id, an\n"
      "unreadable record or an --apply that failed. See docs/learn.md.");

  PolicyImportOptions pol_import;
  auto* pol_import_cmd = policy_cmd->add_subcommand(
      "import",
      "Convert a sandbox-runtime (srt) settings file or a Codex config.toml to a cordon policy");
  pol_import_cmd->add_option("FORMAT", pol_import.format, "srt | codex")->required();
  pol_import_cmd->add_option("FILE", pol_import.file, "The settings file")->required();
  pol_import_cmd
      ->add_option("--output,-o", pol_import.output, "Write the policy here; default: stdout")
      ->type_name("FILE");
  pol_import_cmd
      ->add_option("--report", pol_import.report,
                   "Write the settings without equivalent here; default: stderr")
      ->type_name("FILE");
  pol_import_cmd
      ->add_option("--profile", pol_import.profile,
                   "codex: import with [profiles.NAME] over the top level (default: the file's "
                   "own `profile`)")
      ->type_name("NAME");
  pol_import_cmd->footer(
      "The policy says in `//` comments where each entry came from; every setting of the file\n"
      "is either in it or listed in the report with the reason. `cordon run`, `policy check`\n"
      "and `policy explain` import such a file on the fly when given it as the policy.\n"
      "A deny is never weaker after the import: a deny entry is put in cordon's syntax where\n"
      "that is safe (a URL becomes its host, spaces are trimmed, `..` is resolved after a\n"
      "directory that is not a symlink), and one that cannot be fails the import.\n"
      "Exit status: 0 imported; 1 the file was refused (the message names the file, the key\n"
      "and the fix); 125 a usage or output error.");

  auto* ls_cmd = app.add_subcommand(
      "ls", "List sessions, newest last: how each ended, its size, whether changes are pending");
  ls_cmd->footer(
      "EXIT is the program's exit status, `running` while cordon runs it, or `no end` when\n"
      "cordon was killed before recording one. SIZE is the record on disk. PENDING is `yes`\n"
      "when a cow session holds changes not yet committed or discarded (cordon diff ID).");
  add_state_dir_option(ls_cmd, state_dir);
  bool ls_ids = false;
  ls_cmd->add_flag("--ids", ls_ids, "Only the ids, one a line (for shell completion)")->group("");

  PruneOptions prune;
  std::string prune_older;
  auto* prune_cmd = app.add_subcommand("prune", "Remove the records of finished sessions");
  prune_cmd
      ->add_option("--older-than", prune_older,
                   "Only sessions that ended at least this long ago, e.g. 7d, 12h, 30m")
      ->type_name("DURATION");
  prune_cmd->add_option("--keep", prune.keep, "Never the N newest sessions")->type_name("N");
  add_state_dir_option(prune_cmd, state_dir);
  prune_cmd->add_flag("--dry-run,-n", prune.dry_run, "Say what would go; remove nothing");
  prune_cmd->add_flag("--force", prune.force,
                      "Also sessions whose copy-on-write changes were never committed or "
                      "discarded (they are lost)");
  prune_cmd->footer(
      "Without --older-than and --keep: sessions that ended more than 7 days ago. With both,\n"
      "a session goes only when both allow it. A running session is never removed. A session\n"
      "with pending changes is kept and named, unless --force. `cordon run` also removes, at\n"
      "most once an hour, finished sessions without pending changes older than\n"
      "$CORDON_RETENTION (default 30d; 0 keeps everything).\n"
      "Exit status: 0 done; 1 refused (sessions with pending changes kept); 125 cordon failed\n"
      "(a record could not be removed, a bad option).");

  std::string session_id;
  bool log_json = false;
  auto* log_cmd = app.add_subcommand("log", "Print a session's event log");
  log_cmd->add_option("ID", session_id, "Session id, a unique prefix of one, or `last`")
      ->required();
  log_cmd->add_flag("--json", log_json, "Print the raw JSON Lines");
  add_state_dir_option(log_cmd, state_dir);
  bool log_net = false;
  log_cmd->add_flag("--net", log_net,
                    "The network: connections by host, HTTP requests by method and status, "
                    "and every refusal (with --json: the network events)");
  bool log_follow = false;
  log_cmd->add_flag("--follow,-f", log_follow,
                    "Keep printing events as the session writes them, until it ends");
  bool log_verify = false;
  log_cmd->add_flag("--verify", log_verify,
                    "Check the record's hash chain and name the first line that breaks it");
  std::string log_verify_from;
  log_cmd
      ->add_option("--from", log_verify_from,
                   "With --verify: check session ID's lines in FILE (`-`: standard input), a "
                   "stream that mixes the record with other output, such as a container's log "
                   "that also carries the record: lines that claim the session and are not in its "
                   "hash chain are named")
      ->needs("--verify")
      ->type_name("FILE");
  log_cmd->footer(
      "--verify exit status: 0 the chain verifies; 1 a line was edited, removed, added or moved "
      "(named), or with --from a line claims the session and is not in its chain; 2 the record "
      "could not be read.");

  std::string watch_id;
  auto* watch_cmd = app.add_subcommand(
      "watch", "Follow a running session's events live (what cordon log ID -f shows)");
  watch_cmd->add_option("ID", watch_id, "Session id, a unique prefix of one, or `last`")
      ->required();
  add_state_dir_option(watch_cmd, state_dir);

  ReportOptions report;
  auto* report_cmd = app.add_subcommand(
      "report",
      "Write a session's record as one self-contained HTML page (timeline, network, files)");
  report_cmd->add_option("ID", report.id, "Session id, a unique prefix of one, or `last`")
      ->required();
  report_cmd
      ->add_option("--output,-o", report.output,
                   "Where to write it; default: cordon-report-ID.html in the current directory; "
                   "`-` for stdout")
      ->type_name("FILE");
  add_state_dir_option(report_cmd, state_dir);
  report_cmd->add_flag("--force,-f", report.force, "Replace FILE if it exists");
  report_cmd->footer(
      "The page shows the command, the policy, how it ended and the limits hit; alerts\n"
      "(exfiltration, canaries, private-range and metadata attempts, fronting, limits); a\n"
      "zoomable timeline with a lane per process; the network table, refusals first; and the\n"
      "copy-on-write changes with their diffs. It holds its data, style and script inline and\n"
      "loads nothing (its Content-Security-Policy forbids it), so it opens offline. It is\n"
      "written with mode 0600, like the record it comes from.\n"
      "Exit status: 0 written; 1 refused (FILE exists, no --force); 125 cordon failed (bad id,\n"
      "unreadable record, FILE cannot be written).");

  // The cow review workflow (workflow_cmd.cc).
  const char* wf_footer =
      "ID: a session id, a unique prefix of one, or `last` (as for `cordon log`).\n"
      "Exit status: 0 done; 1 refused (commit conflicts, session still running, no such\n"
      "snapshot, not a copy-on-write session); 125 cordon failed (bad id, I/O error).";
  std::string wf_id, wf_name;
  std::vector<std::string> wf_paths;
  bool diff_stat = false;
  auto* snap_cmd = app.add_subcommand(
      "snapshot", "Checkpoint a cow session as NAME (live while it runs, or after)");
  snap_cmd->add_option("ID", wf_id, "Session")->required();
  snap_cmd->add_option("NAME", wf_name, "Snapshot name (default: snap-DATE-TIME)");
  add_state_dir_option(snap_cmd, state_dir);
  snap_cmd->footer(wf_footer);
  auto* rollback_cmd = app.add_subcommand(
      "rollback", "Back to snapshot NAME or the start (live: the program sees it at once)");
  rollback_cmd->add_option("ID", wf_id, "Session")->required();
  rollback_cmd->add_option("NAME", wf_name, "Snapshot name (default: the start)");
  add_state_dir_option(rollback_cmd, state_dir);
  rollback_cmd->footer(wf_footer);
  auto* diff_cmd = app.add_subcommand(
      "diff", "Show what a cow session changed (added, modified, deleted, renamed)");
  diff_cmd->add_option("ID", wf_id, "Session")->required();
  diff_cmd->add_flag("--stat", diff_stat, "One line per changed path, no content");
  diff_cmd->add_option("PATH", wf_paths, "Only these workspace-relative paths (and beneath)");
  add_state_dir_option(diff_cmd, state_dir);
  diff_cmd->footer(wf_footer);
  auto* commit_cmd = app.add_subcommand(
      "commit",
      "Apply a finished cow session's changes to the workspace: all or nothing, refuses "
      "conflicts, leaves protected paths out unless named");
  commit_cmd->add_option("ID", wf_id, "Session")->required();
  commit_cmd->add_option("PATH", wf_paths,
                         "Only these workspace-relative paths (and beneath); naming a protected "
                         "path (or a protected directory above it) commits it");
  bool include_protected = false;
  commit_cmd->add_flag("--include-protected", include_protected,
                       "Also commit the protected paths (git hooks and config, editor and agent "
                       "settings, CI workflows) that a plain commit leaves out");
  bool unverified_workspace = false;
  commit_cmd->add_flag("--unverified-workspace", unverified_workspace,
                       "Commit a session recorded by an older cordon, which did not note which "
                       "directory its workspace was (the path is still opened without following "
                       "symlinks)");
  add_state_dir_option(commit_cmd, state_dir);
  commit_cmd->footer(wf_footer);
  auto* discard_cmd =
      app.add_subcommand("discard", "Drop every change and snapshot of a finished cow session");
  discard_cmd->add_option("ID", wf_id, "Session")->required();
  add_state_dir_option(discard_cmd, state_dir);
  discard_cmd->footer(wf_footer);

  bool doctor_json = false;
  ExportOptions export_opts;
  auto* export_cmd = app.add_subcommand(
      "export", "Pack a finished session (record, cow layer, report page) into one tar archive");
  export_cmd->add_option("ID", export_opts.id, "Session id, a unique prefix of one, or `last`")
      ->required();
  export_cmd
      ->add_option("--output,-o", export_opts.output,
                   "Where to write it (`-` = stdout); default cordon-session-ID.tar.zst. "
                   "zstd-compressed when the name ends .zst")
      ->type_name("FILE");
  export_cmd->add_flag("--zstd", export_opts.zstd, "Compress with zstd whatever the name");
  add_state_dir_option(export_cmd, state_dir);
  export_cmd->footer(
      "The archive holds manifest.json, report.html (the `cordon report` page) and session/ (the\n"
      "record and the copy-on-write layer); `cordon import` reads it on another machine.\n"
      "A layer of the kernel overlayfs fallback is packed in its own format (0:0 character\n"
      "device whiteouts, user.overlay.opaque).\n"
      "Exit status: 0 done; 1 refused (the session has not ended, FILE exists, the layer holds\n"
      "a device node or uses overlayfs redirects); 125 cordon failed (bad id, I/O error).");
  ImportOptions import_opts;
  auto* import_cmd = app.add_subcommand(
      "import", "Unpack a session archive made by `cordon export` into the state directory");
  import_cmd->add_option("FILE", import_opts.file, "The archive (`-` = stdin)")->required();
  import_cmd->add_option("--as", import_opts.as, "Import under this session id instead")
      ->type_name("ID");
  import_cmd
      ->add_option("--workspace,-w", import_opts.workspace,
                   "Bind the session to this directory of yours: diff compares with it, commit "
                   "writes to it. Default: none (the archive's workspace path is never used)")
      ->type_name("DIR");
  import_cmd
      ->add_option("--max-entries", import_opts.max_entries,
                   "Refuse an archive of more entries (default 200000)")
      ->type_name("N");
  import_cmd
      ->add_option("--max-bytes", import_opts.max_bytes,
                   "Refuse an archive whose contents exceed N bytes (default 8 GiB)")
      ->type_name("N");
  add_state_dir_option(import_cmd, state_dir);
  import_cmd->footer(
      "Every entry is checked and written beside the sessions in a temporary directory, moved\n"
      "into place only when all passed; the directories of imports that were killed are\n"
      "removed by the next import. The workspace the archive names is kept as the session's\n"
      "origin, for display only: without --workspace, `cordon diff` shows the layer against\n"
      "nothing (files as added, deletions listed from the layer) and `cordon commit` refuses.\n"
      "Layers of either format (cordon-fs, kernel overlayfs) are accepted; of devices, only an\n"
      "overlay whiteout (character device 0:0).\n"
      "Exit status: 0 done; 1 refused (an entry, a bound, the id or the archive itself, a\n"
      "--workspace that is not a directory of yours); 125 cordon failed (unreadable FILE, a\n"
      "missing --workspace DIR, I/O error).");
  auto* doctor_cmd = app.add_subcommand(
      "doctor", "Check every requirement of a sandbox here at once: each with its state and fix");
  doctor_cmd
      ->add_option("--state-dir", state_dir,
                   "Check this state directory (an existing one) instead of $CORDON_STATE_DIR "
                   "or the default")
      ->type_name("DIR");
  doctor_cmd->add_flag("--json", doctor_json, "One JSON object: every check and the verdict");
  doctor_cmd->footer(
      "Tries what `cordon run` does, in children that leave nothing behind: the namespaces and\n"
      "the hostname, a fresh /proc, cordon's seccomp filter with its listener, /dev/fuse, a\n"
      "cgroup for limits, an overlay upper layer in the state directory, Landlock and the\n"
      "nftables capture ruleset. Each row is ok, degraded (cordon runs with a named weaker\n"
      "fallback) or missing (a sandbox cannot run in its default mode), with what it means and\n"
      "the setting that fixes it: sysctl, podman/docker flag or Kubernetes securityContext.\n"
      "Exit status: 0 full protection; 1 degraded; 2 cordon cannot run here; 125 usage error\n"
      "(also a --state-dir that is not a directory).");

  // Hidden: the package installs the scripts it prints (packaging/completion).
  std::string completion_shell;
  auto* completion_cmd =
      app.add_subcommand("completion", "Print the completion script for bash, zsh or fish");
  completion_cmd->group("");
  completion_cmd->add_option("SHELL", completion_shell, "bash | zsh | fish")->required();

  ExecOptions exec_opts;
  auto* exec_cmd = app.add_subcommand(
      "exec",
      "Run a program in a running detached session: cordon exec [OPTIONS] ID|NAME [--] COMMAND "
      "[ARGS...]");
  exec_cmd
      ->add_option("ID", exec_opts.session,
                   "Session id (or a prefix, or last), or the name it was given")
      ->required();
  exec_cmd
      ->add_option("--env,-e", exec_opts.env,
                   "Add NAME=VALUE to the program's environment (repeatable); a variable the "
                   "session sets itself (PATH, HOME, the proxy's, a credential's placeholder, a "
                   "decoy) is not replaced: the exec is refused")
      ->allow_extra_args(false)
      ->type_name("NAME=VALUE");
  add_state_dir_option(exec_cmd, state_dir);
  exec_cmd->footer(
      "The program runs in the session's sandbox with the hardening of `cordon run`'s program\n"
      "(seccomp, no capabilities, no_new_privs, Landlock, limits), with this command's stdin,\n"
      "stdout and stderr, in its working directory where the sandbox shows it (else in the\n"
      "session's), and the session's environment. Its events go to the session's record.\n"
      "Exit status: the program's; 128+N if it died of signal N; 125 if cordon failed (no such\n"
      "session, it ended, it is another user's); 126 not executable; 127 not found.\n"
      "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 go to the program's process group;\n"
      "if this command is killed first, its program is killed.\n"
      "`cordon-exec ID -- COMMAND` does the same from a small binary that starts faster.");
  std::string stop_id;
  auto* stop_cmd = app.add_subcommand(
      "stop", "End a detached session (one started with `cordon run` in the background)");
  stop_cmd->add_option("ID", stop_id, "Session id (or a prefix, or last), or the name it was given")
      ->required();
  add_state_dir_option(stop_cmd, state_dir);
  stop_cmd->footer(
      "Every program still running in it is killed; the record is completed as at the end of a\n"
      "run, and the session can be reviewed (diff, commit, discard) like any other. Returns once\n"
      "it has ended. Exit status: 0 stopped; 125 no such running session.");

  // `run`'s program and its arguments are cut off before CLI11 sees them: CLI11 would otherwise
  // read the program's own flags as cordon's, or take a mistyped cordon flag as the program name.
  std::vector<std::string> args(argv + 1, argv + argc);
  bool has_command = split_run_command(*run_cmd, args, run.argv);
  bool has_exec_command = split_run_command(*exec_cmd, args, exec_opts.argv, 1);
  try {
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    // Usage errors exit 125 like env(1)/timeout(1) do for their own failures; --help exits 0.
    return rc == 0 ? 0 : kExitCordonFailed;
  }

  // doctor checks a --state-dir rather than using it (its own resolve_state_dir() reports it).
  if (!state_dir.empty() && !*doctor_cmd) {
    if (auto used = use_state_dir(state_dir); !used) {
      return fail(used.error().to_string());
    }
  }
  if (*exec_cmd) {
    if (!has_exec_command) {
      return fail_in("exec", "no command given; usage: cordon exec ID [--] COMMAND [ARGS...]");
    }
    return exec_command(exec_opts);
  }
  if (*stop_cmd) {
    return stop_command(stop_id);
  }
  if (*run_cmd) {
    if (!has_command && !run.detach) {
      return fail_in("run", "no command given; usage: cordon run [OPTIONS] -- COMMAND [ARGS...]");
    }
    return run_command(run);
  }
  if (*pol_default) {
    return policy_default_command();
  }
  if (*pol_check) {
    return policy_check_command(pol_file, pol_agent);
  }
  if (*pol_explain) {
    return policy_explain_command(pol_file, pol_agent);
  }
  if (*pol_suggest) {
    return policy_suggest_command(suggest);
  }
  if (*pol_import_cmd) {
    return policy_import_command(pol_import);
  }
  if (*doctor_cmd) {
    return doctor_command(state_dir, doctor_json);
  }
  if (*completion_cmd) {
    return completion_command(app, completion_shell);
  }
  if (*ls_cmd) {
    return ls_ids ? ls_ids_command() : ls_command();
  }
  if (*log_cmd) {
    if (log_verify) {
      return log_verify_from.empty() ? log_verify_command(session_id)
                                     : log_verify_stream_command(session_id, log_verify_from);
    }
    return log_net ? log_net_command(session_id, log_json)
                   : log_command(session_id, log_json, log_follow);
  }
  if (*watch_cmd) {
    return log_command(watch_id, false, true);
  }
  if (*report_cmd) {
    return report_command(report);
  }
  if (*export_cmd) {
    return export_command(export_opts);
  }
  if (*import_cmd) {
    return import_command(import_opts);
  }
  if (*prune_cmd) {
    if (!prune_older.empty()) {
      auto age = cordon::policy::parse_duration(prune_older);
      if (!age) {
        return fail_in("prune",
                       "--older-than " + prune_older + ": not a duration; use e.g. 7d, 12h, 30m");
      }
      prune.older_than = std::chrono::duration_cast<std::chrono::seconds>(*age);
    }
    return prune_command(prune);
  }
  if (*snap_cmd) {
    return snapshot_command(wf_id, wf_name);
  }
  if (*rollback_cmd) {
    return rollback_command(wf_id, wf_name);
  }
  if (*diff_cmd) {
    return diff_command(wf_id, diff_stat, wf_paths);
  }
  if (*commit_cmd) {
    return commit_command(wf_id, wf_paths, include_protected, unverified_workspace);
  }
  if (*discard_cmd) {
    return discard_command(wf_id);
  }
  return kExitCordonFailed;
}
