// Agent presets: what running Claude Code, Codex, Gemini CLI or opencode needs, as additions to a
// policy (`cordon run --agent NAME`, or "extends": "NAME" in a policy file).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy.h"

namespace cordon::policy {

// A file the preset puts into the sandbox's /etc: the agent's system-wide defaults layer, which
// its own user settings override. Only where the host has none (an administrator's file wins).
struct EtcDefault {
  std::string_view path;  // relative to /etc
  std::string_view content;
  std::string_view why;
};

// process.memory, filesystem.tmp, process.timeout, process.pids, process.nofile, process.cpus.
struct PresetLimits {
  std::string_view memory, tmp, timeout;
  uint32_t pids = 0, nofile = 0;
  double cpus = 0;
};

struct Preset {
  std::string_view name;   // "claude-code"
  std::string_view title;  // "Claude Code"
  // The programs the preset is for (basenames), to find the install tree and to say so when
  // the program run is another one.
  std::vector<std::string_view> programs;
  std::vector<std::string_view> hosts;  // network.allow: the model APIs and their sign-in
  // filesystem.write: state kept across runs. Directories; `cordon run` creates a missing one,
  // so the agent's state lands on the host rather than in the sandbox's throwaway home.
  std::vector<std::string_view> state;
  std::vector<std::string_view> config;   // filesystem.read: settings read, never written
  std::vector<std::string_view> protect;  // filesystem.deny_write: code the host runs later
  // Protected directories the agent creates at every start and fails without: `cordon run`
  // creates them empty with the state, before any view starts (the agent cannot, by the rules).
  std::vector<std::string_view> made;
  // Credentials, passed by name (process.env.pass) where the host has them, although the
  // default env.deny matches them: their values never enter the policy or the session record.
  std::vector<std::string_view> keys;
  std::vector<std::string_view> keep;  // process.env.keep: endpoints and model names
  // process.env.set: turns off telemetry, error reports and self-updates.
  std::vector<std::pair<std::string_view, std::string_view>> env;
  std::vector<EtcDefault> etc;
  PresetLimits limits;  // what its runtime survives, where the policy sets no limit itself
};

// Every preset, in the order `cordon policy explain` lists them.
const std::vector<Preset>& presets();
// The preset called `name`, or null.
const Preset* find_preset(std::string_view name);
// Why `name` is no preset, with the closest name: `"claude" is not an agent preset; did you
// mean "claude-code"? (accepted: claude-code, codex, gemini, opencode)`.
std::string unknown_preset(std::string_view name);

// Extends `p` with `preset`: its hosts, paths and variables are added to the lists (each once);
// its limits and env.set values apply where `set_by_policy("process.memory")` (a dotted field
// path) says the policy did not set them itself. Records the name in `p.extends`.
void apply_preset(Policy& p, const Preset& preset, std::string_view home,
                  const std::function<bool(std::string_view field)>& set_by_policy);

// The preset's expansion in words, one line each, for `cordon policy explain`.
std::vector<std::string> explain_preset(const Preset& preset);

}  // namespace cordon::policy
