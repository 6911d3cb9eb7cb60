// The agent presets (Claude Code, Codex, Gemini CLI, opencode) and how one extends a policy.
#include "policy/presets.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "policy/loader.h"
#include "policy/serialize.h"

namespace cordon::policy {
namespace {

// Codex reads /etc/codex/config.toml below the user's ~/.codex/config.toml. Its analytics go to
// ab.chatgpt.com and chatgpt.com; plugins sync a marketplace from GitHub at start.
constexpr std::string_view kCodexDefaults =
    "# cordon's codex preset: the sandbox's system-wide defaults; ~/.codex/config.toml wins.\n"
    "check_for_update_on_startup = false\n"
    "\n"
    "[analytics]\n"
    "enabled = false\n"
    "\n"
    "[features]\n"
    "plugins = false\n"
    "remote_plugin = false\n"
    "plugin_sharing = false\n"
    "apps = false\n";

// Limits the agents' runtimes (Bun, Node.js, a Rust binary with a Node.js launcher) survive.
// Bun and V8 reserve far more address space than they use, so the limit is generous; rootless it
// is a data-segment limit. Sessions last hours; tools want many files. Two cores: Bun and V8
// compile and collect garbage on threads beside the main one, and a one-core quota (the default
// policy's) made opencode's one-tool-call session take twice as long as unsandboxed.
constexpr PresetLimits kAgentLimits{
    .memory = "4G", .tmp = "512M", .timeout = "8h", .pids = 1024, .nofile = 4096, .cpus = 2};

std::vector<Preset> make_presets() {
  std::vector<Preset> v;
  v.push_back(Preset{
      .name = "claude-code",
      .title = "Claude Code",
      .programs = {"claude"},
      .hosts = {"api.anthropic.com:443", "platform.claude.com:443"},
      .state = {"~/.claude"},
      // MCP servers the host starts and per-project tool permissions live here.
      .config = {"~/.claude.json"},
      .protect = {"~/.claude/settings.json", "~/.claude/settings.local.json", "~/.claude/CLAUDE.md",
                  "~/.claude/hooks", "~/.claude/commands", "~/.claude/agents", "~/.claude/skills",
                  "~/.claude/plugins", "~/.claude/output-styles"},
      .made = {},
      .keys = {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"},
      .keep = {"ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"},
      .env = {{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"},
              {"DISABLE_AUTOUPDATER", "1"},
              {"DISABLE_TELEMETRY", "1"},
              {"DISABLE_ERROR_REPORTING", "1"},
              {"DISABLE_BUG_COMMAND", "1"}},
      .etc = {},
      .limits = kAgentLimits,
  });
  v.push_back(Preset{
      .name = "codex",
      .title = "Codex CLI",
      .programs = {"codex"},
      .hosts = {"api.openai.com:443", "chatgpt.com:443", "auth.openai.com:443"},
      .state = {"~/.codex"},
      .config = {},
      .protect = {"~/.codex/config.toml", "~/.codex/AGENTS.md", "~/.codex/AGENTS.override.md",
                  "~/.codex/requirements.toml", "~/.codex/managed_config.toml",
                  "~/.codex/hooks.json", "~/.codex/prompts", "~/.codex/rules", "~/.codex/skills",
                  "~/.codex/plugins"},
      .made = {},
      .keys = {"OPENAI_API_KEY", "CODEX_API_KEY"},
      .keep = {"OPENAI_BASE_URL"},
      .env = {},
      .etc = {{"codex/config.toml", kCodexDefaults,
               "analytics, the update check and the plugin marketplace off"}},
      .limits = kAgentLimits,
  });
  v.push_back(Preset{
      .name = "gemini",
      .title = "Gemini CLI",
      .programs = {"gemini"},
      .hosts = {"generativelanguage.googleapis.com:443", "cloudcode-pa.googleapis.com:443",
                "oauth2.googleapis.com:443"},
      .state = {"~/.gemini"},
      .config = {},
      .protect = {"~/.gemini/settings.json", "~/.gemini/trustedFolders.json", "~/.gemini/GEMINI.md",
                  "~/.gemini/commands", "~/.gemini/extensions", "~/.gemini/policies",
                  "~/.gemini/hooks", "~/.gemini/skills", "~/.gemini/agents"},
      .made = {},
      .keys = {"GEMINI_API_KEY", "GOOGLE_API_KEY"},
      .keep = {"GOOGLE_GEMINI_BASE_URL", "GEMINI_MODEL", "GOOGLE_CLOUD_PROJECT"},
      // Its usage statistics (play.googleapis.com) have no variable; its system settings files
      // count only when owned by uid 0, which no file is in a user namespace. They are refused.
      .env = {{"GEMINI_TELEMETRY_ENABLED", "false"}},
      .etc = {},
      .limits = kAgentLimits,
  });
  v.push_back(Preset{
      .name = "opencode",
      .title = "opencode",
      .programs = {"opencode"},
      .hosts = {"opencode.ai:443", "api.anthropic.com:443", "api.openai.com:443"},
      // It rewrites files of its own in its configuration directory at every start.
      .state = {"~/.config/opencode", "~/.local/share/opencode", "~/.local/state/opencode",
                "~/.cache/opencode"},
      .config = {},
      // Its settings, agents, commands, plugins and tools; the tools and provider packages it
      // downloads. All run by the host's opencode later.
      .protect = {"~/.config/opencode/opencode.json",
                  "~/.config/opencode/opencode.jsonc",
                  "~/.config/opencode/config.json",
                  "~/.config/opencode/tui.json",
                  "~/.config/opencode/AGENTS.md",
                  "~/.config/opencode/package.json",
                  "~/.config/opencode/node_modules",
                  "~/.config/opencode/agent",
                  "~/.config/opencode/agents",
                  "~/.config/opencode/command",
                  "~/.config/opencode/commands",
                  "~/.config/opencode/mode",
                  "~/.config/opencode/modes",
                  "~/.config/opencode/plugin",
                  "~/.config/opencode/plugins",
                  "~/.config/opencode/tool",
                  "~/.config/opencode/tools",
                  "~/.config/opencode/skill",
                  "~/.config/opencode/skills",
                  "~/.config/opencode/themes",
                  "~/.cache/opencode/bin",
                  "~/.cache/opencode/node_modules"},
      // Its tool downloads' directory: it makes it at start and exits when it cannot.
      .made = {"~/.cache/opencode/bin"},
      .keys = {"OPENCODE_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"},
      .keep = {},
      .env = {{"OPENCODE_DISABLE_AUTOUPDATE", "1"},
              {"OPENCODE_DISABLE_MODELS_FETCH", "1"},
              {"OPENCODE_DISABLE_LSP_DOWNLOAD", "1"},
              {"OPENCODE_DISABLE_SHARE", "1"}},
      .etc = {},
      .limits = kAgentLimits,
  });
  return v;
}

template <typename T>
void add_once(std::vector<T>& v, T x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) {
    v.push_back(std::move(x));
  }
}

void add_paths(std::vector<PathPattern>& v, const std::vector<std::string_view>& texts,
               std::string_view home) {
  for (std::string_view t : texts) {
    // No usable home: "~" names nothing cordon mounts, so there is nothing to grant or protect.
    if (auto pat = PathPattern::parse(t, home, nullptr)) {
      add_once(v, std::move(*pat));
    }
  }
}

std::string join(const std::vector<std::string_view>& v) {
  std::string out;
  for (std::string_view s : v) {
    out += (out.empty() ? "" : ", ") + std::string(s);
  }
  return out;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = make_presets();
  return all;
}

const Preset* find_preset(std::string_view name) {
  for (const Preset& p : presets()) {
    if (p.name == name) {
      return &p;
    }
  }
  return nullptr;
}

std::string unknown_preset(std::string_view name) {
  std::string accepted;
  const Preset* best = nullptr;
  for (const Preset& p : presets()) {
    accepted += (accepted.empty() ? "" : ", ") + std::string(p.name);
    // The program's name ("claude") or a name that starts the same ("claude_code", "gemini-cli").
    bool program = std::find(p.programs.begin(), p.programs.end(), name) != p.programs.end();
    size_t common = 0;
    while (common < name.size() && common < p.name.size() &&
           std::tolower(static_cast<unsigned char>(name[common])) == p.name[common]) {
      ++common;
    }
    if (best == nullptr && (program || common >= 4)) {
      best = &p;
    }
  }
  std::string msg = "\"" + std::string(name.substr(0, 64)) + "\" is not an agent preset";
  if (best != nullptr) {
    msg += "; did you mean \"" + std::string(best->name) + "\"?";
  }
  return msg + " (accepted: " + accepted + ")";
}

void apply_preset(Policy& p, const Preset& preset, std::string_view home,
                  const std::function<bool(std::string_view field)>& set_by_policy) {
  for (std::string_view h : preset.hosts) {
    if (auto pat = HostPattern::parse(h, nullptr)) {
      add_once(p.network.allow, std::move(*pat));
    }
  }
  add_paths(p.filesystem.write, preset.state, home);
  add_paths(p.filesystem.read, preset.config, home);
  add_paths(p.filesystem.deny_write, preset.protect, home);
  EnvPolicy& env = p.process.env;
  for (std::string_view k : preset.keys) {
    add_once(env.pass, std::string(k));
  }
  for (std::string_view k : preset.keep) {
    add_once(env.keep, std::string(k));
  }
  for (const auto& [k, v] : preset.env) {
    env.set.emplace(std::string(k), std::string(v));  // a value the policy set stays
  }
  ProcessPolicy& pr = p.process;
  const PresetLimits& lim = preset.limits;
  if (!set_by_policy("process.memory")) {
    pr.memory = parse_size(lim.memory).value_or(pr.memory);
  }
  if (!set_by_policy("process.timeout")) {
    pr.timeout = parse_duration(lim.timeout).value_or(pr.timeout);
  }
  if (!set_by_policy("process.pids")) {
    pr.pids = lim.pids;
  }
  if (!set_by_policy("process.nofile")) {
    pr.nofile = lim.nofile;
  }
  if (!set_by_policy("process.cpus")) {
    pr.cpus = lim.cpus;
  }
  if (!set_by_policy("filesystem.tmp")) {
    p.filesystem.tmp = parse_size(lim.tmp).value_or(p.filesystem.tmp);
  }
  p.extends = std::string(preset.name);
}

std::vector<std::string> explain_preset(const Preset& preset) {
  std::string name(preset.name);
  std::vector<std::string> lines;
  lines.push_back("extends " + name + ": cordon's preset for " + std::string(preset.title) + " (" +
                  join(preset.programs) + "), added to what the policy says:");
  lines.push_back("  network: allows " + join(preset.hosts) + " (the model API and its sign-in)");
  lines.push_back("  filesystem: keeps " + join(preset.state) +
                  " across runs, read-write (cordon run creates what is missing)");
  if (!preset.config.empty()) {
    lines.push_back("  filesystem: reads " + join(preset.config) + ", never writes it");
  }
  lines.push_back(
      "  filesystem: never writable by the agent (settings, hooks, commands the host "
      "runs later): " +
      join(preset.protect));
  if (!preset.made.empty()) {
    lines.push_back("  filesystem: creates " + join(preset.made) +
                    " empty where missing (the agent needs them and may not make them)");
  }
  lines.push_back(
      "  filesystem: the program's install tree, found from its path (e.g. the npm "
      "prefix), readable");
  lines.push_back("  environment: passes " + join(preset.keys) +
                  " from the host where set, although process.env.deny matches them "
                  "(process.env.pass; recorded by name, the values never)");
  if (!preset.keep.empty()) {
    lines.push_back("  environment: keeps " + join(preset.keep));
  }
  if (!preset.env.empty()) {
    std::string set;
    for (const auto& [k, v] : preset.env) {
      set += (set.empty() ? "" : ", ") + std::string(k) + "=" + std::string(v);
    }
    lines.push_back("  environment: sets " + set +
                    " (telemetry, error reports and self-updates off)");
  }
  for (const EtcDefault& e : preset.etc) {
    lines.push_back("  /etc/" + std::string(e.path) + ": system defaults below the user's own (" +
                    std::string(e.why) + "), where the host has no such file");
  }
  const PresetLimits& lim = preset.limits;
  lines.push_back("  limits, where the policy sets none: memory " + std::string(lim.memory) + ", " +
                  cpus_text(lim.cpus) + ", " + std::to_string(lim.pids) + " tasks, " +
                  std::to_string(lim.nofile) + " open files, /tmp " + std::string(lim.tmp) +
                  ", timeout " + std::string(lim.timeout));
  return lines;
}

}  // namespace cordon::policy
