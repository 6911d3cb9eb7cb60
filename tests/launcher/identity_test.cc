// "~" is the home of the user the sandbox runs as: under sudo, as root in another user's
// workspace, as root running the sandbox as nobody, and rootless. The secrets of every home in
// play are denied, $HOME inside matches the uid, and the attack from issue 14 (sudo cordon run
// in the user's home printing their .aws/credentials and .netrc) fails.
#include "launcher/identity.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/effective_policy.h"
#include "tests/launcher/sandbox_fixture.h"

namespace cordon::launcher {
namespace {

using cordon::testing::TempDir;

HostFacts root_facts(const std::string& cwd) {
  HostFacts h;
  h.euid = 0;
  h.egid = 0;
  h.cwd = cwd;
  h.home = "/root";
  static char* empty_env[] = {nullptr};
  h.env = empty_env;
  h.user_of = [](uid_t uid) -> std::optional<HostFacts::UserEntry> {
    switch (uid) {
      case 0:
        return HostFacts::UserEntry{"root", "/root"};
      case 1000:
        return HostFacts::UserEntry{"alice", "/home/alice"};
      case 1001:
        return HostFacts::UserEntry{"bob", "/home/bob"};
      case 65534:
        return HostFacts::UserEntry{"nobody", "/nonexistent"};
      default:
        return std::nullopt;
    }
  };
  return h;
}

struct stat owned_by(uid_t uid) {
  struct stat st {};
  st.st_uid = uid;
  st.st_gid = uid;
  return st;
}

TEST(Identity, TildeIsTheHomeOfTheUserTheSandboxRunsAs) {
  HostFacts h = root_facts("/srv");
  // sudo: the invoking user, whose home "~" is, not root's; root's $HOME is denied too.
  h.sudo_uid = 1000;
  h.sudo_gid = 1000;
  EXPECT_EQ(invoking_home(h), "/home/alice");
  Identity id = choose_identity(h, owned_by(0));
  EXPECT_EQ(id.ids.uid, 1000u);
  EXPECT_EQ(id.home, "/home/alice");
  EXPECT_EQ(id.user, "alice");
  EXPECT_EQ(id.other_homes, (std::vector<std::string>{"/root"}));

  // Root without sudo in bob's workspace: bob's home; root's is the invoking one.
  h.sudo_uid.reset();
  h.sudo_gid.reset();
  EXPECT_EQ(invoking_home(h), "/root");
  id = choose_identity(h, owned_by(1001));
  EXPECT_EQ(id.ids.uid, 1001u);
  EXPECT_EQ(id.home, "/home/bob");
  EXPECT_EQ(id.user, "bob");
  EXPECT_EQ(id.other_homes, (std::vector<std::string>{"/root"}));

  // Root in a root-owned workspace: nobody, with nobody's home.
  id = choose_identity(h, owned_by(0));
  EXPECT_TRUE(id.ids.nobody);
  EXPECT_EQ(id.home, "/nonexistent");
  EXPECT_EQ(id.other_homes, (std::vector<std::string>{"/root"}));

  // A uid the user database does not know: the invoking user's home stands in.
  id = choose_identity(h, owned_by(4242));
  EXPECT_EQ(id.ids.uid, 4242u);
  EXPECT_EQ(id.home, "/root");
  EXPECT_EQ(id.user, "");
  EXPECT_TRUE(id.other_homes.empty());

  // Rootless: the invoking user and their own $HOME, which wins over the database on purpose.
  HostFacts u = root_facts("/srv");
  u.euid = 1000;
  u.egid = 1000;
  u.home = "/data/alice-home";
  id = choose_identity(u, owned_by(1000));
  EXPECT_TRUE(id.ids.rootless);
  EXPECT_EQ(id.home, "/data/alice-home");
  EXPECT_EQ(id.user, "alice");
  EXPECT_TRUE(id.other_homes.empty());
}

TEST(Identity, ThePolicyIsReadWithTheSandboxUsersHomeAndEveryHomesSecretsDenied) {
  TempDir ws, alice, rootdir;
  HostFacts h = root_facts(ws.path());
  h.home = rootdir.path();
  h.sudo_uid = 1000;
  h.sudo_gid = 1000;
  h.user_of = [&](uid_t uid) -> std::optional<HostFacts::UserEntry> {
    if (uid == 1000) return HostFacts::UserEntry{"alice", alice.path()};
    return std::nullopt;
  };
  RunOptions o;
  o.write = {"~/.claude"};
  o.workspace = ws.path();
  policy::Policy p = load_effective_policy(o, h);
  ASSERT_EQ(p.filesystem.write.size(), 1u);
  EXPECT_EQ(p.filesystem.write[0].expanded, alice.path() + "/.claude");
  auto denied = [&](const std::string& path) { return !p.filesystem.decide_read(path).allow; };
  for (const std::string& home : {alice.path(), rootdir.path()}) {
    EXPECT_TRUE(denied(home + "/.aws/credentials")) << home;
    EXPECT_TRUE(denied(home + "/.netrc")) << home;
    EXPECT_TRUE(denied(home + "/.ssh/id_rsa")) << home;
  }
  EXPECT_EQ(p.filesystem.workspace, ws.path());
}

// A throwaway user in the user database of a private mount namespace: /etc/passwd bind-mounted
// there (the host's file is untouched), so the real getpwuid of a real cordon sees it.
constexpr uid_t kVictim = 4343;

// `cordon run ARGS...` inside `unshare -m`, with a passwd naming kVictim with home `home`.
cordon::testing::RunResult run_with_victim(const std::string& scratch, const std::string& home,
                                           const std::vector<std::string>& env,
                                           const std::vector<std::string>& args) {
  std::string passwd = cordon::testing::read_text("/etc/passwd") +
                       "victim:x:" + std::to_string(kVictim) + ":" + std::to_string(kVictim) +
                       "::" + home + ":/bin/sh\n";
  cordon::testing::write_text(scratch + "/passwd", passwd);
  std::string cmd = "mount --bind '" + scratch + "/passwd' /etc/passwd && exec \"$@\"";
  std::vector<std::string> argv = {"unshare", "-m", "--propagation",
                                   "private", "sh", "-c",
                                   cmd,       "sh", cordon::testing::cordon_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return cordon::testing::run_program(argv, {.env = env, .cwd = home});
}

TEST(Identity, SudoCannotReadTheInvokingUsersSecretsFromTheirHome) {
  CORDON_REQUIRE_ROOT();
  TempDir scratch, state;
  std::string home = scratch.path() + "/home/victim";
  cordon::testing::run_program({"mkdir", "-p", home + "/.aws", home + "/.ssh", home + "/proj"});
  cordon::testing::write_text(home + "/.aws/credentials", "aws_secret_access_key=AKIA-STOLEN\n");
  cordon::testing::write_text(home + "/.netrc", "machine x login u password NETRC-STOLEN\n");
  cordon::testing::write_text(home + "/.ssh/id_rsa", "SSH-KEY-STOLEN\n");
  cordon::testing::write_text(home + "/notes.txt", "ordinary\n");
  cordon::testing::run_program(
      {"chown", "-R", std::to_string(kVictim) + ":" + std::to_string(kVictim), home});
  ::chmod(home.c_str(), 0755);
  std::vector<std::string> env = {"PATH=/usr/bin:/bin",
                                  "HOME=/root",
                                  "USER=root",
                                  "SUDO_UID=" + std::to_string(kVictim),
                                  "SUDO_GID=" + std::to_string(kVictim),
                                  "CORDON_STATE_DIR=" + state.path()};
  // The exact attack of issue 14 item 5, plus what the program sees of itself.
  auto r = run_with_victim(scratch.path(), home, env,
                           {"run", "-q", "-w", home, "--", "sh", "-c",
                            "cat .aws/credentials .netrc .ssh/id_rsa; echo; cat notes.txt; "
                            "echo \"HOME=$HOME USER=$USER uid=$(id -u)\""});
  for (const char* secret : {"AKIA-STOLEN", "NETRC-STOLEN", "SSH-KEY-STOLEN"}) {
    EXPECT_EQ(r.out.find(secret), std::string::npos) << secret << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("ordinary"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("HOME=" + home + " USER=victim uid=" + std::to_string(kVictim)),
            std::string::npos)
      << r.out << r.err;

  // "~" in a policy is the victim's too: granting ~/.config resolves there, not in /root.
  cordon::testing::run_program({"mkdir", "-p", home + "/.config"});
  cordon::testing::write_text(home + "/.config/tool.conf", "conf\n");
  cordon::testing::write_text(scratch.path() + "/p.json",
                              R"({"filesystem": {"read": ["~/.config"], "mode": "ro"}})");
  r = run_with_victim(scratch.path(), home, env,
                      {"run", "-q", "-w", home + "/proj", "--policy", scratch.path() + "/p.json",
                       "--", "cat", home + "/.config/tool.conf"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "conf\n");
}

TEST(Identity, RootsOwnHomeSecretsAreDeniedWhenTheSandboxRunsAsAnotherUser) {
  CORDON_REQUIRE_ROOT();
  TempDir scratch, state, roothome;
  std::string home = scratch.path() + "/home/victim";
  cordon::testing::run_program({"mkdir", "-p", home, roothome.path() + "/.aws"});
  cordon::testing::write_text(roothome.path() + "/.aws/credentials", "ROOT-AWS-STOLEN\n");
  cordon::testing::write_text(roothome.path() + "/readme", "visible\n");
  ::chmod(roothome.path().c_str(), 0755);
  ::chmod((roothome.path() + "/.aws").c_str(), 0755);
  ::chmod((roothome.path() + "/.aws/credentials").c_str(), 0644);
  std::vector<std::string> env = {
      "PATH=/usr/bin:/bin", "HOME=" + roothome.path(), "SUDO_UID=" + std::to_string(kVictim),
      "SUDO_GID=" + std::to_string(kVictim), "CORDON_STATE_DIR=" + state.path()};
  // Root's $HOME shown read-only to a sandbox that runs as the sudo user: "~" is the user's, so
  // only the widening of the "~" rules to root's home keeps root's keys out.
  auto r = run_with_victim(scratch.path(), home, env,
                           {"run", "-q", "--mode", "ro", "-w", roothome.path(), "--", "sh", "-c",
                            "cat readme; cat .aws/credentials"});
  EXPECT_NE(r.out.find("visible"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("ROOT-AWS-STOLEN"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cordon::launcher
