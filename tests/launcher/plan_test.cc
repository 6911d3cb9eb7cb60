// build_plan: validation before any namespace, the identity choice, the mount list's shape.
#include "launcher/plan.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "tests/support/test_env.h"

namespace cordon::launcher {
namespace {

using cordon::testing::TempDir;

HostFacts facts(const std::string& cwd, const std::string& home, uid_t uid = 1000) {
  HostFacts h;
  h.euid = uid;
  h.egid = uid;
  h.cwd = cwd;
  h.home = home;
  static char* empty_env[] = {nullptr};
  h.env = empty_env;
  return h;
}

policy::Policy rw_policy(const std::string& ws) {
  policy::Policy p;
  p.filesystem.mode = policy::WorkspaceMode::Rw;
  p.filesystem.workspace = ws;
  p.filesystem.deny.clear();
  p.filesystem.protect.clear();
  return p;
}

const MountOp* find_target(const LaunchPlan& plan, const std::string& target) {
  for (const auto& m : plan.mounts) {
    if (m.target == target) return &m;
  }
  return nullptr;
}

TEST(Plan, RootlessMapsTheInvokingUser) {
  TempDir ws, home;
  auto plan = build_plan(rw_policy(ws.path()), {"true"}, facts(ws.path(), home.path(), 1234));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_TRUE(plan->ids.rootless);
  EXPECT_EQ(plan->ids.uid, 1234u);
  EXPECT_EQ(plan->cwd, plan->workspace);
}

TEST(Plan, AsRootNeverMapsUidZero) {
  TempDir ws, home;
  HostFacts h = facts(ws.path(), home.path(), 0);
  (void)!::chown(ws.path().c_str(), 0, 0);
  auto plan = build_plan(rw_policy(ws.path()), {"true"}, h);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->ids.rootless);
  if (::geteuid() == 0) {
    EXPECT_EQ(plan->ids.uid, 65534u);  // root-owned workspace: nobody
    EXPECT_TRUE(plan->ids.nobody);
  }
  h.sudo_uid = 1500;
  h.sudo_gid = 1501;
  plan = build_plan(rw_policy(ws.path()), {"true"}, h);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->ids.uid, 1500u);
  EXPECT_EQ(plan->ids.gid, 1501u);
  EXPECT_FALSE(plan->ids.nobody);
  h.sudo_uid = 0;  // sudo from root: ignored
  h.sudo_gid = 0;
  plan = build_plan(rw_policy(ws.path()), {"true"}, h);
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->ids.uid, 0u);
}

// When the host's owners and modes keep the program out of the workspace (rw, and cow on kernel
// overlayfs), the plan carries one line saying so and naming the fix; cordon-fs's cow view makes
// the copy the agent's, so nothing is said there, nor in ro mode.
TEST(Plan, SaysWhenTheHostsModesKeepTheProgramFromWritingTheWorkspace) {
  TempDir ws, home;
  ASSERT_EQ(::chmod(ws.path().c_str(), 0755), 0);
  uid_t other = ::geteuid() + 1;  // not the workspace's owner
  policy::Policy p = rw_policy(ws.path());
  auto warning = [&](policy::WorkspaceMode mode, HostFacts h) {
    p.filesystem.mode = mode;
    auto plan = build_plan(p, {"true"}, h);
    EXPECT_TRUE(plan.ok()) << plan.error().to_string();
    return plan.ok() ? plan->write_warning : "(no plan)";
  };
  HostFacts h = facts(ws.path(), home.path(), other);
  const std::string expected = "the program runs as uid " + std::to_string(other) +
                               ", who cannot write the workspace " + ws.path() + " (owner uid " +
                               std::to_string(::geteuid()) +
                               ", mode 0755) in --mode rw; use "
                               "--mode cow (the default: the agent changes its own copy, which "
                               "cordon diff shows and cordon commit applies), or give uid " +
                               std::to_string(other) + " write access to it (chown or chmod)";
  EXPECT_EQ(warning(policy::WorkspaceMode::Rw, h), expected);
  EXPECT_EQ(warning(policy::WorkspaceMode::Ro, h), "");
  h.cow_fuse = true;
  EXPECT_EQ(warning(policy::WorkspaceMode::Cow, h), "");
  h.cow_fuse = false;
  EXPECT_NE(warning(policy::WorkspaceMode::Cow, h)
                .find("in copy-on-write on kernel overlayfs (cordon-fs is not usable here); make "
                      "cordon-fs usable"),
            std::string::npos);
  // Group and other write bits count, the group through the user's supplementary groups.
  ASSERT_EQ(::chmod(ws.path().c_str(), 0775), 0);
  EXPECT_NE(warning(policy::WorkspaceMode::Rw, h), "");
  struct stat st {};
  ASSERT_EQ(::stat(ws.path().c_str(), &st), 0);
  h.groups = {st.st_gid};
  EXPECT_EQ(warning(policy::WorkspaceMode::Rw, h), "");
  h.groups.clear();
  ASSERT_EQ(::chmod(ws.path().c_str(), 0757), 0);
  EXPECT_EQ(warning(policy::WorkspaceMode::Rw, h), "");
  // The owner may write where the owner's bit says so.
  ASSERT_EQ(::chmod(ws.path().c_str(), 0555), 0);
  HostFacts owner = facts(ws.path(), home.path(), ::geteuid());
  owner.egid = ::getegid();
  if (::geteuid() != 0) {
    EXPECT_NE(warning(policy::WorkspaceMode::Rw, owner), "");
    ASSERT_EQ(::chmod(ws.path().c_str(), 0755), 0);
    EXPECT_EQ(warning(policy::WorkspaceMode::Rw, owner), "");
    return;
  }
  // As root in a root-owned workspace: nobody, with the fixes that apply to it; with sudo, the
  // invoking user; supplementary groups do not count (the sandbox drops them).
  ASSERT_EQ(::chmod(ws.path().c_str(), 0775), 0);
  ASSERT_EQ(::chown(ws.path().c_str(), 0, 0), 0);
  owner.groups = {0};
  std::string nobody = warning(policy::WorkspaceMode::Rw, owner);
  EXPECT_EQ(nobody.rfind("the program runs as uid 65534 (nobody): as root, cordon never runs it as "
                         "host uid 0, and neither $SUDO_UID nor the workspace's owner (root) names "
                         "another user, so in --mode rw it cannot create or change what root's "
                         "modes keep from others; use --mode cow",
                         0),
            0u)
      << nobody;
  EXPECT_NE(nobody.find("run cordon as the workspace's owner or through sudo, or chown the "
                        "workspace to the user the agent should act as"),
            std::string::npos)
      << nobody;
  owner.cow_fuse = true;
  EXPECT_EQ(warning(policy::WorkspaceMode::Cow, owner), "");
  owner.sudo_uid = 4343;
  owner.sudo_gid = 4343;
  EXPECT_NE(warning(policy::WorkspaceMode::Rw, owner)
                .find("the program runs as uid 4343, who "
                      "cannot write the workspace"),
            std::string::npos);
  EXPECT_EQ(warning(policy::WorkspaceMode::Cow, owner), "");
}

TEST(Plan, RefusesWhatCannotBeHonouredBeforeAnyNamespace) {
  TempDir ws, home;
  auto h = facts(ws.path(), home.path());
  auto p = rw_policy("/");
  auto r = build_plan(p, {"true"}, h);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("\"/\""), std::string::npos);

  p = rw_policy(home.path());
  r = build_plan(p, {"true"}, h);
  ASSERT_FALSE(r.ok()) << "rw on the whole home directory";
  p.filesystem.mode = policy::WorkspaceMode::Ro;
  EXPECT_TRUE(build_plan(p, {"true"}, h).ok());

  p = rw_policy(ws.path());
  std::string why;
  p.network.allow.push_back(*policy::HostPattern::parse("example.com:443", &why));
  r = build_plan(p, {"true"}, h);
  // network.allow is enforced through cordon-netproxy: capture on, the explicit proxy announced,
  // DNS pointed anywhere (port 53 is redirected to the proxy).
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(r->network);
  EXPECT_TRUE(r->proxy_env);
  EXPECT_NE(std::find(r->envp.begin(), r->envp.end(), "HTTPS_PROXY=http://127.0.0.1:15080"),
            r->envp.end());
  EXPECT_NE(std::find(r->envp.begin(), r->envp.end(), "no_proxy=localhost,127.0.0.1,::1"),
            r->envp.end());
  for (const auto& f : r->etc_files) {
    if (f.path == "resolv.conf") {
      EXPECT_EQ(f.content, "nameserver 198.51.100.53\noptions timeout:2 attempts:1\n");
    }
  }
  p.network.proxy_env = false;
  r = build_plan(p, {"true"}, h);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->network);
  EXPECT_FALSE(r->proxy_env);
  for (const auto& kv : r->envp) {
    EXPECT_EQ(kv.find("PROXY="), std::string::npos) << kv;
  }

  r = build_plan(rw_policy(ws.path() + "/missing"), {"true"}, h);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(ws.path() + "/missing"), std::string::npos);
  EXPECT_EQ(r.error().code, ENOENT);

  r = build_plan(rw_policy(ws.path()), {}, h);
  EXPECT_FALSE(r.ok());
}

TEST(Plan, MountListComposesTheRoot) {
  TempDir ws, home;
  auto plan = build_plan(rw_policy(ws.path()), {"true"}, facts(ws.path(), home.path()));
  ASSERT_TRUE(plan.ok());
  const MountOp* usr = find_target(*plan, "/usr");
  ASSERT_NE(usr, nullptr);
  EXPECT_EQ(usr->kind, MountKind::BindRo);
  ASSERT_NE(find_target(*plan, "/etc"), nullptr);
  EXPECT_EQ(find_target(*plan, "/etc")->kind, MountKind::EtcOverlay);
  ASSERT_NE(find_target(*plan, "/proc"), nullptr);
  const MountOp* tmp = find_target(*plan, "/tmp");
  ASSERT_NE(tmp, nullptr);
  EXPECT_NE(tmp->flags & MS_NOEXEC, 0u);
  const MountOp* h = find_target(*plan, home.path());
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->kind, MountKind::Tmpfs);
  const MountOp* w = find_target(*plan, plan->workspace);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->kind, MountKind::BindRw);
  EXPECT_EQ(w->source, plan->workspace);  // same absolute path inside as on the host
  // Parents before children: /tmp, then whatever lives beneath it.
  auto pos = [&](const MountOp* m) { return m - plan->mounts.data(); };
  EXPECT_LT(pos(tmp), pos(w));
  EXPECT_LT(pos(tmp), pos(h));
  // /etc gets cordon's files over the host's.
  auto has_etc = [&](const std::string& p) {
    return std::any_of(plan->etc_files.begin(), plan->etc_files.end(),
                       [&](const EtcFile& f) { return f.path == p; });
  };
  EXPECT_TRUE(has_etc("hosts"));
  EXPECT_TRUE(has_etc("resolv.conf"));
  EXPECT_TRUE(has_etc("ld.so.preload"));
  if (::access("/etc/shadow", F_OK) == 0) {
    EXPECT_TRUE(has_etc("shadow"));
  }
}

TEST(Plan, DenyGlobsExpandInTheWorkspace) {
  TempDir ws, home;
  ::mkdir((ws.path() + "/a").c_str(), 0755);
  {
    FILE* f = std::fopen((ws.path() + "/a/.env").c_str(), "w");
    std::fclose(f);
  }
  {
    FILE* f = std::fopen((ws.path() + "/a/keep.txt").c_str(), "w");
    std::fclose(f);
  }
  auto p = rw_policy(ws.path());
  p.filesystem.mode = policy::WorkspaceMode::Ro;  // nothing can be created: masks at start hold
  std::string why;
  p.filesystem.deny.push_back(*policy::PathPattern::parse("**/.env", home.path(), &why));
  auto plan = build_plan(p, {"true"}, facts(ws.path(), home.path()));
  ASSERT_TRUE(plan.ok());
  const MountOp* m = find_target(*plan, plan->workspace + "/a/.env");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->kind, MountKind::MaskFile);
  EXPECT_EQ(find_target(*plan, plan->workspace + "/a/keep.txt"), nullptr);
}

TEST(Plan, CowModeOverlaysTheWorkspaceWithDenyAndProtectOnTop) {
  TempDir ws, home;
  ::mkdir((ws.path() + "/.git").c_str(), 0755);
  for (const char* f : {"/.env", "/.git/config"}) {
    FILE* fp = std::fopen((ws.path() + f).c_str(), "w");
    std::fclose(fp);
  }
  auto p = rw_policy(ws.path());
  p.filesystem.mode = policy::WorkspaceMode::Cow;
  std::string why;
  p.filesystem.deny.push_back(*policy::PathPattern::parse("**/.env", home.path(), &why));
  p.filesystem.protect.push_back(*policy::PathPattern::parse(".git/config", home.path(), &why));
  auto plan = build_plan(p, {"true"}, facts(ws.path(), home.path()));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_EQ(plan->mode, policy::WorkspaceMode::Cow);
  size_t ws_at = plan->mounts.size(), env_at = 0, git_at = 0;
  for (size_t i = 0; i < plan->mounts.size(); ++i) {
    const MountOp& m = plan->mounts[i];
    if (m.target == plan->workspace) {
      EXPECT_EQ(m.kind, MountKind::CowOverlay);
      EXPECT_EQ(m.source, plan->workspace);
      ws_at = i;
    } else if (m.target == plan->workspace + "/.env") {
      EXPECT_EQ(m.kind, MountKind::MaskFile);
      env_at = i;
    } else if (m.target == plan->workspace + "/.git/config") {
      EXPECT_EQ(m.kind, MountKind::BindRo);
      git_at = i;
    }
  }
  ASSERT_LT(ws_at, plan->mounts.size());
  EXPECT_GT(env_at, ws_at) << "the mask must cover the overlay, not sit beneath it";
  EXPECT_GT(git_at, ws_at);
}

std::string plan_error(const policy::Policy& p, const HostFacts& h) {
  auto r = build_plan(p, {"true"}, h);
  return r.ok() ? std::string("planned") : r.error().to_string();
}

policy::PathPattern pat(const std::string& text, const std::string& home) {
  std::string why;
  return *policy::PathPattern::parse(text, home, &why);
}

TEST(Plan, WritableDirectoriesWithRulesInsideBecomeViewsOrTheLaunchIsRefused) {
  TempDir ws, home, grant, plain, readable;
  ::mkdir((readable.path() + "/sub").c_str(), 0755);
  std::fclose(std::fopen((readable.path() + "/sub/.env").c_str(), "w"));
  std::fclose(std::fopen((readable.path() + "/keep").c_str(), "w"));
  auto p = rw_policy(ws.path());
  p.filesystem.write = {pat(grant.path(), home.path()), pat(plain.path(), home.path())};
  p.filesystem.read = {pat(readable.path(), home.path())};
  p.filesystem.deny_write = {pat(grant.path() + "/settings.json", home.path())};
  p.filesystem.deny = {pat(readable.path() + "/**/.env", home.path())};
  HostFacts h = facts(ws.path(), home.path());
  h.fs_views = true;
  auto plan = build_plan(p, {"true"}, h);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  // The grant with a rule inside: a view; the one without: a plain bind; the workspace (no
  // rule reaches it) a plain bind too.
  ASSERT_NE(find_target(*plan, grant.path()), nullptr);
  EXPECT_EQ(find_target(*plan, grant.path())->kind, MountKind::FsView);
  ASSERT_EQ(plan->views.size(), 1u);
  EXPECT_EQ(plan->views[0].dir, grant.path());
  EXPECT_FALSE(plan->views[0].workspace);
  ASSERT_EQ(plan->views[0].rules.size(), 1u);
  EXPECT_EQ(plan->views[0].rules[0].rule, "filesystem.deny_write[0]");
  EXPECT_EQ(find_target(*plan, plain.path())->kind, MountKind::BindRw);
  EXPECT_EQ(find_target(*plan, plan->workspace)->kind, MountKind::BindRw);
  // A read-only grant: its denied files are masked at start.
  EXPECT_EQ(find_target(*plan, readable.path())->kind, MountKind::BindRo);
  ASSERT_NE(find_target(*plan, readable.path() + "/sub/.env"), nullptr);
  EXPECT_EQ(find_target(*plan, readable.path() + "/sub/.env")->kind, MountKind::MaskFile);
  EXPECT_EQ(find_target(*plan, readable.path() + "/keep"), nullptr);

  // A rule reaching the workspace in rw mode: the workspace is a view as well.
  auto q = p;
  q.filesystem.protect = {pat(".git/hooks/**", home.path())};
  plan = build_plan(q, {"true"}, h);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_EQ(find_target(*plan, plan->workspace)->kind, MountKind::FsView);
  ASSERT_EQ(plan->views.size(), 2u);

  // Where cordon-fs cannot run: refused, naming the grant, the rule and the fixes.
  h.fs_views = false;
  h.no_fs_views_reason = "/dev/fuse is not readable and writable by uid 1000";
  std::string e = plan_error(p, h);
  EXPECT_NE(e.find("filesystem.write[0] \"" + grant.path() + "\": filesystem.deny_write[0] (\"" +
                   grant.path() + "/settings.json\") must hold inside it"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("/dev/fuse is not readable"), std::string::npos) << e;
  EXPECT_NE(e.find("--read"), std::string::npos) << e;
  e = plan_error(q, h);
  EXPECT_NE(e.find("--mode cow"), std::string::npos) << e;

  // A rule covering a whole write grant makes it read-only; a denied one is not shown.
  auto r = p;
  r.filesystem.deny_write = {pat(grant.path(), home.path())};
  r.filesystem.deny.push_back(pat(plain.path(), home.path()));
  plan = build_plan(r, {"true"}, h);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_EQ(find_target(*plan, grant.path())->kind, MountKind::BindRo);
  EXPECT_EQ(find_target(*plan, plain.path()), nullptr);
}

TEST(Plan, HostLoopbackServicesAreCapturedPortByPort) {
  TempDir ws, home;
  auto p = rw_policy(ws.path());
  std::string why;
  for (const char* a : {"localhost:11434", "127.0.0.1:8000-8100", "api.test:443"}) {
    p.network.allow.push_back(*policy::HostPattern::parse(a, &why));
  }
  auto plan = build_plan(p, {"true"}, facts(ws.path(), home.path()));
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  ASSERT_EQ(plan->loopback_services.size(), 3u);  // localhost is 127.0.0.1 and ::1
  EXPECT_EQ(plan->loopback_services[0].net.addr.to_string(), "127.0.0.1");
  EXPECT_EQ(plan->loopback_services[1].net.addr.to_string(), "::1");
  EXPECT_EQ(plan->loopback_services[0].port_lo, 11434);
  EXPECT_EQ(plan->loopback_services[2].port_lo, 8000);
  EXPECT_EQ(plan->loopback_services[2].port_hi, 8100);
  p.network.allow.push_back(*policy::HostPattern::parse("localhost:15080", &why));
  EXPECT_NE(plan_error(p, facts(ws.path(), home.path())).find("includes port 15080"),
            std::string::npos);
}

}  // namespace
}  // namespace cordon::launcher
