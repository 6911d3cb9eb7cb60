// Entry points of the `cordon` subcommands; main.cc only parses the command line and calls these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/run_options.h"
#include "launcher/session/prune.h"

namespace cordon::launcher {

int run_command(const RunOptions& opts);  // run.cc

// `cordon exec ID -- COMMAND` (exec_cmd.cc): COMMAND in a detached session; exits with its
// status (run_options.h's conventions). `cordon stop ID`: ends the session; 0, or 125.
struct ExecOptions {
  std::string session;            // id, prefix, "last", or --name
  std::vector<std::string> env;   // NAME=VALUE over the session's environment
  std::vector<std::string> argv;  // the program and its arguments
};
int exec_command(const ExecOptions& opts);
int stop_command(const std::string& session);
int policy_default_command();  // policy_cmd.cc
// `agent`: the preset the policy extends, as `cordon run --agent` would ("" for none).
int policy_check_command(const std::string& file, const std::string& agent);    // policy_cmd.cc
int policy_explain_command(const std::string& file, const std::string& agent);  // "" default
// `cordon policy suggest ID`: the allow entries the session's refusals call for, with evidence.
// Exit 0 (also when there is nothing to suggest), 125 on an unknown id, an unreadable record, or
// an --apply that failed (the file is then left as it was).
struct SuggestOptions {
  std::string id;
  bool json = false;
  bool tighten = false;  // also list allow entries the session never used
  std::string apply;     // a policy file to add the suggestions to ("" = only print)
};
int policy_suggest_command(const SuggestOptions& opts);  // policy_cmd.cc

// `cordon policy import FORMAT FILE`: the policy to `output` (stdout for ""), the settings
// without equivalent to `report` (stderr for ""). Exit 0 imported; 1 the file was refused
// (unreadable, invalid, wrong types: the message names the file and the key); 125 a usage or
// output error.
struct PolicyImportOptions {
  std::string format;  // "srt" | "codex"
  std::string file;
  std::string output;
  std::string report;
  std::string profile;  // codex only: [profiles.NAME]
};
int policy_import_command(const PolicyImportOptions& o);  // policy_cmd.cc

// The cow review workflow (workflow_cmd.cc). Exit 0 done, 1 refused (commit conflicts, session
// still running, no such snapshot, not a cow session), 125 cordon failed (bad id, I/O error).
int snapshot_command(const std::string& id, const std::string& name);  // name "" = timestamp
int rollback_command(const std::string& id, const std::string& name);  // name "" = the start
int diff_command(const std::string& id, bool stat_only,
                 const std::vector<std::string>& paths);  // diff_cmd.cc
// Protected changes go only when named in `paths` or with `include_protected`. A session whose
// record does not note its workspace directory is refused unless `unverified_workspace`.
int commit_command(const std::string& id, const std::vector<std::string>& paths,
                   bool include_protected, bool unverified_workspace);
int discard_command(const std::string& id);

// `cordon export` / `cordon import` (archive_cmd.cc, session/session_archive.h). Exit 0 done,
// 1 refused (session not finished, output exists, an archive entry or bound refused, id taken),
// 125 cordon failed (bad id, I/O error).
struct ExportOptions {
  std::string id;
  std::string output;  // "" = cordon-session-ID.tar.zst; "-" = stdout
  bool zstd = false;   // also implied by a name ending .zst
};
int export_command(const ExportOptions& opts);
struct ImportOptions {
  std::string file;          // "-" = stdin
  std::string as;            // another id for the session ("" = the archive's)
  std::string workspace;     // the directory it reviews against and commits to ("" = none)
  uint64_t max_entries = 0;  // 0 = ImportLimits' default
  uint64_t max_bytes = 0;
};
int import_command(const ImportOptions& opts);

// Session retention (prune.cc): removes finished sessions' records; exit 0 done, 1 refused
// (pending changes kept), 125 failed.
int prune_command(const PruneOptions& opts);

// `cordon doctor` (doctor_cmd.cc): every requirement checked, each with its state and fix.
// `state_dir`: --state-dir ("" for $CORDON_STATE_DIR or the default). Exit kDoctorOk,
// kDoctorDegraded, kDoctorCannotRun, or 125 (a usage error, a --state-dir that is no directory).
inline constexpr int kDoctorOk = 0;         // full protection
inline constexpr int kDoctorDegraded = 1;   // runs, with a named weaker fallback
inline constexpr int kDoctorCannotRun = 2;  // a sandbox cannot run here (in its default mode)
int doctor_command(const std::string& state_dir, bool json);

}  // namespace cordon::launcher
