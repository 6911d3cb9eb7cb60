// An agent preset in the launch plan: the install tree found from the program's path (npm
// prefixes, native installers, an interpreter outside the system), state directories created
// only in the sandbox user's own home and never through a symlink, /etc defaults.
#include "launcher/agent_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "launcher/sandbox/shebang.h"
#include "policy/loader.h"
#include "tests/support/test_env.h"

namespace cordon::launcher {
namespace {

using cordon::testing::TempDir;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
namespace fs = std::filesystem;

void write_exe(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0755);
}

void link_to(const std::string& target, const std::string& link) {
  fs::create_directories(fs::path(link).parent_path());
  fs::create_symlink(target, link);
}

// The layout `npm install -g --prefix P @acme/agent` leaves: P/bin/agent -> the package's script.
struct NpmPrefix {
  TempDir dir;
  std::string bin() const { return dir / "bin"; }
  std::string pkg() const { return dir / "lib/node_modules/@acme/agent"; }
  NpmPrefix() {
    write_exe(pkg() + "/bin/cli.js", "#!/usr/bin/env node\nconsole.log(1)\n");
    write_exe(pkg() + "/node_modules/@acme/agent-linux-x64/bin/agent",
              "\x7f"
              "ELF");
    link_to("../lib/node_modules/@acme/agent/bin/cli.js", bin() + "/agent");
  }
};

TEST(InstallTree, NpmPrefixGivesItsBinAndThePackage) {
  NpmPrefix npm;
  TempDir ws, home;
  auto tree = install_tree("agent", "/usr/bin:" + npm.bin(), ws.path(), home.path(), ws.path());
  EXPECT_THAT(tree, UnorderedElementsAre(npm.bin(), npm.pkg()));
  // The same by absolute path, and an unscoped package.
  EXPECT_THAT(install_tree(npm.bin() + "/agent", "", ws.path(), home.path(), ws.path()),
              UnorderedElementsAre(npm.bin(), npm.pkg()));
  write_exe(npm.dir / "lib/node_modules/plain/cli.js", "#!/bin/sh\n");
  link_to("../lib/node_modules/plain/cli.js", npm.bin() + "/plain");
  EXPECT_THAT(install_tree("plain", npm.bin(), ws.path(), home.path(), ws.path()),
              UnorderedElementsAre(npm.bin(), npm.dir / "lib/node_modules/plain"));
}

TEST(InstallTree, NativeInstallerGivesItsBinAndVersionsDirectory) {
  TempDir ws, home;
  write_exe(home / ".local/share/claude/versions/2.1.0",
            "\x7f"
            "ELF");
  link_to(home / ".local/share/claude/versions/2.1.0", home / ".local/bin/claude");
  EXPECT_THAT(install_tree("claude", home / ".local/bin", ws.path(), home.path(), ws.path()),
              UnorderedElementsAre(home / ".local/bin", home / ".local/share/claude/versions"));
}

TEST(InstallTree, InterpreterOutsideTheSystemComesToo) {
  NpmPrefix npm;
  TempDir ws, home, nvm;
  write_exe(nvm / "bin/node",
            "\x7f"
            "ELF");
  auto tree = install_tree("agent", nvm / "bin:" + npm.bin(), ws.path(), home.path(), ws.path());
  EXPECT_THAT(tree, UnorderedElementsAre(npm.bin(), npm.pkg(), nvm / "bin"));
  // `env -S node --flag` and a direct interpreter path name the same interpreter.
  write_exe(npm.pkg() + "/bin/cli.js", "#!/usr/bin/env -S node --no-warnings\n");
  EXPECT_THAT(install_tree("agent", nvm / "bin:" + npm.bin(), ws.path(), home.path(), ws.path()),
              Contains(nvm / "bin"));
  write_exe(npm.pkg() + "/bin/cli.js", "#!" + nvm / "bin/node" + "\n");
  EXPECT_THAT(install_tree("agent", npm.bin(), ws.path(), home.path(), ws.path()),
              Contains(nvm / "bin"));
}

TEST(InstallTree, NeverTheHomeTheWorkspaceOrTheSystem) {
  TempDir ws, home;
  // A program right in the home, or in the workspace (a project's node_modules/.bin).
  write_exe(home / "agent", "#!/bin/sh\n");
  EXPECT_THAT(install_tree("agent", home.path(), ws.path(), home.path(), ws.path()), IsEmpty());
  write_exe(ws / "node_modules/agent/cli.js", "#!/bin/sh\n");
  link_to("../agent/cli.js", ws / "node_modules/.bin/agent");
  EXPECT_THAT(install_tree("agent", ws / "node_modules/.bin", ws.path(), home.path(), ws.path()),
              IsEmpty());
  // System programs are visible anyway; a missing one is `cordon run`'s to report.
  EXPECT_THAT(install_tree("sh", "/usr/bin:/bin", ws.path(), home.path(), ws.path()), IsEmpty());
  EXPECT_THAT(install_tree("no-such-agent", "/usr/bin", ws.path(), home.path(), ws.path()),
              IsEmpty());
  // A directory holding the workspace is never bound over it.
  TempDir outer;
  write_exe(outer / "bin/agent", "#!/bin/sh\n");
  EXPECT_THAT(install_tree("agent", outer / "bin", ws.path(), home.path(), outer / "bin/ws"),
              IsEmpty());
}

TEST(Shebang, NamesTheInterpreterOfTheFirstLine) {
  EXPECT_EQ(shebang_interpreter("#!/usr/bin/env node\nrest"), "node");
  EXPECT_EQ(shebang_interpreter("#! /usr/bin/env -S node --max-old-space-size=1 FOO=1\n"), "node");
  EXPECT_EQ(shebang_interpreter("#!/usr/bin/env FOO=1 -i bun"), "bun");
  EXPECT_EQ(shebang_interpreter("#!/opt/node/bin/node --x\r\n"), "/opt/node/bin/node");
  EXPECT_EQ(shebang_interpreter("#!/bin/sh"), "/bin/sh");
  for (const char* none : {"", "#", "#!", "#!   \n/bin/sh", "#!/usr/bin/env\nnode",
                           "\x7f"
                           "ELF",
                           " #!/bin/sh", "#!/usr/bin/env -S\n"}) {
    EXPECT_EQ(shebang_interpreter(none), "") << none;
  }
}

HostFacts facts(const std::string& cwd, const std::string& home, const std::string& path) {
  HostFacts h;
  h.euid = ::geteuid();
  h.egid = ::getegid();
  h.cwd = cwd;
  h.home = home;
  static std::string path_kv;
  path_kv = "PATH=" + path;
  static char* env[] = {path_kv.data(), nullptr};
  h.env = env;
  h.fs_views = true;  // planned only: no view is started
  return h;
}

policy::Policy agent_policy(const std::string& agent, const std::string& ws,
                            const std::string& home) {
  policy::LoadOptions lo;
  lo.home = home;
  lo.agent = agent;
  policy::Policy p = policy::default_policy(lo);
  p.filesystem.workspace = ws;
  p.filesystem.mode = policy::WorkspaceMode::Rw;
  return p;
}

// As root the sandbox runs as the workspace's owner: give workspace and home to one user, as a
// user's own project in their own home would be.
void own(const TempDir& ws, const TempDir& home) {
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(ws.path().c_str(), 4242, 4242), 0);
    ASSERT_EQ(::chown(home.path().c_str(), 4242, 4242), 0);
  }
}

const MountOp* mount_of(const LaunchPlan& plan, const std::string& target) {
  for (const auto& m : plan.mounts) {
    if (m.target == target) return &m;
  }
  return nullptr;
}

TEST(AgentPlan, BindsTheTreeCreatesMissingStateAndWritesEtcDefaults) {
  NpmPrefix npm;
  TempDir ws, home;
  own(ws, home);
  fs::create_directories(home / ".codex");  // exists: an ordinary grant
  auto plan = build_plan(agent_policy("opencode", ws.path(), home.path()), {"agent"},
                         facts(ws.path(), home.path(), "/usr/bin:" + npm.bin()));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  for (const auto& dir : {npm.bin(), npm.pkg()}) {
    const MountOp* m = mount_of(*plan, dir);
    ASSERT_NE(m, nullptr) << dir;
    EXPECT_EQ(m->kind, MountKind::BindRo);
  }
  // opencode's state directories are missing: created, then granted read-write through a
  // cordon-fs view (the default rules, **/.env and the like, reach beneath any directory).
  // Beside them the protected ~/.cache/opencode/bin, which opencode makes at start and cannot
  // make inside the view: created empty, with the state, never granted.
  EXPECT_THAT(plan->create_dirs,
              UnorderedElementsAre(home / ".config/opencode", home / ".local/share/opencode",
                                   home / ".local/state/opencode", home / ".cache/opencode",
                                   home / ".cache/opencode/bin"));
  for (const auto& dir : plan->create_dirs) {
    const MountOp* m = mount_of(*plan, dir);
    if (dir == home / ".cache/opencode/bin") {
      EXPECT_EQ(m, nullptr) << dir;
      continue;
    }
    ASSERT_NE(m, nullptr) << dir;
    EXPECT_EQ(m->kind, MountKind::FsView) << dir;
  }
  EXPECT_THAT(plan->unshown_state, IsEmpty());
  EXPECT_FALSE(fs::exists(home / ".cache/opencode"));  // planning creates nothing
  ASSERT_TRUE(create_agent_state_from_parent(*plan).ok());
  for (const auto& dir : plan->create_dirs) {
    struct stat st {};
    ASSERT_EQ(::lstat(dir.c_str(), &st), 0) << dir;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_EQ(st.st_uid, plan->ids.uid);
  }

  auto codex = build_plan(agent_policy("codex", ws.path(), home.path()), {"agent"},
                          facts(ws.path(), home.path(), npm.bin()));
  ASSERT_TRUE(codex.ok()) << codex.error().to_string();
  EXPECT_THAT(codex->create_dirs, IsEmpty());
  ASSERT_NE(mount_of(*codex, home / ".codex"), nullptr);
  if (!fs::exists("/etc/codex/config.toml")) {
    bool found = false;
    for (const auto& f : codex->etc_files) {
      if (f.path == "codex/config.toml") {
        found = f.content.find("[analytics]\nenabled = false") != std::string::npos;
      }
    }
    EXPECT_TRUE(found);
  }
}

// Without cordon-fs views the rules inside a state directory (its settings and hooks, **/.env)
// could not hold: such a directory is neither created nor shown, rather than shown writable.
TEST(AgentPlan, StateWithProtectedFilesIsNotShownWithoutCordonFs) {
  TempDir ws, home;
  own(ws, home);
  fs::create_directories(home / ".config/opencode");
  HostFacts h = facts(ws.path(), home.path(), "/usr/bin");
  h.fs_views = false;
  policy::Policy p = agent_policy("opencode", ws.path(), home.path());
  p.filesystem.mode = policy::WorkspaceMode::Cow;  // rw with rules inside would need a view too
  auto plan = build_plan(p, {"true"}, h);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_THAT(plan->unshown_state,
              UnorderedElementsAre(home / ".config/opencode", home / ".local/share/opencode",
                                   home / ".local/state/opencode", home / ".cache/opencode"));
  for (const auto& dir : plan->unshown_state) {
    EXPECT_EQ(mount_of(*plan, dir), nullptr) << dir;
  }
  EXPECT_THAT(plan->create_dirs, IsEmpty());
  // A state directory the rules do not reach into is shown as before: lifting every rule.
  p.filesystem.deny.clear();
  p.filesystem.deny_write.clear();
  p.filesystem.protect.clear();
  plan = build_plan(p, {"true"}, h);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_THAT(plan->unshown_state, IsEmpty());
  const MountOp* kept = mount_of(*plan, home / ".config/opencode");
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->kind, MountKind::BindRw);
}

// opencode exits when it cannot make ~/.cache/opencode/bin, which the preset protects (tools it
// downloads there run later on the host): in an existing cache directory too, cordon makes it.
TEST(AgentPlan, AProtectedDirectoryTheAgentNeedsIsCreatedEmpty) {
  TempDir ws, home;
  own(ws, home);
  fs::create_directories(home / ".cache/opencode");
  auto plan = build_plan(agent_policy("opencode", ws.path(), home.path()), {"true"},
                         facts(ws.path(), home.path(), "/usr/bin"));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_THAT(plan->create_dirs, ::testing::Contains(home / ".cache/opencode/bin"));
  EXPECT_THAT(plan->create_dirs, ::testing::Not(::testing::Contains(home / ".cache/opencode")));
  ASSERT_TRUE(create_agent_state_from_parent(*plan).ok());
  EXPECT_TRUE(fs::is_directory(home / ".cache/opencode/bin"));
  EXPECT_TRUE(fs::is_empty(home / ".cache/opencode/bin"));
  // Still protected: the rule is there for the view of ~/.cache/opencode.
  policy::Policy p = agent_policy("opencode", ws.path(), home.path());
  bool protected_dir = false;
  for (const auto& d : p.filesystem.deny_write) {
    protected_dir = protected_dir || d.expanded == home / ".cache/opencode/bin";
  }
  EXPECT_TRUE(protected_dir);
  // Present already: left as it is.
  plan = build_plan(agent_policy("opencode", ws.path(), home.path()), {"true"},
                    facts(ws.path(), home.path(), "/usr/bin"));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_THAT(plan->create_dirs, ::testing::Not(::testing::Contains(home / ".cache/opencode/bin")));
}

TEST(AgentPlan, StateIsCreatedOnlyInTheSandboxUsersOwnHome) {
  CORDON_REQUIRE_ROOT();
  TempDir ws, home;
  // As root in a workspace owned by 4242, the sandbox runs as 4242; a home owned by root is not
  // that user's: nothing is created there (the agent keeps its state in the throwaway home).
  ASSERT_EQ(::chown(ws.path().c_str(), 4242, 4242), 0);
  auto plan = build_plan(agent_policy("claude-code", ws.path(), home.path()), {"true"},
                         facts(ws.path(), home.path(), "/usr/bin"));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_EQ(plan->ids.uid, 4242u);
  EXPECT_THAT(plan->create_dirs, IsEmpty());
  // The user's own home: created, owned by that user.
  ASSERT_EQ(::chown(home.path().c_str(), 4242, 4242), 0);
  plan = build_plan(agent_policy("claude-code", ws.path(), home.path()), {"true"},
                    facts(ws.path(), home.path(), "/usr/bin"));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_THAT(plan->create_dirs, ElementsAre(home / ".claude"));
  ASSERT_TRUE(create_agent_state_from_parent(*plan).ok());
  struct stat st {};
  ASSERT_EQ(::stat((home / ".claude").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4242u);
  EXPECT_EQ(st.st_gid, 4242u);
}

TEST(AgentPlan, AStateDirectoryIsNeverCreatedThroughASymlink) {
  TempDir ws, home, elsewhere;
  own(ws, home);
  auto plan = build_plan(agent_policy("opencode", ws.path(), home.path()), {"true"},
                         facts(ws.path(), home.path(), "/usr/bin"));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  ASSERT_FALSE(plan->create_dirs.empty());
  // Between plan and apply, ~/.cache becomes a symlink to a directory elsewhere (as the agent's
  // own earlier run, or anyone who can write the home, could arrange).
  fs::create_symlink(elsewhere.path(), home / ".cache");
  auto s = create_agent_state_from_parent(*plan);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().to_string(), ::testing::HasSubstr("O_NOFOLLOW"));
  EXPECT_FALSE(fs::exists(elsewhere / "opencode"));
}

}  // namespace
}  // namespace cordon::launcher
