// The embedded default policy is what it claims: no network, copy-on-write, nothing of $HOME.
#include <gtest/gtest.h>

#include "policy/loader.h"
#include "policy/serialize.h"

namespace cordon::policy {
namespace {

LoadOptions opts() {
  LoadOptions o;
  o.home = "/home/alice";
  return o;
}

TEST(DefaultPolicy, EqualsItsOwnParsedText) {
  EXPECT_EQ(default_policy(opts()), parse_policy(default_policy_text(), opts()));
  // Parsing "{}" starts from the same deny/protect lists and struct defaults as the text.
  EXPECT_EQ(default_policy(opts()), parse_policy("{}", opts()));
  EXPECT_EQ(default_policy(opts()).filesystem.protect, default_protected());
}

TEST(DefaultPolicy, TextIsCommentedJson) {
  std::string_view t = default_policy_text();
  EXPECT_NE(t.find("// "), std::string_view::npos);
  EXPECT_NE(t.find("\"version\": 1"), std::string_view::npos);
  // Every field of the schema appears, so `cordon policy default` documents all of them.
  for (const char* key : {"\"allow\"",
                          "\"deny\"",
                          "\"max_connections\"",
                          "\"max_connections_per_host\"",
                          "\"connections_per_minute\"",
                          "\"max_bytes_out\"",
                          "\"max_bytes_in\"",
                          "\"idle_timeout\"",
                          "\"connect_timeout\"",
                          "\"resolve\"",
                          "\"dns\"",
                          "\"types\"",
                          "\"proxy_env\"",
                          "\"workspace\"",
                          "\"mode\"",
                          "\"read\"",
                          "\"write\"",
                          "\"deny_write\"",
                          "\"protect\"",
                          "\"deny_style\"",
                          "\"quota\"",
                          "\"bytes\"",
                          "\"inodes\"",
                          "\"tmp\"",
                          "\"xattrs\"",
                          "\"memory\"",
                          "\"cpus\"",
                          "\"pids\"",
                          "\"nofile\"",
                          "\"fsize\"",
                          "\"timeout\"",
                          "\"kill_grace\"",
                          "\"env\"",
                          "\"keep\"",
                          "\"set\"",
                          "\"exec_allow\"",
                          "\"seccomp\"",
                          "\"hostname\""}) {
    EXPECT_NE(t.find(key), std::string_view::npos) << key;
  }
}

TEST(DefaultPolicy, AllowsNoNetworkAtAll) {
  Policy p = default_policy(opts());
  EXPECT_TRUE(p.network.allow.empty());
  for (const char* host : {"example.com", "api.openai.com", "localhost", "pypi.org"}) {
    for (uint16_t port : {80, 443, 53, 22}) {
      EXPECT_FALSE(p.network.decide_name(host, port).allow) << host << ":" << port;
    }
  }
  for (const char* ip : {"198.51.100.1", "127.0.0.1", "169.254.169.254", "::1", "2001:db8::1"}) {
    EXPECT_FALSE(p.network.decide_ip(IpAddress::parse(ip).value(), 443).allow) << ip;
  }
  EXPECT_EQ(p.network.dns_types, (std::vector<std::string>{"A", "AAAA"}));
}

TEST(DefaultPolicy, WorkspaceIsCopyOnWriteWithLimits) {
  Policy p = default_policy(opts());
  EXPECT_EQ(p.version, 1);
  EXPECT_EQ(p.filesystem.workspace, ".");
  EXPECT_EQ(p.filesystem.mode, WorkspaceMode::Cow);
  EXPECT_EQ(p.filesystem.quota.bytes, 1ull << 30);
  EXPECT_EQ(p.filesystem.quota.inodes, 100000u);
  EXPECT_EQ(p.filesystem.tmp, 64ull << 20);
  EXPECT_EQ(p.process.memory, 1ull << 30);
  EXPECT_EQ(p.process.cpus, 1.0);
  EXPECT_EQ(p.process.pids, 512u);
  EXPECT_EQ(p.process.nofile, 1024u);
  EXPECT_EQ(p.process.timeout, std::chrono::minutes(30));
  EXPECT_TRUE(p.process.exec_allow.empty());
  EXPECT_EQ(p.process.env.keep, EnvPolicy{}.keep);
  EXPECT_EQ(p.process.env.deny, EnvPolicy{}.deny);
}

TEST(DefaultPolicy, NothingOfHomeIsReadable) {
  Policy p = default_policy(opts());
  EXPECT_TRUE(p.filesystem.read.empty());
  EXPECT_TRUE(p.filesystem.write.empty());
  for (const char* path : {"/home/alice/.ssh/id_rsa", "/home/alice/.aws/credentials",
                           "/home/alice/.bashrc", "/home/alice", "/home/alice/.config/gcloud/x",
                           "/etc/shadow", "~/.ssh/id_rsa", "~/.netrc"}) {
    EXPECT_FALSE(p.filesystem.decide_read(path).allow) << path;
    EXPECT_FALSE(p.filesystem.decide_write(path).allow) << path;
  }
  // The secrets are named by a deny rule, not merely unlisted.
  EXPECT_EQ(p.filesystem.decide_read("~/.ssh/id_rsa").rule, "filesystem.deny[0]");
  EXPECT_EQ(p.filesystem.decide_read("/home/alice/.ssh/id_rsa").rule, "filesystem.deny[0]");
  // Secrets inside the workspace are denied too; ordinary files are readable and writable.
  for (const char* path : {".env", "app/.env", "certs/server.pem", "deploy/id_ed25519",
                           "tls/server.key", ".env.local"}) {
    EXPECT_FALSE(p.filesystem.decide_read(path).allow) << path;
  }
  EXPECT_TRUE(p.filesystem.decide_read("src/main.py").allow);
  EXPECT_EQ(p.filesystem.decide_write("src/main.py"), (Decision{true, "filesystem.mode (cow)"}));
}

TEST(DefaultPolicy, ProtectsFilesThatRunCodeOnTheHost) {
  Policy p = default_policy(opts());
  for (const char* path :
       {".git/hooks/pre-commit", ".git/config", ".gitmodules", ".envrc", "sub/.envrc",
        ".vscode/tasks.json", ".idea/workspace.xml", ".mcp.json", ".claude/settings.json",
        ".cursor/mcp.json", ".bashrc", "home/.zshrc", ".github/workflows/ci.yml",
        ".pre-commit-config.yaml", ".devcontainer/devcontainer.json", ".husky/pre-push",
        // Files that point git at another config or hooks directory (found by attack).
        ".git/commondir", ".git/config.worktree", ".git/modules/lib/config",
        ".git/modules/lib/hooks/post-checkout", ".git/worktrees/wt/commondir",
        // At any depth: a nested repository or project is opened by the same tools.
        "sub/.git/config", "a/b/.git/hooks/pre-commit", "sub/.gitmodules", "sub/.vscode/tasks.json",
        "sub/.claude/settings.json", "sub/.mcp.json", "pkg/.github/workflows/ci.yml",
        "pkg/.husky/pre-commit", "x/.idea/workspace.xml", "x/.gemini/settings.json",
        // CI, tool configs and shell startup files the first list missed (attack review F3).
        ".github/actions/a/action.yml", ".github/CODEOWNERS", ".gitlab-ci.yml", "sub/.npmrc",
        ".yarnrc.yml", ".cargo/config", ".cargo/config.toml", ".devcontainer.json", ".zshenv",
        ".zprofile", ".zlogin", ".bash_login"}) {
    Decision d = p.filesystem.decide_write(path);
    EXPECT_FALSE(d.allow) << path;
    EXPECT_EQ(d.rule.rfind("filesystem.protect[", 0), 0u) << path << " " << d.rule;
    EXPECT_TRUE(p.filesystem.decide_read(path).allow) << path;  // readable, just not writable
  }
  for (const char* path :
       {"Makefile", ".git/objects/ab/cdef", ".git/HEAD", "src/config", "docs/CODEOWNERS",
        "package.json", "sub/.git/index", "sub/.git/refs/heads/main"}) {
    EXPECT_TRUE(p.filesystem.decide_write(path).allow) << path;
    EXPECT_TRUE(p.filesystem.decide_create(path, false).allow) << path;
  }
}

TEST(DefaultPolicy, AFileOrSymlinkAtAProtectedDirectoryNameIsProtected) {
  Policy p = default_policy(opts());
  // A `.git` file is a gitdir pointer; a `.github` or `.vscode` symlink leads to another tree.
  for (const char* path : {".git", "sub/.git", ".github", "a/.github", ".vscode", "x/.claude",
                           "a/.github/workflows", "a/.git/hooks", "a/.git/modules"}) {
    Decision d = p.filesystem.decide_create(path, false);
    EXPECT_FALSE(d.allow) << path;
    EXPECT_EQ(d.rule.rfind("filesystem.protect[", 0), 0u) << path << " " << d.rule;
    EXPECT_TRUE(p.filesystem.protect_rule(path, false).has_value()) << path;
  }
  // As directories they are fine: a repository's .git is where an agent commits.
  for (const char* path : {".git", "sub/.git", ".git/objects", "a/.gitlab"}) {
    EXPECT_TRUE(p.filesystem.decide_create(path, true).allow) << path;
    EXPECT_FALSE(p.filesystem.protect_rule(path, true).has_value()) << path;
  }
  for (const char* path : {"src/main.c", "git", "a/github", ".gitignore", "docs/CODEOWNERS"}) {
    EXPECT_TRUE(p.filesystem.decide_create(path, false).allow) << path;
  }
}

TEST(DefaultPolicy, EveryDefaultPatternParses) {
  // default_protected()/default_denied() skip entries that fail to parse; make sure none do.
  EXPECT_EQ(default_protected().size(), 33u);
  EXPECT_EQ(default_denied("/home/alice").size(), 18u);
  // With no usable home the "~" entries are left out, never expanded against "/".
  auto no_home = default_denied("");
  EXPECT_EQ(no_home.size(), 7u);
  for (const auto& p : no_home) {
    EXPECT_FALSE(p.absolute) << p.text;
  }
}

}  // namespace
}  // namespace cordon::policy
