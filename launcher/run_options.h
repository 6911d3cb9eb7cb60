// What `cordon run` was asked on the command line, before it is merged into a policy.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cordon::launcher {

struct RunOptions {
  std::optional<std::string> policy_file;
  // --agent NAME: the policy extends that agent preset (policy/presets.h).
  std::optional<std::string> agent;
  // Overrides of the policy, as typed (validated by the same parsers as the policy file).
  std::optional<std::string> workspace;
  std::optional<std::string> mode;  // cow | ro | rw
  std::optional<std::string> memory, cpus, pids, nofile, timeout;
  std::vector<std::string> env_keep;  // NAME
  std::vector<std::string> env_pass;  // NAME: passed even where process.env.deny matches
  std::vector<std::string> env_set;   // K=V
  std::vector<std::string> allow_host;
  std::vector<std::string> inspect;      // --inspect: network.inspect entries
  std::vector<std::string> credential;   // --credential NAME=HOST[,HOST...]: network.credentials
  std::vector<std::string> read, write;  // extra host paths (filesystem.read / .write)
  std::optional<std::string> events_to;  // --events-to: record.events_to
  std::optional<std::string> otlp;       // --otlp: record.otlp
  // --decider CMD / --decider-socket PATH (docs/decider.md): asked about connections the policy
  // refuses only for not being in network.allow. --decider-timeout: how long one question waits.
  std::optional<std::string> decider, decider_socket, decider_timeout;
  // --ask (docs/ask.md): cordon is the decider, asking at its controlling terminal;
  // --ask-timeout: how long one question waits.
  bool ask = false;
  std::optional<std::string> ask_timeout;
  bool quiet = false;
  // --no-namespaces: advisory mode on the host (launcher/no_namespaces.h).
  bool no_namespaces = false;
  // --learn: network.allow widened to every public destination and every open recorded, so
  // that `cordon policy suggest` can name what the run used (docs/learn.md).
  bool learn = false;
  // --detach (docs/cli.md, `cordon exec`): a session with no program of its own that programs
  // join with `cordon exec`; --name: another handle on it; --idle-timeout: its end when unused.
  bool detach = false;
  std::optional<std::string> name, idle_timeout;
  std::vector<std::string> argv;  // the program and its arguments
};

// Exit codes, following timeout(1) and env(1).
inline constexpr int kExitExfil = 123;         // network.on_exfil: kill ended the session
inline constexpr int kExitTimeout = 124;       // wall-clock timeout reached
inline constexpr int kExitCordonFailed = 125;  // cordon itself failed (bad flag, setup error)
inline constexpr int kExitCannotExec = 126;    // program found but not executable
inline constexpr int kExitNotFound = 127;      // program not found
// Death by signal N: 128 + N.

}  // namespace cordon::launcher
