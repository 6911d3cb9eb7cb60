// The real agents, unmodified, under `cordon run --agent`: Claude Code, Codex CLI, Gemini CLI and
// opencode from npm each drive one tool call against a scripted model API on loopback. The tool
// call writes a file, reads ~/.ssh/id_rsa and fetches a documentation address. Checked: the agent
// finishes; the file is in `cordon diff` and lands with `cordon commit` (not before); the key
// never reached the model; the fetch was refused and attributed to curl; nothing but the model
// API was reached and nothing else was tried but what each agent is known to try; as root, the
// sink namespace counted no packet; the agent's state stays on the host. As root the workspace
// and home belong to a user, or (*RootOwnedWorkspace) to root, where the program runs as nobody on
// its copy of the workspace; run the same binary as an ordinary user for the rootless pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

#include "tests/agents/agent_run.h"
#include "tests/support/sink_netns.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

std::string dump(const std::vector<nlohmann::json>& v) {
  std::string s;
  for (const auto& e : v) s += e.dump() + "\n";
  return s;
}

std::string bodies(const std::vector<nlohmann::json>& requests) {
  std::string all;
  for (const auto& r : requests) all += r.value("body", "") + "\n";
  return all;
}

// "host:port" (or "address:port") of a network event.
std::string destination(const nlohmann::json& e) {
  std::string host = e.value("name", "");
  if (host.empty()) host = e.value("address", "");
  return host + ":" + std::to_string(e.value("port", 0));
}

void check_agent(const AgentCase& c, Owner owner = Owner::User) {
  CORDON_REQUIRE(fs::exists(agents_prefix() + "/bin/" + c.program),
                 c.program + " installed under " + agents_prefix() + " (.ci/setup)");
  std::unique_ptr<SinkNetns> sink;
  if (::geteuid() == 0) {
    sink = std::make_unique<SinkNetns>();
    CORDON_REQUIRE(sink->ok() && sink->watch("198.51.100.7"),
                   "the sink network namespace (ip, nft)");
  }
  if (owner == Owner::Root) {
    CORDON_REQUIRE_ROOT();
  }
  AgentRun a(c, owner);
  ASSERT_TRUE(a.ok()) << "could not set up the model API and the home";

  RunResult r = a.run();
  ASSERT_EQ(r.exit_code(), 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;
  EXPECT_THAT(r.out, HasSubstr(kFinalAnswer)) << r.err;

  // The key came from the host's environment through the preset, by name only.
  EXPECT_EQ(a.record_files_holding(kApiKey), "") << "the key's value is in cordon's record";

  // What the model saw: the tool's own report, through the real agent.
  auto requests = a.requests();
  ASSERT_FALSE(requests.empty());
  std::string seen = bodies(requests);
  EXPECT_THAT(seen, HasSubstr("key-rc=1")) << "the key was readable";
  EXPECT_THAT(seen, HasSubstr("198.51.100.7:80 is not in network.allow"));
  EXPECT_THAT(seen, Not(HasSubstr(a.secret()))) << "the key reached the model";
  EXPECT_THAT(r.out + r.err, Not(HasSubstr(a.secret())));

  // The file: in the copy-on-write layer, in the real workspace only once committed.
  EXPECT_FALSE(fs::exists(a.ws() + "/agent-note.txt"));
  RunResult diff = a.cordon({"diff", "last", "--stat"});
  EXPECT_EQ(diff.exit_code(), 0) << diff.err;
  EXPECT_THAT(diff.out, HasSubstr("agent-note.txt")) << diff.out << "\nthe model saw:\n" << seen;
  RunResult commit = a.cordon({"commit", "last"});
  ASSERT_EQ(commit.exit_code(), 0) << commit.out << commit.err;
  EXPECT_EQ(read_text(a.ws() + "/agent-note.txt"), "cordon-e2e-wrote\n");

  // The network: the model API only, and every refusal accounted for.
  auto events = a.events();
  std::set<std::string> refused;
  for (const auto& e : events) {
    std::string kind = e.value("kind", "");
    if (kind == "net.connect" && e.value("decision", "") == "allow") {
      EXPECT_EQ(destination(e), c.api_host + ":" + std::to_string(a.port())) << e.dump();
    }
    if (kind == "net.refused" && e.value("proto", "tcp") == "tcp") {
      refused.insert(destination(e));
    }
    if (kind == "net.dns" && e.value("decision", "") == "allow") {
      EXPECT_EQ(e.value("name", ""), c.api_host) << e.dump();
    }
  }
  std::set<std::string> expected(c.also_refused.begin(), c.also_refused.end());
  expected.insert("198.51.100.7:80");
  EXPECT_EQ(refused, expected) << dump(events);
  bool key_passed = std::any_of(events.begin(), events.end(), [](const nlohmann::json& e) {
    return e.value("kind", "") == "env.passed" &&
           e.value("name", "").find("API_KEY") != std::string::npos;
  });
  EXPECT_TRUE(key_passed) << dump(events);
  bool attributed = std::any_of(events.begin(), events.end(), [](const nlohmann::json& e) {
    return e.value("kind", "") == "net.attribution" && e.value("of", "") == "net.refused" &&
           e.value("address", "") == "198.51.100.7" &&
           e.value("exe", "").find("curl") != std::string::npos;
  });
  EXPECT_TRUE(attributed) << dump(events);
  RunResult net = a.cordon({"log", "last", "--net"});
  EXPECT_THAT(net.out, HasSubstr("198.51.100.7:80")) << net.out;
  EXPECT_THAT(net.out, HasSubstr("by curl (pid ")) << net.out;
  EXPECT_THAT(net.out, HasSubstr(c.api_host)) << net.out;
  if (sink) {
    // The address the tool call aimed at (the whole ranges also catch this host's own traffic).
    EXPECT_EQ(sink->hits_to("198.51.100.7"), 0) << "the fetch left the sandbox";
  }

  if (owner == Owner::User && fs_views_here()) {
    // The agent's state stays on the host, for its next run.
    EXPECT_TRUE(fs::exists(a.home() + "/" + c.state)) << c.state;
  } else if (owner == Owner::User) {
    // Without cordon-fs views the state directory is not shown, and cordon says so.
    EXPECT_THAT(r.err, HasSubstr("is not shown: the rules inside it"));
    EXPECT_FALSE(fs::exists(a.home() + "/" + c.state)) << c.state;
  } else {
    // Root's home is not the sandbox user's: cordon creates nothing there.
    EXPECT_FALSE(fs::exists(a.home() + "/" + c.state.substr(0, c.state.find('/'))));
  }
}

void write_file(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  write_text(path, text);
}

AgentCase claude_code() {
  AgentCase c;
  c.preset = "claude-code";
  c.program = "claude";
  c.api_host = "api.anthropic.com";
  c.configure = [](const std::string&, const std::string&) {};
  c.env = [](const std::string& base, const std::string& ca) {
    return std::vector<std::string>{"ANTHROPIC_BASE_URL=" + base,
                                    std::string("ANTHROPIC_API_KEY=") + kApiKey,
                                    "NODE_EXTRA_CA_CERTS=" + ca};
  };
  // --allowedTools: the shell tool without a prompt (there is no one to answer it).
  c.args = {"-p", kPrompt, "--allowedTools", "Bash"};
  c.state = ".claude/projects";
  c.configure_project = [](const std::string&, const std::string&) {};
  return c;
}

AgentCase codex() {
  AgentCase c;
  c.preset = "codex";
  c.program = "codex";
  c.api_host = "api.openai.com";
  c.via_flag = false;
  c.configure = [](const std::string& home, const std::string& base) {
    write_file(home + "/.codex/config.toml",
               "model = \"mock-model\"\nmodel_provider = \"mock\"\n\n"
               "[model_providers.mock]\nname = \"mock\"\nbase_url = \"" +
                   base + "/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n");
  };
  c.env = [](const std::string&, const std::string& ca) {
    return std::vector<std::string>{std::string("OPENAI_API_KEY=") + kApiKey,
                                    "CODEX_CA_CERTIFICATE=" + ca};
  };
  // Codex takes its model providers from the user's config.toml or from -c, never a project's.
  c.project_args = [](const std::string& base) {
    return std::vector<std::string>{"-c", "model=mock-model",
                                    "-c", "model_provider=mock",
                                    "-c", "model_providers.mock.name=mock",
                                    "-c", "model_providers.mock.base_url=" + base + "/v1",
                                    "-c", "model_providers.mock.env_key=OPENAI_API_KEY",
                                    "-c", "model_providers.mock.wire_api=responses"};
  };
  // Codex's own sandbox off: cordon is the sandbox here.
  c.args = {"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", kPrompt};
  c.state = ".codex/sessions";
  return c;
}

AgentCase gemini() {
  AgentCase c;
  c.preset = "gemini";
  c.program = "gemini";
  c.api_host = "generativelanguage.googleapis.com";
  c.configure = [](const std::string& home, const std::string&) {
    write_file(home + "/.gemini/settings.json",
               R"({"security": {"auth": {"selectedType": "gemini-api-key"}}})");
  };
  c.configure_project = [](const std::string& ws, const std::string&) {
    write_file(ws + "/.gemini/settings.json",
               R"({"security": {"auth": {"selectedType": "gemini-api-key"}}})");
  };
  c.env = [](const std::string& base, const std::string& ca) {
    return std::vector<std::string>{"GOOGLE_GEMINI_BASE_URL=" + base,
                                    std::string("GEMINI_API_KEY=") + kApiKey,
                                    "GEMINI_CLI_TRUST_WORKSPACE=true", "NODE_EXTRA_CA_CERTS=" + ca};
  };
  c.args = {"-p", kPrompt, "--yolo"};
  c.state = ".gemini/tmp";
  // Usage statistics: only ~/.gemini/settings.json turns them off (docs/agents.md), and this
  // user has not.
  c.also_refused = {"play.googleapis.com:443"};
  return c;
}

std::string opencode_config(const std::string& base) {
  return R"({"model": "mock/mock-model",
 "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "mock",
   "options": {"baseURL": ")" +
         base + R"(/v1", "apiKey": "{env:OPENAI_API_KEY}"},
   "models": {"mock-model": {"name": "mock"}}}},
 "permission": {"bash": "allow", "edit": "allow", "external_directory": "allow"}}
)";
}

AgentCase opencode() {
  AgentCase c;
  c.preset = "opencode";
  c.program = "opencode";
  c.api_host = "api.openai.com";
  c.via_flag = false;
  c.configure = [](const std::string& home, const std::string& base) {
    write_file(home + "/.config/opencode/opencode.json", opencode_config(base));
  };
  c.configure_project = [](const std::string& ws, const std::string& base) {
    write_file(ws + "/opencode.json", opencode_config(base));
  };
  c.env = [](const std::string&, const std::string& ca) {
    return std::vector<std::string>{std::string("OPENAI_API_KEY=") + kApiKey,
                                    "NODE_EXTRA_CA_CERTS=" + ca};
  };
  c.args = {"run", kPrompt};
  c.state = ".local/share/opencode/opencode.db";
  // Its config directory's background `npm install` of its plugin package: no switch turns it off.
  c.also_refused = {"registry.npmjs.org:443"};
  return c;
}

TEST(Agents, ClaudeCode) { check_agent(claude_code()); }
TEST(Agents, Codex) { check_agent(codex()); }
TEST(Agents, Gemini) { check_agent(gemini()); }
TEST(Agents, Opencode) { check_agent(opencode()); }
// As root in a root-owned workspace: the program runs as nobody, on its own copy of the workspace.
TEST(Agents, ClaudeCodeRootOwnedWorkspace) { check_agent(claude_code(), Owner::Root); }
TEST(Agents, CodexRootOwnedWorkspace) { check_agent(codex(), Owner::Root); }
TEST(Agents, GeminiRootOwnedWorkspace) { check_agent(gemini(), Owner::Root); }
TEST(Agents, OpencodeRootOwnedWorkspace) { check_agent(opencode(), Owner::Root); }

// Codex with its own sandbox (bubblewrap, --sandbox workspace-write) as a second layer inside
// cordon's: it works with process.nested_sandbox on and is refused, and logged, with it off.
AgentCase codex_own_sandbox(bool nested) {
  AgentCase c = codex();
  c.args = {"exec", "--skip-git-repo-check", "--sandbox", "workspace-write", kPrompt};
  c.nested_sandbox = nested;
  return c;
}

std::vector<nlohmann::json> userns_refusals(const std::vector<nlohmann::json>& events) {
  std::vector<nlohmann::json> out;
  for (const auto& e : events) {
    if (e.value("kind", "") == "proc.refused" && e.value("rule", "") == "process.nested_sandbox") {
      out.push_back(e);
    }
  }
  return out;
}

TEST(Agents, CodexOwnSandboxWorksWithNestedSandbox) {
  AgentCase c = codex_own_sandbox(true);
  CORDON_REQUIRE(fs::exists(agents_prefix() + "/bin/codex"), "codex installed (.ci/setup)");
  AgentRun a(c);
  ASSERT_TRUE(a.ok());
  RunResult r = a.run();
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(kFinalAnswer)) << r.err;
  std::string seen = bodies(a.requests());
  // The tool ran inside Codex's sandbox inside cordon's: cordon still hides the key, and the
  // fetch fails (Codex's sandbox has no network; cordon's would refuse it).
  EXPECT_THAT(seen, HasSubstr("key-rc=1")) << seen;
  EXPECT_THAT(seen, Not(HasSubstr(a.secret())));
  EXPECT_THAT(seen, HasSubstr("fetch-rc=")) << seen;
  EXPECT_THAT(seen, Not(HasSubstr("fetch-rc=0"))) << seen;
  RunResult diff = a.cordon({"diff", "last", "--stat"});
  EXPECT_THAT(diff.out, HasSubstr("agent-note.txt")) << diff.out << diff.err;
  auto events = a.events();
  EXPECT_TRUE(userns_refusals(events).empty()) << dump(events);
}

TEST(Agents, CodexOwnSandboxIsRefusedAndLoggedWithoutNestedSandbox) {
  AgentCase c = codex_own_sandbox(false);
  CORDON_REQUIRE(fs::exists(agents_prefix() + "/bin/codex"), "codex installed (.ci/setup)");
  AgentRun a(c);
  ASSERT_TRUE(a.ok());
  RunResult r = a.run();
  std::string seen = bodies(a.requests());
  // Codex's sandbox could not start, so the command never ran: no file, no report of it (the
  // command's own text, "key-rc=$?", is in the requests either way), and bubblewrap said why.
  EXPECT_THAT(seen, Not(HasSubstr("key-rc=1"))) << seen;
  EXPECT_THAT(seen, Not(HasSubstr("key-rc=0"))) << seen;
  EXPECT_THAT(seen, HasSubstr("bwrap: No permissions to create new namespace")) << seen;
  EXPECT_THAT(seen, Not(HasSubstr(a.secret())));
  RunResult diff = a.cordon({"diff", "last", "--stat"});
  EXPECT_THAT(diff.out, Not(HasSubstr("agent-note.txt"))) << diff.out;
  auto events = a.events();
  auto refused = userns_refusals(events);
  ASSERT_FALSE(refused.empty()) << "exit " << r.exit_code() << "\n"
                                << r.err << "\n"
                                << dump(events);
  EXPECT_THAT(refused[0].value("flags", ""), HasSubstr("CLONE_NEWUSER")) << refused[0].dump();
  EXPECT_THAT(refused[0].value("exe", ""), HasSubstr("bwrap")) << refused[0].dump();
}

// The preset keeps ~/.claude writable and its settings, hooks and commands not: what an agent
// plants there, the host would run in its next unsandboxed session. Tried by a shell in the
// agent's place: overwrite, create, create in a new directory, rename into place.
TEST(Agents, PresetStateKeepsSettingsHooksAndCommandsFromTheAgent) {
  AgentCase c = claude_code();
  c.configure = [](const std::string& home, const std::string&) {
    write_file(home + "/.claude/settings.json", "{}\n");
    fs::create_directories(home + "/.claude/hooks");
  };
  c.program = "sh";
  c.args = {"-c",
            "cd ~/.claude; echo PLANTED > settings.json; echo x > hooks/evil.sh;"
            "mkdir -p commands && echo x > commands/evil.md;"
            "echo '{}' > new.json && mv new.json settings.local.json;"
            "mkdir -p projects && echo kept > projects/note; exit 0"};
  AgentRun a(c);
  ASSERT_TRUE(a.ok());
  RunResult r = a.run({"-q"});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  const std::string dir = a.home() + "/.claude";
  if (fs_views_here()) {
    EXPECT_EQ(read_text(dir + "/projects/note"), "kept\n") << "the state directory is writable";
  } else {
    // No cordon-fs view to hold the rules inside it: ~/.claude is not shown at all.
    EXPECT_FALSE(fs::exists(dir + "/projects"));
  }
  EXPECT_EQ(read_text(dir + "/settings.json"), "{}\n");
  EXPECT_FALSE(fs::exists(dir + "/hooks/evil.sh"));
  EXPECT_FALSE(fs::exists(dir + "/commands/evil.md"));
  EXPECT_FALSE(fs::exists(dir + "/settings.local.json"));
}

}  // namespace
}  // namespace cordon::testing
