// The embedded default policy (`cordon policy default`) and the default deny/protect lists.
#include <string_view>
#include <vector>

#include "policy/loader.h"
#include "policy/policy.h"

namespace cordon::policy {
namespace {

// Kept in step with kDefaultText below; a test checks that default_policy() == the parsed text.
constexpr std::string_view kDeniedSecrets[] = {
    "~/.ssh",    "~/.gnupg",      "~/.aws",        "~/.azure",           "~/.config/gcloud",
    "~/.kube",   "~/.docker",     "~/.netrc",      "~/.git-credentials", "~/.npmrc",
    "~/.pypirc", "**/.env",       "**/.env.local", "**/*.pem",           "**/*.key",
    "**/id_rsa", "**/id_ed25519", "**/id_ecdsa",
};

// Workspace files that make the host run code later: when the user opens the folder in an editor,
// runs git, enters it with direnv, starts a shell there, or pushes to CI. An agent rewriting them
// is how a sandbox escape becomes persistent. Every entry holds at any depth ("**/"): a nested
// repository or project folder is opened by the same tools. A file or symlink standing at one of
// these directory names (a `.git` file pointing git at another directory, a `.github` symlink) is
// protected too (FilesystemPolicy::protect_rule). Deliberately absent: Makefile, package.json,
// setup.py, Cargo.toml and friends also run code, but editing them is an agent's everyday job, so
// protecting them would make the sandbox useless; `cordon diff` shows them for review instead.
// The rest of .git (objects, refs, index) stays writable so an agent can commit in its view.
constexpr std::string_view kProtected[] = {
    "**/.git/hooks/**",            // run by every git commit/checkout/merge on the host
    "**/.git/config",              // core.fsmonitor, core.hooksPath, filters, aliases
    "**/.git/config.worktree",     // the same, per worktree (extensions.worktreeConfig)
    "**/.git/commondir",           // points git at another directory's config and hooks
    "**/.git/modules/**",          // submodules' own config and hooks
    "**/.git/worktrees/**",        // linked worktrees' commondir, config and HEAD
    "**/.gitmodules",              // submodule URLs and update commands
    "**/.envrc",                   // direnv runs it on cd
    "**/.vscode/**",               // tasks.json, settings (terminal/interpreter paths)
    "**/.idea/**",                 // run configurations, external tools
    "**/.devcontainer/**",         // postCreateCommand runs when the editor reopens it
    "**/.zed/**",                  // Zed tasks and settings
    "**/.mcp.json",                // MCP servers an agent client will start
    "**/.claude/**",               // agent hooks and settings
    "**/.cursor/**",               // agent rules and MCP servers
    "**/.gemini/**",               // Gemini CLI project settings and MCP servers
    "**/.bashrc",                  // interactive bash started in the workspace
    "**/.bash_profile",            // bash login shells
    "**/.profile",                 // sh and other login shells
    "**/.zshrc",                   // zsh
    "**/.github/**",               // CI workflows and the actions they use, with repo secrets
    "**/.pre-commit-config.yaml",  // installed into the git hooks
    "**/.husky/**",                // git hooks managed by husky
    "**/.devcontainer.json",       // the one-file form of .devcontainer/
    "**/.gitlab-ci.yml",           // GitLab CI jobs
    "**/.cargo/config",            // cargo: build.rustc-wrapper, target runners, aliases
    "**/.cargo/config.toml",       // the same
    "**/.yarnrc.yml",              // yarn: yarnPath, plugins run by every yarn command
    "**/.npmrc",                   // npm: script-shell, node-options, registry tokens
    "**/.zshenv",                  // every zsh, interactive or not
    "**/.zprofile",                // zsh login shells
    "**/.zlogin",                  // zsh login shells, after .zshrc
    "**/.bash_login",              // bash login shells without .bash_profile
};

constexpr std::string_view kDefaultText =
    R"json(// cordon's default policy: what `cordon run -- CMD` gets with no --policy.
// Safe by default: no network at all, the workspace copy-on-write, nothing of $HOME.
// Copy it, edit it, and pass it with --policy FILE. Comments (// and /* */) are allowed.
// Sizes: 512, "64K", "512M", "1G", "1.5G" (binary units). Durations: "250ms", "90s", "1m30s", "2h".
{
  "version": 1,

  "network": {
    // Destinations the program may reach, e.g. "api.openai.com:443", "*.githubusercontent.com",
    // "pypi.org", "10.0.0.0/8", "[2001:db8::1]:443", "localhost:8000-8100". Empty: no network.
    "allow": [],
    // Always refused, even if allowed above. Private, loopback, link-local and cloud-metadata
    // addresses are refused anyway unless an allow entry names them explicitly.
    "deny": [],
    "max_connections": 64,            // open at once, whole session
    "max_connections_per_host": 16,   // open at once, per destination
    "connections_per_minute": 600,    // new connections per sliding minute
    "max_bytes_out": 0,               // upload budget for the session; 0 = unlimited
    "max_bytes_in": 0,                // download budget; 0 = unlimited
    "idle_timeout": "5m",             // a connection silent this long is closed
    "connect_timeout": "10s",         // dialing an upstream
    "resolve": {},                    // pinned names, like curl --resolve: {"a.test": "127.0.0.1"}
    "dns": { "types": ["A", "AAAA"] },  // record types answered for allowed names
    "proxy_env": true                 // set HTTP(S)_PROXY/ALL_PROXY/NO_PROXY inside the sandbox
  },

  "filesystem": {
    "workspace": ".",                 // the directory the program works in (cwd by default)
    "mode": "cow",                    // cow: changes kept aside until `cordon commit`; ro; rw
    "read": [],                       // extra host paths visible read-only, e.g. "~/.gitconfig"
    "write": [],                      // extra host paths visible read-write
    // Never readable nor writable, wherever they appear; wins over everything above.
    "deny": [
      "~/.ssh", "~/.gnupg", "~/.aws", "~/.azure", "~/.config/gcloud", "~/.kube", "~/.docker",
      "~/.netrc", "~/.git-credentials", "~/.npmrc", "~/.pypirc",
      "**/.env", "**/.env.local", "**/*.pem", "**/*.key", "**/id_rsa", "**/id_ed25519",
      "**/id_ecdsa"
    ],
    "deny_write": [],                 // readable but never writable
    // Workspace files that would run code on the host later (git hooks, editor tasks, shell rc
    // files, CI workflows), at any depth: write-protected in the sandbox, flagged by `cordon
    // diff`, and left out by `cordon commit` unless named. [] lifts it.
    "protect": [
      "**/.git/hooks/**", "**/.git/config", "**/.git/config.worktree", "**/.git/commondir",
      "**/.git/modules/**", "**/.git/worktrees/**", "**/.gitmodules", "**/.envrc",
      "**/.vscode/**", "**/.idea/**", "**/.devcontainer/**", "**/.zed/**", "**/.mcp.json",
      "**/.claude/**", "**/.cursor/**", "**/.gemini/**", "**/.bashrc", "**/.bash_profile",
      "**/.profile", "**/.zshrc", "**/.github/**", "**/.pre-commit-config.yaml",
      "**/.husky/**", "**/.devcontainer.json", "**/.gitlab-ci.yml", "**/.cargo/config",
      "**/.cargo/config.toml", "**/.yarnrc.yml", "**/.npmrc", "**/.zshenv", "**/.zprofile",
      "**/.zlogin", "**/.bash_login"
    ],
    "deny_style": "eacces",           // denied workspace files: "eacces" (unreadable) or "hide"
    "quota": { "bytes": "1G", "inodes": 100000 },  // what the session may add to the workspace
    "tmp": "64M",                     // size of the sandbox's private /tmp
    "xattrs": false                   // keep extended attributes in the copy-on-write workspace
  },

  "process": {
    "memory": "1G",                   // memory limit of the whole sandbox; 0 = unlimited
    "cpus": 1,                        // CPU quota in cores (0.5 = half a core); 0 = unlimited
    "pids": 512,                      // processes and threads; 0 = unlimited
    "nofile": 1024,                   // open files per process
    "fsize": 0,                       // largest file a process may write; 0 = unlimited
    "timeout": "30m",                 // wall clock for the whole run; 0 = none
    "kill_grace": "5s",               // SIGTERM, then SIGKILL this much later
    "env": {
      // Variables passed through from the caller's environment; everything else is dropped.
      "keep": ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME",
               "SHELL", "COLORTERM", "NO_COLOR"],
      "set": {},                      // set inside the sandbox: {"CI": "1"}
      // Never passed through, even when kept (case-insensitive, '*' globs).
      "deny": ["*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*API_KEY*", "*APIKEY*",
               "*CREDENTIAL*", "*PRIVATE_KEY*", "AWS_*", "AZURE_*",
               "GOOGLE_APPLICATION_CREDENTIALS", "GH_*", "GITHUB_*", "SSH_AUTH_SOCK",
               "GPG_AGENT_INFO", "*_AUTH*", "*COOKIE*"]
    },
    "exec_allow": [],                 // programs that may be executed; empty = any
    "seccomp": { "allow": [], "deny": [] },  // syscalls lifted from / added to the built-in list
    "hostname": "cordon"              // the sandbox's hostname
  },

  // The session's record, events.jsonl: bounded, so no program can fill the disk through it.
  "record": {
    "max_bytes": "256M",              // the file's cap (at least 1M; it cannot be lifted)
    "events_per_second": 1000         // per writer and kind family, burst of 10 s; 0 = no limit
  }
}
)json";

}  // namespace

std::string_view default_policy_text() { return kDefaultText; }

Policy default_policy(const LoadOptions& opts) {
  LoadOptions o = opts;
  if (o.source_name == "policy") {
    o.source_name = "default policy";
  }
  // The text spells out every default; a preset must see them as unset, or its limits would
  // never apply without a policy file ("{}" parses to the same defaults, a test checks).
  return parse_policy(o.agent.empty() ? kDefaultText : std::string_view("{}"), o);
}

std::vector<PathPattern> default_protected() {
  std::vector<PathPattern> out;
  for (std::string_view t : kProtected) {
    // All relative: no home needed, and a parse failure here is a bug caught by the tests.
    if (auto p = PathPattern::parse(t, "", nullptr)) {
      out.push_back(std::move(*p));
    }
  }
  return out;
}

std::vector<PathPattern> default_denied(std::string_view home) {
  std::vector<PathPattern> out;
  for (std::string_view t : kDeniedSecrets) {
    // With no usable home, "~" entries cannot be expanded; they name nothing reachable then
    // (nothing of an unknown $HOME is mounted), so skipping them loses no protection.
    if (auto p = PathPattern::parse(t, home, nullptr)) {
      out.push_back(std::move(*p));
    }
  }
  return out;
}

}  // namespace cordon::policy
