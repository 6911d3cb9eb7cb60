// One real agent (from npm, under $CORDON_AGENTS_PREFIX or /opt/cordon-agents) run by `cordon
// run --agent` against the scripted model API (mock_model_api.py) on loopback over HTTPS with a
// test CA, in a fresh workspace and home: everything the end-to-end checks read afterwards.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/child.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace cordon::testing {

inline std::string agents_prefix() {
  const char* p = std::getenv("CORDON_AGENTS_PREFIX");
  return p != nullptr && p[0] == '/' ? p : "/opt/cordon-agents";
}

// The one tool call the mock asks for: write a file, read the key, fetch a documentation
// address. Each step echoes its status for the model to see (and the test to read back).
inline constexpr char kToolCommand[] =
    "echo cordon-e2e-wrote > agent-note.txt; cat ~/.ssh/id_rsa; echo key-rc=$?; "
    "curl -sS -m 20 http://198.51.100.7/docs; echo fetch-rc=$?";
inline constexpr char kFinalAnswer[] = "cordon-e2e: the tool ran";
inline constexpr char kPrompt[] = "Run the end-to-end tool call.";
// The API key the agent is handed; the mock accepts any.
inline constexpr char kApiKey[] = "sk-cordon-e2e-key-0123456789";

// What differs between agents.
struct AgentCase {
  std::string preset;    // "claude-code"
  std::string program;   // "claude"
  std::string api_host;  // the name the agent's model API is reached by
  bool via_flag = true;  // --agent NAME; else "extends" in the policy file
  // The agent's own settings in `home` for a model API at `base` ("https://host:port").
  std::function<void(const std::string& home, const std::string& base)> configure;
  // Where the home is not the sandbox user's (Owner::Root), the same through the workspace
  // (project settings) and the command line, as such a user would have to.
  std::function<void(const std::string& ws, const std::string& base)> configure_project;
  std::function<std::vector<std::string>(const std::string& base)> project_args;
  // Variables for the run: the endpoint, the CA, the key. (base, ca file) -> K=V.
  std::function<std::vector<std::string>(const std::string& base, const std::string& ca)> env;
  std::vector<std::string> args;  // after the program name
  std::string state;  // a path beneath the home the agent's run leaves (state kept on the host)
  // Refusals besides the fetch of 198.51.100.7:80 that the agent's run makes ("host:port").
  std::vector<std::string> also_refused;
  bool nested_sandbox = false;  // process.nested_sandbox: the agent's own sandbox inside cordon's
};

// Who owns the workspace and the home. As root, User gives both to an unprivileged uid (the
// sandbox runs as the workspace's owner: a user's project in the user's home); Root leaves both
// root's (the program runs as nobody: the workspace is its copy through cordon-fs, the home's
// state is not its to keep). Rootless, both are the invoking user's either way.
enum class Owner { User, Root };

class AgentRun {
 public:
  explicit AgentRun(const AgentCase& c, Owner owner = Owner::User) : c_(c), owner_(owner) {
    if (::geteuid() == 0 && owner == Owner::User) {
      uid_ = SandboxFixture::kTestUid;
    }
    secret_ = "CORDON-E2E-SECRET-" + std::to_string(::getpid()) + "-" + c.preset;
    ok_ = make_certificate() && start_mock() && make_home() && make_workspace();
    if (!ok_) {
      return;
    }
    std::string policy =
        R"({"network": {"allow": [")" + c_.api_host + ":" + std::to_string(port_) +
        R"("], "resolve": {")" + c_.api_host + R"(": "127.0.0.1"}}, "filesystem": {"read": [")" +
        files_ / "ca.crt" + R"("]})" + (c_.via_flag ? "" : R"(, "extends": ")" + c_.preset + "\"") +
        (c_.nested_sandbox ? R"(, "process": {"nested_sandbox": true})" : "") + "}";
    write_text(files_ / "policy.json", policy);
  }

  bool ok() const { return ok_; }
  // Whether the agent sees (and keeps) its state directory in the home: only where the home is
  // the sandbox user's, and where cordon-fs views hold the protected files inside it; else its
  // settings go through the workspace and the command line.
  bool home_state_shown() const { return owner_ == Owner::User && fs_views_here(); }
  int port() const { return port_; }
  const std::string& ws() const { return ws_.path(); }
  const std::string& home() const { return home_.path(); }
  const std::string& secret() const { return secret_; }
  std::string base() const { return "https://" + c_.api_host + ":" + std::to_string(port_); }

  std::vector<std::string> env() const {
    return {"PATH=" + agents_prefix() + "/bin:/usr/local/bin:/usr/bin:/bin", "HOME=" + home(),
            "LANG=C.UTF-8", "TERM=dumb", "CORDON_STATE_DIR=" + state_.path()};
  }

  RunResult run(const std::vector<std::string>& extra_flags = {}) const {
    std::vector<std::string> argv = {cordon_bin(), "run",      "--workspace",
                                     ws(),         "--policy", files_ / "policy.json"};
    if (c_.via_flag) {
      argv.insert(argv.end(), {"--agent", c_.preset});
    }
    RunSpec spec;
    spec.env = env();
    // The key from the environment, as a user has it: the preset passes it (process.env.pass)
    // past the default env.deny. The rest are this test's settings, given as flags.
    for (const auto& kv : c_.env(base(), files_ / "ca.crt")) {
      if (kv.substr(0, kv.find('=')).find("API_KEY") != std::string::npos) {
        spec.env->push_back(kv);
      } else {
        argv.insert(argv.end(), {"--env-set", kv});
      }
    }
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    argv.push_back("--");
    argv.push_back(c_.program);
    if (!home_state_shown() && c_.project_args) {
      auto extra = c_.project_args(base());
      argv.insert(argv.end(), extra.begin(), extra.end());
    }
    argv.insert(argv.end(), c_.args.begin(), c_.args.end());
    spec.cwd = ws();
    spec.deadline = std::chrono::seconds(150);
    return run_program(argv, spec);
  }

  // `cordon ARGS...` against this run's session store.
  RunResult cordon(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {cordon_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    RunSpec spec;
    spec.env = env();
    spec.cwd = ws();
    return run_program(argv, spec);
  }

  // The files of cordon's record (every session's) that hold `text`, one per line.
  std::string record_files_holding(const std::string& text) const {
    std::string out;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(
             state_.path(), std::filesystem::directory_options::skip_permission_denied, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) {
        break;
      }
      if (it->is_regular_file(ec) && read_text(it->path()).find(text) != std::string::npos) {
        out += it->path().string() + "\n";
      }
    }
    return out;
  }

  // Every request the model API received, as logged by the mock.
  std::vector<nlohmann::json> requests() const {
    return json_lines(read_text(files_ / "requests.jsonl"));
  }
  // The session's events (`cordon log last --json`).
  std::vector<nlohmann::json> events() const {
    return json_lines(cordon({"log", "last", "--json"}).out);
  }

 private:
  static std::vector<nlohmann::json> json_lines(const std::string& text) {
    std::vector<nlohmann::json> out;
    size_t at = 0;
    while (at < text.size()) {
      size_t nl = std::min(text.find('\n', at), text.size());
      auto j = nlohmann::json::parse(text.substr(at, nl - at), nullptr, false);
      if (j.is_object()) {
        out.push_back(std::move(j));
      }
      at = nl + 1;
    }
    return out;
  }

  static bool sh(const std::string& cmd) {
    return run_program({"/bin/sh", "-c", cmd}).exit_code() == 0;
  }

  // A throwaway CA and a certificate for the agents' API names, made with the openssl CLI.
  bool make_certificate() {
    write_text(files_ / "san.ext",
               "subjectAltName=DNS:api.anthropic.com,DNS:api.openai.com,"
               "DNS:generativelanguage.googleapis.com\n");
    std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    return sh("cd " + files_.path() + " && openssl req -x509 " + ec +
              " -keyout ca.key -out ca.crt -days 2 -subj '/CN=cordon e2e CA' 2>/dev/null && "
              "openssl req " +
              ec + " -keyout srv.key -out srv.csr -subj '/CN=" + c_.api_host +
              "' 2>/dev/null && openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key "
              "-CAcreateserial -out srv.crt -days 2 -extfile san.ext 2>/dev/null && "
              "chmod 644 ca.crt");
  }

  bool start_mock() {
    mock_ = Child::start(
        {"python3", source_path("tests/agents/mock_model_api.py"), "cert=" + files_ / "srv.crt",
         "key=" + files_ / "srv.key", "log=" + files_ / "requests.jsonl",
         std::string("command=") + kToolCommand, std::string("final=") + kFinalAnswer});
    auto line = nlohmann::json::parse(mock_.read_line(), nullptr, false);
    port_ = line.is_object() ? line.value("port", 0) : 0;
    return port_ > 0;
  }

  bool make_home() {
    std::filesystem::create_directories(home_ / ".ssh");
    write_text(home_ / ".ssh/id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\n" + secret_ + "\n",
               0600);
    if (owner_ == Owner::User) {  // the user's own settings, seen where home_state_shown()
      c_.configure(home(), base());
    }
    return uid_ == ::geteuid() ||
           sh("chown -R " + std::to_string(uid_) + ":" + std::to_string(uid_) + " " + home());
  }

  bool make_workspace() {
    write_text(ws_ / "README", "a project\n");
    if (!home_state_shown() && c_.configure_project) {
      c_.configure_project(ws(), base());
    }
    return uid_ == ::geteuid() ||
           sh("chown -R " + std::to_string(uid_) + ":" + std::to_string(uid_) + " " + ws());
  }

  AgentCase c_;
  Owner owner_;
  uid_t uid_ = ::geteuid();
  TempDir files_;
  // Not beneath /tmp, as a user's home is not: Codex makes the links its own sandbox starts
  // through (codex-linux-sandbox, on PATH) only where its home is outside the temporary directory.
  TempDir home_{"/var/tmp"};
  TempDir ws_, state_;
  Child mock_;
  int port_ = 0;
  std::string secret_;
  bool ok_ = false;
};

}  // namespace cordon::testing
