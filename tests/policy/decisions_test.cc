// Decisions: deny wins, first allow names the rule, special addresses need explicit naming,
// file access order, environment globs.
#include <gtest/gtest.h>

#include "policy/loader.h"
#include "policy/policy.h"

namespace cordon::policy {
namespace {

Policy load(std::string_view text) {
  LoadOptions o;
  o.home = "/home/alice";
  return parse_policy(text, o);
}

IpAddress ip(std::string_view s) { return IpAddress::parse(s).value(); }

TEST(DecideName, DenyWinsThenFirstAllowThenNoMatch) {
  Policy p = load(R"({"network": {
      "allow": ["api.example.com:443", "*.example.com", "*.pypi.org:443"],
      "deny": ["evil.example.com", "*.bad.example.com:443"]}})");
  const NetworkPolicy& n = p.network;
  EXPECT_EQ(n.decide_name("api.example.com", 443), (Decision{true, "network.allow[0]"}));
  EXPECT_EQ(n.decide_name("API.EXAMPLE.COM.", 443), (Decision{true, "network.allow[0]"}));
  EXPECT_EQ(n.decide_name("api.example.com", 80), (Decision{true, "network.allow[1]"}));
  EXPECT_EQ(n.decide_name("evil.example.com", 443), (Decision{false, "network.deny[0]"}));
  EXPECT_EQ(n.decide_name("x.bad.example.com", 443), (Decision{false, "network.deny[1]"}));
  EXPECT_EQ(n.decide_name("x.bad.example.com", 80), (Decision{true, "network.allow[1]"}));
  EXPECT_EQ(n.decide_name("example.com", 443), (Decision{false, "network.allow (no match)"}));
  EXPECT_EQ(n.decide_name("files.pypi.org", 80), (Decision{false, "network.allow (no match)"}));
  EXPECT_FALSE(n.decide_name("", 443).allow);
  EXPECT_FALSE(n.decide_name("a b.example.com", 443).allow);
  EXPECT_FALSE(n.decide_name(std::string_view("x.example.com\0.evil", 19), 443).allow);
}

TEST(DecideName, IpLiteralsGoThroughDecideIp) {
  Policy p = load(R"({"network": {"allow": ["*", "203.0.113.0/24:443"]}})");
  // "*" names every host name, but never a raw address.
  EXPECT_TRUE(p.network.decide_name("anything.test", 1).allow);
  EXPECT_EQ(p.network.decide_name("198.51.100.7", 443),
            (Decision{false, "network.allow (no match)"}));
  EXPECT_EQ(p.network.decide_name("203.0.113.9", 443), (Decision{true, "network.allow[1]"}));
  EXPECT_FALSE(p.network.decide_name("203.0.113.9", 80).allow);
  EXPECT_EQ(p.network.decide_name("::ffff:203.0.113.9", 443), (Decision{true, "network.allow[1]"}));
  EXPECT_FALSE(p.network.decide_name("127.0.0.1", 443).allow);
}

TEST(DecideIp, SpecialAddressesNeedAPatternThatNamesThem) {
  Policy p = load(R"({"network": {"allow": ["0.0.0.0/0", "::/0"]}})");
  const NetworkPolicy& n = p.network;
  EXPECT_EQ(n.decide_ip(ip("198.51.100.7"), 443), (Decision{true, "network.allow[0]"}));
  EXPECT_EQ(n.decide_ip(ip("2001:db8::1"), 443), (Decision{true, "network.allow[1]"}));
  for (const char* s :
       {"127.0.0.1", "10.0.0.1", "192.168.1.1", "172.16.0.1", "100.64.0.1", "169.254.169.254",
        "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "fe80::1", "fd00:ec2::254",
        "::ffff:127.0.0.1", "64:ff9b::a00:1", "168.63.129.16", "100.100.100.200"}) {
    Decision d = n.decide_ip(ip(s), 443);
    EXPECT_FALSE(d.allow) << s;
    EXPECT_NE(d.rule.find("private/loopback/metadata"), std::string::npos) << s << " " << d.rule;
  }
}

TEST(DecideIp, ExplicitSpecialPatternsAllow) {
  Policy p = load(R"({"network": {"allow": ["127.0.0.1:8080", "10.0.0.0/8", "[::1]:9000",
      "169.254.169.254:80", "169.254.0.0/16", "168.63.129.16"]}})");
  const NetworkPolicy& n = p.network;
  EXPECT_EQ(n.decide_ip(ip("127.0.0.1"), 8080), (Decision{true, "network.allow[0]"}));
  EXPECT_FALSE(n.decide_ip(ip("127.0.0.1"), 8081).allow);
  EXPECT_FALSE(n.decide_ip(ip("127.0.0.2"), 8080).allow);
  EXPECT_EQ(n.decide_ip(ip("10.9.8.7"), 1), (Decision{true, "network.allow[1]"}));
  EXPECT_EQ(n.decide_ip(ip("::1"), 9000), (Decision{true, "network.allow[2]"}));
  EXPECT_EQ(n.decide_ip(ip("169.254.169.254"), 80), (Decision{true, "network.allow[3]"}));
  // The link-local range names link-local hosts, but metadata needs its exact address.
  EXPECT_EQ(n.decide_ip(ip("169.254.1.1"), 80), (Decision{true, "network.allow[4]"}));
  EXPECT_FALSE(n.decide_ip(ip("169.254.169.254"), 443).allow);
  EXPECT_FALSE(n.decide_ip(ip("169.254.170.2"), 80).allow);
  EXPECT_TRUE(n.decide_ip(ip("168.63.129.16"), 80).allow);
  // A public address is not allowed by special patterns.
  EXPECT_EQ(n.decide_ip(ip("198.51.100.1"), 80), (Decision{false, "network.allow (no match)"}));
}

TEST(DecideIp, DenyWinsOverAllowAndAnyNameDenyCoversAddresses) {
  Policy p = load(R"({"network": {"allow": ["10.0.0.0/8", "0.0.0.0/0"],
                                  "deny": ["10.1.0.0/16", "203.0.113.0/24:25"]}})");
  EXPECT_EQ(p.network.decide_ip(ip("10.1.2.3"), 80), (Decision{false, "network.deny[0]"}));
  EXPECT_EQ(p.network.decide_ip(ip("::ffff:10.1.2.3"), 80), (Decision{false, "network.deny[0]"}));
  EXPECT_TRUE(p.network.decide_ip(ip("10.2.0.1"), 80).allow);
  EXPECT_EQ(p.network.decide_ip(ip("203.0.113.5"), 25), (Decision{false, "network.deny[1]"}));
  EXPECT_TRUE(p.network.decide_ip(ip("203.0.113.5"), 26).allow);
  Policy q = load(R"({"network": {"allow": ["0.0.0.0/0", "*"], "deny": ["*"]}})");
  EXPECT_EQ(q.network.decide_ip(ip("198.51.100.1"), 80), (Decision{false, "network.deny[0]"}));
  EXPECT_EQ(q.network.decide_name("x.test", 80), (Decision{false, "network.deny[0]"}));
}

TEST(DecideIp, EmptyAllowRefusesEverything) {
  NetworkPolicy n;
  EXPECT_EQ(n.decide_ip(ip("198.51.100.1"), 443), (Decision{false, "network.allow (no match)"}));
  EXPECT_EQ(n.decide_name("example.com", 443), (Decision{false, "network.allow (no match)"}));
}

TEST(DecideRead, DenyWinsWorkspaceReadableHostPathsNeedGrant) {
  Policy p = load(R"({"filesystem": {"read": ["/data", "~/.gitconfig"], "write": ["/scratch"],
      "deny": ["**/.env", "/data/private", "secrets/**"]}})");
  const FilesystemPolicy& f = p.filesystem;
  EXPECT_EQ(f.decide_read("src/main.c"), (Decision{true, "filesystem.workspace"}));
  EXPECT_EQ(f.decide_read(".env"), (Decision{false, "filesystem.deny[0]"}));
  EXPECT_EQ(f.decide_read("app/.env"), (Decision{false, "filesystem.deny[0]"}));
  EXPECT_EQ(f.decide_read("secrets"), (Decision{false, "filesystem.deny[2]"}));
  EXPECT_EQ(f.decide_read("secrets/a/b"), (Decision{false, "filesystem.deny[2]"}));
  EXPECT_EQ(f.decide_read("/data/x.csv"), (Decision{true, "filesystem.read[0]"}));
  EXPECT_EQ(f.decide_read("/data/private/k"), (Decision{false, "filesystem.deny[1]"}));
  // "**/" deny patterns reach into granted host paths too.
  EXPECT_EQ(f.decide_read("/data/app/.env"), (Decision{false, "filesystem.deny[0]"}));
  EXPECT_EQ(f.decide_read("/home/alice/.gitconfig"), (Decision{true, "filesystem.read[1]"}));
  EXPECT_EQ(f.decide_read("/scratch/t"), (Decision{true, "filesystem.write[0]"}));
  EXPECT_EQ(f.decide_read("/etc/shadow"), (Decision{false, "filesystem.read (no match)"}));
  EXPECT_EQ(f.decide_read("/home/alice/notes"), (Decision{false, "filesystem.read (no match)"}));
}

TEST(DecideWrite, OrderIsDenyDenyWriteProtectModeAllow) {
  Policy p = load(R"({"filesystem": {"mode": "cow", "write": ["/scratch"], "read": ["/data"],
      "deny": ["**/*.pem"], "deny_write": ["vendor/**", "/scratch/keep"],
      "protect": [".git/hooks/**", "**/.envrc"]}})");
  const FilesystemPolicy& f = p.filesystem;
  EXPECT_EQ(f.decide_write("src/a.c"), (Decision{true, "filesystem.mode (cow)"}));
  EXPECT_EQ(f.decide_write("k.pem"), (Decision{false, "filesystem.deny[0]"}));
  EXPECT_EQ(f.decide_write("vendor/x/y.go"), (Decision{false, "filesystem.deny_write[0]"}));
  EXPECT_EQ(f.decide_write(".git/hooks/pre-commit"), (Decision{false, "filesystem.protect[0]"}));
  EXPECT_EQ(f.decide_write("sub/.envrc"), (Decision{false, "filesystem.protect[1]"}));
  EXPECT_EQ(f.decide_write("/scratch/out"), (Decision{true, "filesystem.write[0]"}));
  EXPECT_EQ(f.decide_write("/scratch/keep/x"), (Decision{false, "filesystem.deny_write[1]"}));
  EXPECT_EQ(f.decide_write("/scratch/a.pem"), (Decision{false, "filesystem.deny[0]"}));
  EXPECT_EQ(f.decide_write("/data/x"), (Decision{false, "filesystem.write (no match)"}));
  // deny_write leaves reads alone.
  EXPECT_TRUE(f.decide_read("vendor/x/y.go").allow);

  Policy ro = load(R"({"filesystem": {"mode": "ro", "write": ["/scratch"]}})");
  EXPECT_EQ(ro.filesystem.decide_write("src/a.c"), (Decision{false, "filesystem.mode (ro)"}));
  EXPECT_EQ(ro.filesystem.decide_write("/scratch/x"), (Decision{true, "filesystem.write[0]"}));
  EXPECT_TRUE(ro.filesystem.decide_read("src/a.c").allow);
  Policy rw = load(R"({"filesystem": {"mode": "rw"}})");
  EXPECT_EQ(rw.filesystem.decide_write("src/a.c"), (Decision{true, "filesystem.mode (rw)"}));
  // The default protect list applies when the file does not mention protect.
  EXPECT_FALSE(rw.filesystem.decide_write(".git/hooks/post-checkout").allow);
  Policy lifted = load(R"({"filesystem": {"protect": []}})");
  EXPECT_TRUE(lifted.filesystem.decide_write(".git/hooks/post-checkout").allow);
}

// A relative protect pattern is anchored at the root of the write grant holding a host path, as
// it is at the workspace root for workspace paths: a grant of ~/.claude is the agent's state
// (its own files writable), while every default rule holds at any depth beneath it.
TEST(DecideWrite, ProtectPatternsAreAnchoredAtTheGrantHoldingTheHostPath) {
  Policy p = load(R"({"filesystem": {"write": ["~/.claude", "/srv/other"]}})");
  const FilesystemPolicy& f = p.filesystem;
  const Decision claude{true, "filesystem.write[0]"};
  EXPECT_EQ(f.decide_write("/home/alice/.claude"), claude);
  EXPECT_EQ(f.decide_write("/home/alice/.claude/settings.json"), claude);
  EXPECT_EQ(f.decide_write("/home/alice/.claude/projects/p/notes.jsonl"), claude);
  EXPECT_EQ(f.decide_write("~/.claude/settings.json"), claude);  // as typed in a query
  auto rule = [&](std::string_view text) {
    for (size_t i = 0; i < f.protect.size(); ++i) {
      if (f.protect[i].text == text) {
        return Decision{false, "filesystem.protect[" + std::to_string(i) + "]"};
      }
    }
    return Decision{true, "no such default rule"};
  };
  EXPECT_EQ(f.decide_write("/home/alice/.claude/repo/.git/hooks/pre-commit"),
            rule("**/.git/hooks/**"));
  EXPECT_EQ(f.decide_write("/home/alice/.claude/x/.claude/settings.json"), rule("**/.claude/**"));
  EXPECT_EQ(f.decide_write("~/.claude/x/.claude/hooks"), rule("**/.claude/**"));
  EXPECT_EQ(f.decide_write("/home/alice/.claude/.bashrc"), rule("**/.bashrc"));
  EXPECT_EQ(f.decide_write("/srv/other/.claude/settings.json"), rule("**/.claude/**"));
  EXPECT_EQ(f.decide_write("/srv/other/.github/workflows/ci.yml"), rule("**/.github/**"));
  EXPECT_EQ(f.decide_write("/srv/other/src/a.c"), (Decision{true, "filesystem.write[1]"}));
  // A name that only starts like the grant is not held by it: matched from "/".
  EXPECT_EQ(f.decide_write("/home/alice/.claude2/.claude/x"), rule("**/.claude/**"));
  // A path no grant holds is matched from "/", like a deny rule.
  EXPECT_EQ(f.decide_write("/opt/x/.claude/settings.json"), rule("**/.claude/**"));
  // A grant of the home shows ".claude/settings.json": protected; nested grants fail closed.
  Policy home = load(R"({"filesystem": {"write": ["~", "~/.claude"]}})");
  EXPECT_FALSE(home.filesystem.decide_write("/home/alice/.claude/settings.json").allow);
  EXPECT_FALSE(home.filesystem.decide_write("/home/alice/.bashrc").allow);
  EXPECT_TRUE(home.filesystem.decide_write("/home/alice/notes.txt").allow);
  // The preset's way: deny_write keeps the state directory's own hooks and settings.
  Policy preset = load(R"({"filesystem": {"write": ["~/.claude"],
      "deny_write": ["~/.claude/settings.json", "~/.claude/hooks"]}})");
  EXPECT_EQ(preset.filesystem.decide_write("/home/alice/.claude/settings.json"),
            (Decision{false, "filesystem.deny_write[0]"}));
  EXPECT_EQ(preset.filesystem.decide_write("/home/alice/.claude/hooks/evil.sh"),
            (Decision{false, "filesystem.deny_write[1]"}));
  EXPECT_TRUE(preset.filesystem.decide_write("/home/alice/.claude/history.jsonl").allow);
  // Workspace paths are unchanged: anchored at the workspace root.
  EXPECT_EQ(f.decide_write(".claude/settings.json"), rule("**/.claude/**"));
}

TEST(EnvPolicy, DenyGlobsAreCaseInsensitive) {
  EnvPolicy e;
  for (const char* s : {"GITHUB_TOKEN", "github_token", "MY_SECRET_VALUE", "AWS_ACCESS_KEY_ID",
                        "OPENAI_API_KEY", "openai_api_key", "DB_PASSWORD", "SSH_AUTH_SOCK",
                        "GOOGLE_APPLICATION_CREDENTIALS", "X_AUTHORIZATION", "token"}) {
    EXPECT_TRUE(e.is_denied(s)) << s;
  }
  for (const char* s : {"PATH", "HOME", "LANG", "TERM", "GH", "AWS", "EDITOR"}) {
    EXPECT_FALSE(e.is_denied(s)) << s;
  }
  EnvPolicy exact;
  exact.deny = {"FOO", "A*B*C"};
  EXPECT_TRUE(exact.is_denied("foo"));
  EXPECT_FALSE(exact.is_denied("FOOD"));
  EXPECT_TRUE(exact.is_denied("AxxBxxC"));
  EXPECT_TRUE(exact.is_denied("ABC"));
  EXPECT_FALSE(exact.is_denied("ABCD"));
  EnvPolicy none;
  none.deny.clear();
  EXPECT_FALSE(none.is_denied("GITHUB_TOKEN"));
}

TEST(DecideIp, LocalhostNamesTheHostLoopbackOnItsPortsOnly) {
  Policy p = load(R"({"network": {"allow": ["localhost:11434", "api.test:443"],
                                  "resolve": {"api.test": "127.0.0.1"}}})");
  const NetworkPolicy& n = p.network;
  // Transparent connections arrive by address: 127.0.0.1 and ::1 are what localhost stands for.
  EXPECT_EQ(n.decide_ip(ip("127.0.0.1"), 11434), (Decision{true, "network.allow[0]"}));
  EXPECT_EQ(n.decide_ip(ip("::1"), 11434), (Decision{true, "network.allow[0]"}));
  EXPECT_FALSE(n.decide_ip(ip("127.0.0.1"), 22).allow);
  EXPECT_FALSE(n.decide_ip(ip("127.0.0.2"), 11434).allow);
  EXPECT_FALSE(n.decide_ip(ip("198.51.100.1"), 11434).allow);
  // By name (CONNECT, SOCKS, the proxy's DNS): the name's ports only, and the host resolving
  // it to loopback is covered by the same entry.
  EXPECT_EQ(n.decide_name("localhost", 11434), (Decision{true, "network.allow[0]"}));
  EXPECT_FALSE(n.decide_name("localhost", 22).allow);
  auto by_name = n.decide_destination("localhost", 11434);
  EXPECT_TRUE(n.check_resolved("localhost", ip("127.0.0.1"), 11434, false, by_name).allow);
  EXPECT_TRUE(n.check_resolved("localhost", ip("::1"), 11434, false, by_name).allow);
  // A deny "localhost" refuses the addresses too.
  Policy q = load(R"({"network": {"allow": ["127.0.0.1:80"], "deny": ["localhost:80"]}})");
  EXPECT_EQ(q.network.decide_ip(ip("127.0.0.1"), 80), (Decision{false, "network.deny[0]"}));
}

TEST(RulesBeneath, NamesTheRulesThatReachIntoAGrantOrTheWorkspace) {
  Policy p = load(R"({"filesystem": {"write": ["~/.claude", "~/out"],
      "deny": ["**/.env", "~/.ssh"], "deny_write": ["~/.claude/settings.json"],
      "protect": ["~/.claude/hooks/**", ".git/hooks/**"]}})");
  const FilesystemPolicy& f = p.filesystem;
  auto rules = [&](std::string_view dir, bool ws) {
    std::vector<std::string> out;
    for (const auto& r : f.rules_beneath(dir, ws)) {
      out.push_back(r.rule + "=" + r.text);
    }
    return out;
  };
  EXPECT_EQ(rules("/home/alice/.claude", false),
            (std::vector<std::string>{"filesystem.deny[0]=**/.env",
                                      "filesystem.deny_write[0]=~/.claude/settings.json",
                                      "filesystem.protect[0]=~/.claude/hooks/**"}));
  EXPECT_EQ(rules("/home/alice/out", false),
            (std::vector<std::string>{"filesystem.deny[0]=**/.env"}));
  // The workspace: relative rules apply there, and absolute ones that reach into it.
  EXPECT_EQ(rules("/srv/proj", true),
            (std::vector<std::string>{"filesystem.deny[0]=**/.env",
                                      "filesystem.protect[1]=.git/hooks/**"}));
  EXPECT_EQ(rules("/home/alice", true).size(), 5u);  // ~/.ssh and the ~/.claude rules too
  Policy none = load(R"({"filesystem": {"deny": [], "protect": [], "write": ["/x"]}})");
  EXPECT_TRUE(none.filesystem.rules_beneath("/x", false).empty());
  EXPECT_TRUE(none.filesystem.rules_beneath("/srv/proj", true).empty());
}

TEST(DecideWrite, AbsoluteRulesDecideWorkspacePathsByTheirHostPath) {
  Policy p = load(R"({"filesystem": {"mode": "rw", "deny": ["/srv/proj/secrets"],
                                     "deny_write": ["/srv/proj/vendor/**"], "protect": []}})");
  const FilesystemPolicy& f = p.filesystem;
  EXPECT_TRUE(f.decide_read("secrets/a").allow);  // relative alone: the rule cannot see it
  EXPECT_EQ(f.decide_read("secrets/a", "/srv/proj/secrets/a"),
            (Decision{false, "filesystem.deny[0]"}));
  EXPECT_EQ(f.decide_write("vendor/x", "/srv/proj/vendor/x"),
            (Decision{false, "filesystem.deny_write[0]"}));
  EXPECT_EQ(f.decide_write("src/x", "/srv/proj/src/x"), (Decision{true, "filesystem.mode (rw)"}));
}

}  // namespace
}  // namespace cordon::policy
