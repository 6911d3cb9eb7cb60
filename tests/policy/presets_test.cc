// Agent presets: what each adds to a policy, how a policy file extends one, strict names.
#include "policy/presets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "policy/loader.h"
#include "policy/serialize.h"

namespace cordon::policy {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

LoadOptions opts(const std::string& agent = "") {
  LoadOptions o;
  o.home = "/home/alice";
  o.source_name = "p.json";
  o.agent = agent;
  return o;
}

std::string error_of(std::string_view text, const std::string& agent = "") {
  try {
    parse_policy(text, opts(agent));
  } catch (const PolicyError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

bool allows(const Policy& p, std::string_view host, uint16_t port) {
  return p.network.decide_name(host, port).allow;
}

TEST(Presets, EachNamesItsProgramsHostsStateAndKeys) {
  ASSERT_EQ(presets().size(), 4u);
  for (const Preset& preset : presets()) {
    SCOPED_TRACE(std::string(preset.name));
    EXPECT_FALSE(preset.programs.empty());
    EXPECT_FALSE(preset.hosts.empty());
    EXPECT_FALSE(preset.state.empty());
    EXPECT_FALSE(preset.protect.empty());
    EXPECT_FALSE(preset.keys.empty());
    EXPECT_EQ(find_preset(preset.name), &preset);
    // Every entry parses (a typo here would silently drop a grant or a protection).
    for (std::string_view h : preset.hosts) {
      EXPECT_TRUE(HostPattern::parse(h, nullptr)) << h;
    }
    for (const auto* list : {&preset.state, &preset.config, &preset.protect}) {
      for (std::string_view path : *list) {
        EXPECT_TRUE(PathPattern::parse(path, "/home/alice", nullptr)) << path;
      }
    }
    EXPECT_TRUE(parse_size(preset.limits.memory));
    EXPECT_TRUE(parse_size(preset.limits.tmp));
    EXPECT_TRUE(parse_duration(preset.limits.timeout));
  }
}

TEST(Presets, ClaudeCodeExpandsOnTheDefaultPolicy) {
  Policy p = default_policy(opts("claude-code"));
  EXPECT_EQ(p.extends, "claude-code");
  EXPECT_TRUE(allows(p, "api.anthropic.com", 443));
  EXPECT_FALSE(allows(p, "api.anthropic.com", 80));
  EXPECT_FALSE(allows(p, "statsig.anthropic.com", 443));
  EXPECT_FALSE(allows(p, "api.openai.com", 443));
  // State kept, its hooks and settings not writable, its config read-only.
  EXPECT_TRUE(p.filesystem.decide_write("/home/alice/.claude/projects/x.jsonl").allow);
  for (const char* path :
       {"/home/alice/.claude/settings.json", "/home/alice/.claude/hooks/evil.sh",
        "/home/alice/.claude/commands/x.md", "/home/alice/.claude/CLAUDE.md",
        "/home/alice/.claude/plugins/p/hooks.json", "/home/alice/.claude.json"}) {
    Decision d = p.filesystem.decide_write(path);
    EXPECT_FALSE(d.allow) << path;
  }
  EXPECT_THAT(p.filesystem.decide_write("/home/alice/.claude/settings.json").rule,
              HasSubstr("filesystem.deny_write"));
  EXPECT_TRUE(p.filesystem.decide_read("/home/alice/.claude.json").allow);
  // The default secrets stay denied.
  EXPECT_FALSE(p.filesystem.decide_read("/home/alice/.ssh/id_rsa").allow);
  EXPECT_EQ(p.process.env.set.at("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), "1");
  EXPECT_EQ(p.process.env.set.at("DISABLE_AUTOUPDATER"), "1");
  // The key travels by name only: no value of it anywhere in the policy.
  EXPECT_EQ(p.process.env.set.count("ANTHROPIC_API_KEY"), 0u);
  // Passed, so that the default env.deny ("*API_KEY*") does not strip it.
  EXPECT_NE(std::find(p.process.env.pass.begin(), p.process.env.pass.end(), "ANTHROPIC_API_KEY"),
            p.process.env.pass.end());
  EXPECT_TRUE(p.process.env.is_secret("ANTHROPIC_API_KEY"));
  EXPECT_EQ(p.process.memory, 4ull << 30);
  EXPECT_EQ(p.process.pids, 1024u);
  EXPECT_EQ(p.process.nofile, 4096u);
  EXPECT_EQ(p.filesystem.tmp, 512ull << 20);
  // Two cores, not the default policy's one: the runtimes JIT and collect on threads of their own.
  EXPECT_EQ(p.process.cpus, 2.0);
  EXPECT_EQ(default_policy(opts()).process.cpus, 1.0);
}

TEST(Presets, EveryPresetAllowsItsHostsOnly) {
  struct Case {
    const char* name;
    const char* host;
  } cases[] = {{"codex", "api.openai.com"},
               {"codex", "chatgpt.com"},
               {"gemini", "generativelanguage.googleapis.com"},
               {"opencode", "opencode.ai"},
               {"opencode", "api.anthropic.com"}};
  for (const auto& c : cases) {
    Policy p = default_policy(opts(c.name));
    EXPECT_TRUE(allows(p, c.host, 443)) << c.name << " " << c.host;
    // Their telemetry and update hosts are refused.
    for (const char* other : {"ab.chatgpt.com", "play.googleapis.com", "registry.npmjs.org",
                              "github.com", "models.dev", "statsig.anthropic.com"}) {
      EXPECT_FALSE(allows(p, other, 443)) << c.name << " " << other;
    }
  }
}

TEST(Presets, PolicyFileExtendsAndItsOwnEntriesStay) {
  Policy p = parse_policy(R"({
    "extends": "codex",
    "network": {"allow": ["pypi.org:443"]},
    "filesystem": {"write": ["~/.cache/pip"], "deny_write": ["~/.codex/sessions"]},
    "process": {"memory": "2G", "pids": 64, "cpus": 0.5,
                "env": {"keep": ["PATH"], "set": {"CI": "1"}}}
  })",
                          opts());
  EXPECT_EQ(p.extends, "codex");
  // The file's entries keep their places (the rules events name stay those of the file).
  EXPECT_EQ(p.network.allow[0].text, "pypi.org:443");
  EXPECT_EQ(p.network.decide_name("pypi.org", 443).rule, "network.allow[0]");
  EXPECT_TRUE(allows(p, "api.openai.com", 443));
  EXPECT_EQ(p.filesystem.write[0].text, "~/.cache/pip");
  EXPECT_TRUE(p.filesystem.decide_write("/home/alice/.codex/log/x").allow);
  EXPECT_FALSE(p.filesystem.decide_write("/home/alice/.codex/sessions/a").allow);
  EXPECT_FALSE(p.filesystem.decide_write("/home/alice/.codex/config.toml").allow);
  // Limits the file sets win; the others come from the preset.
  EXPECT_EQ(p.process.memory, 2ull << 30);
  EXPECT_EQ(p.process.pids, 64u);
  EXPECT_EQ(p.process.cpus, 0.5);
  EXPECT_EQ(p.process.nofile, 4096u);
  EXPECT_EQ(p.process.env.set.at("CI"), "1");
  EXPECT_EQ(p.process.env.keep[0], "PATH");
  EXPECT_NE(std::find(p.process.env.pass.begin(), p.process.env.pass.end(), "OPENAI_API_KEY"),
            p.process.env.pass.end());
}

TEST(Presets, AValueThePolicySetsIsNotOverriddenByThePreset) {
  Policy p = parse_policy(
      R"({"process": {"env": {"set": {"DISABLE_TELEMETRY": "0"}}, "timeout": "10m"},
          "filesystem": {"tmp": "8M"}})",
      opts("claude-code"));
  EXPECT_EQ(p.process.env.set.at("DISABLE_TELEMETRY"), "0");
  EXPECT_EQ(p.process.env.set.at("DISABLE_AUTOUPDATER"), "1");
  EXPECT_EQ(p.process.timeout, std::chrono::minutes(10));
  EXPECT_EQ(p.filesystem.tmp, 8ull << 20);
}

TEST(Presets, DenyInThePolicyStillWinsOverThePresetsGrants) {
  Policy p = parse_policy(
      R"({"extends": "gemini", "network": {"deny": ["generativelanguage.googleapis.com"]},
          "filesystem": {"deny": ["~/.gemini"]}})",
      opts());
  EXPECT_FALSE(allows(p, "generativelanguage.googleapis.com", 443));
  EXPECT_FALSE(p.filesystem.decide_write("/home/alice/.gemini/history").allow);
  EXPECT_FALSE(p.filesystem.decide_read("/home/alice/.gemini/history").allow);
}

TEST(Presets, UnknownNamesAreRefusedWithTheClosestOne) {
  EXPECT_THAT(error_of(R"({"extends": "claude"})"),
              HasSubstr("p.json: extends: \"claude\" is not an agent preset; did you mean "
                        "\"claude-code\"? (accepted: claude-code, codex, gemini, opencode)"));
  EXPECT_THAT(error_of(R"({"extends": "gemini-cli"})"), HasSubstr("did you mean \"gemini\"?"));
  EXPECT_THAT(error_of(R"({"extends": "Codex"})"), HasSubstr("did you mean \"codex\"?"));
  std::string none = error_of(R"({"extends": "aider"})");
  EXPECT_THAT(none, HasSubstr("\"aider\" is not an agent preset (accepted: claude-code,"));
  EXPECT_THAT(none, Not(HasSubstr("did you mean")));
  EXPECT_THAT(error_of("{}", "claud-code"), HasSubstr("--agent: \"claud-code\" is not an agent"));
  EXPECT_THAT(error_of(R"({"extends": ["codex"]})"),
              HasSubstr("extends: expected an agent preset"));
  EXPECT_THAT(error_of(R"({"extends": "codex"})", "gemini"),
              HasSubstr("extends: \"codex\" differs from --agent \"gemini\""));
  EXPECT_THAT(error_of(R"({"network": {"extends": "codex"}})"),
              HasSubstr("network.extends: unknown key \"extends\""));
}

TEST(Presets, TheSameNameFromTheFileAndTheFlagIsOneExtension) {
  Policy a = parse_policy(R"({"extends": "opencode"})", opts("opencode"));
  Policy b = default_policy(opts("opencode"));
  EXPECT_EQ(a, b);
}

TEST(Presets, TheRecordRoundTripsWithoutGrowing) {
  for (const Preset& preset : presets()) {
    Policy p = default_policy(opts(std::string(preset.name)));
    nlohmann::json j = to_json(p);
    EXPECT_EQ(j.value("extends", ""), preset.name);
    Policy again = parse_policy(j.dump(), opts());
    EXPECT_EQ(again, p) << preset.name;
  }
}

TEST(Presets, ExplainShowsTheExpansionFirst) {
  std::string text = explain(default_policy(opts("codex")));
  EXPECT_EQ(text.rfind("extends codex: cordon's preset for Codex CLI (codex)", 0), 0u) << text;
  EXPECT_THAT(text, HasSubstr("network: allows api.openai.com:443, chatgpt.com:443"));
  EXPECT_THAT(text, HasSubstr("keeps ~/.codex across runs"));
  EXPECT_THAT(text, HasSubstr("never writable by the agent"));
  EXPECT_THAT(text, HasSubstr("~/.codex/config.toml"));
  EXPECT_THAT(text, HasSubstr("passes OPENAI_API_KEY, CODEX_API_KEY from the host"));
  EXPECT_THAT(text, HasSubstr("/etc/codex/config.toml: system defaults"));
  EXPECT_THAT(text, HasSubstr("install tree"));
  EXPECT_THAT(text, HasSubstr("limits, where the policy sets none: memory 4G, 2 CPUs, 1024 tasks"));
  EXPECT_THAT(text, HasSubstr("process: memory 4 GiB, 2 CPUs, 1024 tasks"));
  EXPECT_THAT(text, HasSubstr("The whole policy, the preset included:"));
  EXPECT_THAT(text, HasSubstr("network: allow api.openai.com port 443 (network.allow[0])"));
  EXPECT_THAT(explain(default_policy(opts())), Not(HasSubstr("extends")));
}

}  // namespace
}  // namespace cordon::policy
