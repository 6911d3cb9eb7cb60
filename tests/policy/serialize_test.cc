// to_json round-trips through parse_policy; explain says one line per effective rule.
#include "policy/serialize.h"

#include <gtest/gtest.h>

#include "policy/loader.h"

namespace cordon::policy {
namespace {

LoadOptions opts() {
  LoadOptions o;
  o.home = "/home/alice";
  return o;
}

constexpr std::string_view kRich = R"({
  "network": {
    "allow": ["api.openai.com:443", "*.githubusercontent.com", "API.Example.COM.",
              "10.0.0.0/8", "[2001:db8::1]:443", "2001:db8::/32", "localhost:8000-8100", "*"],
    "deny": ["169.254.169.254", "evil.test"],
    "max_connections": 7, "max_connections_per_host": 3, "connections_per_minute": 99,
    "max_bytes_out": "1.5G", "max_bytes_in": 1000, "idle_timeout": "1m30s",
    "connect_timeout": "250ms",
    "resolve": {"API.Test.": "127.0.0.1", "multi.test": ["::1", "::ffff:127.0.0.2"]},
    "dns": {"types": ["A", "AAAA", "TXT"]}, "proxy_env": false
  },
  "filesystem": {
    "workspace": "~/proj", "mode": "rw", "read": ["~/.gitconfig", "/opt/data"],
    "write": ["/tmp/out"], "deny": ["**/*.pem", "~/.ssh"], "deny_write": ["vendor/**"],
    "protect": [], "deny_style": "hide", "quota": {"bytes": 0, "inodes": 12345},
    "tmp": "unlimited", "xattrs": true
  },
  "process": {
    "memory": "3M", "cpus": 0.25, "pids": 0, "nofile": 2048, "fsize": 123457,
    "timeout": "1d2h3m4s5ms", "kill_grace": "1s",
    "env": {"keep": ["PATH", "HOME"], "set": {"CI": "1", "EMPTY": ""}, "deny": ["*KEY*"]},
    "exec_allow": ["/usr/bin/*", "bin/tool"],
    "seccomp": {"allow": ["ptrace"], "deny": ["io_uring_setup", "bpf"]},
    "hostname": "sandbox.local"
  }
})";

TEST(ToJson, RoundTripsTheDefaultPolicy) {
  Policy d = default_policy(opts());
  nlohmann::json j = to_json(d);
  Policy again = parse_policy(j.dump(), opts());
  EXPECT_EQ(again, d);
  EXPECT_EQ(to_json(again), j);  // canonical: a second trip changes nothing
}

TEST(ToJson, RoundTripsARichPolicy) {
  Policy p = parse_policy(kRich, opts());
  nlohmann::json j = to_json(p);
  Policy again = parse_policy(j.dump(2), opts());
  EXPECT_EQ(again, p);
  EXPECT_EQ(to_json(again), j);
  // Spot checks of the canonical forms.
  EXPECT_EQ(j["network"]["max_bytes_out"], "1536M");
  EXPECT_EQ(j["network"]["max_bytes_in"], 1000);
  EXPECT_EQ(j["network"]["idle_timeout"], "1m30s");
  EXPECT_EQ(j["network"]["resolve"]["api.test"][0], "127.0.0.1");
  EXPECT_EQ(j["network"]["resolve"]["multi.test"][1], "127.0.0.2");
  EXPECT_EQ(j["filesystem"]["quota"]["bytes"], 0);
  EXPECT_EQ(j["filesystem"]["protect"], nlohmann::json::array());
  EXPECT_EQ(j["filesystem"]["xattrs"], true);
  EXPECT_EQ(j["process"]["timeout"], "1d2h3m4s5ms");
  EXPECT_EQ(j["process"]["cpus"], 0.25);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["record"]["max_bytes"], "256M");
  EXPECT_EQ(j["record"]["events_per_second"], 1000);
}

TEST(ToJson, RoundTripsAPolicyBuiltInCode) {
  Policy p;
  p.network.max_bytes_out = 1;
  p.network.idle_timeout = std::chrono::milliseconds(1);
  p.process.cpus = 1.0 / 3;
  p.process.memory = (1ull << 20) + 1;
  p.filesystem.protect = default_protected();
  p.filesystem.deny = default_denied("/home/alice");
  p.record.max_bytes = (3ull << 20) + 7;
  p.record.events_per_second = 0;
  Policy again = parse_policy(to_json(p).dump(), opts());
  EXPECT_EQ(again, p);
}

TEST(Explain, DefaultPolicyInPlainWords) {
  std::string e = explain(default_policy(opts()));
  for (const char* line : {
           "network: no outbound connections (network.allow is empty)\n",
           "filesystem: workspace . copy-on-write; quota 1 GiB / 100000 inodes; through cordon-fs "
           "deny, deny_write and protect are decided at every access",
           "process: memory 1 GiB, 1 CPU, 512 tasks, timeout 30m\n",
           "environment: keeps PATH, HOME, LANG",
           "strips *TOKEN*, *SECRET*",
           "filesystem: /tmp 64 MiB\n",
           "filesystem: extended attributes: not kept (the view answers ENOTSUP to setting one "
           "and shows none, not even a workspace file's own; filesystem.xattrs)\n",
           "record: events.jsonl at most 256 MiB (record.max_bytes); 1000 events per second per "
           "writer and kind family, the rest counted (record.events_per_second)\n",
           "~/.ssh",
           ".git/hooks/**",
       }) {
    EXPECT_NE(e.find(line), std::string::npos) << "missing [" << line << "] in:\n" << e;
  }
  EXPECT_EQ(e.find("network: allow"), std::string::npos);
}

// Only the copy-on-write view can drop xattrs: an rw or ro workspace is the host's own directory.
TEST(Explain, SaysWhetherTheCowWorkspaceKeepsXattrs) {
  std::string kept = explain(parse_policy(R"({"filesystem": {"xattrs": true}})", opts()));
  EXPECT_NE(kept.find("filesystem: extended attributes: kept in the workspace and committed "
                      "(filesystem.xattrs)\n"),
            std::string::npos)
      << kept;
  EXPECT_EQ(kept.find("not kept"), std::string::npos) << kept;
  std::string rw = explain(parse_policy(R"({"filesystem": {"mode": "rw"}})", opts()));
  EXPECT_EQ(rw.find("extended attributes"), std::string::npos) << rw;
}

TEST(Explain, NamesEachRuleWithItsPath) {
  std::string e = explain(parse_policy(kRich, opts()));
  for (const char* line : {
           "network: allow api.openai.com port 443 (network.allow[0])\n",
           "network: allow any subdomain of githubusercontent.com any port (network.allow[1])\n",
           "network: allow addresses in 10.0.0.0/8 any port (network.allow[3])\n",
           "network: allow 2001:db8::1 port 443 (network.allow[4])\n",
           "network: allow localhost ports 8000-8100 (network.allow[6]): a service on the host's "
           "own loopback",
           "network: deny 169.254.169.254 any port (network.deny[0], wins over allow)\n",
           "network: api.test resolves to 127.0.0.1 (network.resolve)\n",
           "network: upload budget 1.5 GiB, download budget 1000 bytes\n",
           "filesystem: workspace ~/proj read-write",
           "quota no byte limit / 12345 inodes",
           "filesystem: read-only /home/alice/.gitconfig (filesystem.read[0]); what "
           "filesystem.deny names in it is hidden at start",
           "filesystem: read-write /tmp/out (filesystem.write[0]); inside it **/*.pem hold",
           "shown as missing",
           "filesystem: /tmp without a size limit\n",
           "process: memory 3 MiB, 0.25 CPUs, unlimited tasks, timeout 1d2h3m4s5ms\n",
           "process: may execute only /usr/bin/*, bin/tool (process.exec_allow)\n",
           "process: syscalls also refused: io_uring_setup, bpf (process.seccomp.deny)\n",
           "environment: keeps PATH, HOME; strips *KEY*\n",
           "environment: sets CI, EMPTY (process.env.set)\n",
       }) {
    EXPECT_NE(e.find(line), std::string::npos) << "missing [" << line << "] in:\n" << e;
  }
  EXPECT_EQ(e.find("write-protected"), std::string::npos);  // protect: [] lifted it
}

TEST(ToRecordJson, SecretValuesAreNeverWritten) {
  Policy p = parse_policy(R"({"process": {"env": {
      "set": {"CI": "1", "OPENAI_API_KEY": "sk-live-123", "MY_SECRET_X": "hunter2",
              "PASSED": "also-secret"},
      "pass": ["PASSED", "ANTHROPIC_API_KEY"]}}})",
                          opts());
  std::string text = to_record_json(p).dump();
  for (const char* value : {"sk-live-123", "hunter2", "also-secret"}) {
    EXPECT_EQ(text.find(value), std::string::npos) << value << " in " << text;
  }
  auto set = to_record_json(p)["process"]["env"]["set"];
  EXPECT_EQ(set["CI"], "1");  // not a secret: kept as it is
  EXPECT_EQ(set["OPENAI_API_KEY"], kRedactedValue);
  EXPECT_EQ(set["MY_SECRET_X"], kRedactedValue);
  EXPECT_EQ(set["PASSED"], kRedactedValue);
  // Names stay, and the record still parses as a policy.
  Policy back = parse_policy(to_record_json(p).dump(), opts());
  EXPECT_EQ(back.process.env.pass, p.process.env.pass);
  EXPECT_EQ(back.process.env.set.size(), 4u);
  EXPECT_EQ(to_json(p)["process"]["env"]["set"]["OPENAI_API_KEY"], "sk-live-123");  // faithful
}

TEST(Explain, SaysHowRulesHoldInsideGrantsAndTheAgentSettings) {
  Policy p = parse_policy(R"({"filesystem": {"mode": "rw", "read": ["/opt/tool"],
      "write": ["~/.claude", "~/.ssh/x"], "deny_write": ["~/.claude/settings.json"],
      "protect": ["~/.claude/hooks/**"]},
      "network": {"allow": ["localhost:11434"]},
      "process": {"nested_sandbox": true,
                  "env": {"keep": ["PATH", "GITHUB_TOKEN"], "pass": ["ANTHROPIC_API_KEY"],
                          "set": {"CI": "1", "X_TOKEN": "v"}}}})",
                          opts());
  std::string e = explain(p);
  for (const char* line : {
           "network: allow localhost port 11434 (network.allow[0]): a service on the host's own "
           "loopback; the sandbox's other loopback ports stay its own",
           "read-write (changes go straight to disk); quota",
           "through a cordon-fs view, so deny, deny_write and protect are decided at every access",
           "filesystem: read-write /home/alice/.claude (filesystem.write[0]); inside it "
           "~/.claude/settings.json, ~/.claude/hooks/**, **/.env, **/.env.local and 5 more hold "
           "for files created, renamed or linked later too",
           "filesystem: not shown: /home/alice/.ssh/x (filesystem.write[1]), filesystem.deny[0] "
           "wins",
           "filesystem: read-only /opt/tool (filesystem.read[0]); what filesystem.deny names in "
           "it is hidden at start",
           "process: may create user and mount namespaces and mount in them "
           "(process.nested_sandbox)",
           "RISK: a new user namespace hands the program every capability",
           "environment: passes ANTHROPIC_API_KEY from the host (process.env.pass) although "
           "process.env.deny[4] (\"*API_KEY*\") matches it; its value is never recorded",
           "environment: GITHUB_TOKEN is kept but never passed: process.env.deny[0]",
           "environment: sets CI (process.env.set)\n",
           "environment: sets X_TOKEN (process.env.set), secrets whose values are not recorded",
       }) {
    EXPECT_NE(e.find(line), std::string::npos) << "missing [" << line << "] in:\n" << e;
  }
  Policy d = default_policy(opts());
  EXPECT_NE(explain(d).find("process: creating user namespaces is refused and recorded"),
            std::string::npos);
}

// Explain says what cordon run does with inspection: no session CA there, so rules alone leave
// HTTPS a tunnel and network.inspect without network.ca refuses to start.
TEST(Explain, InspectionSaysWhatCordonRunDoes) {
  std::string ruled = explain(parse_policy(R"({"network": {"allow": ["h.test"], "rules": [
      {"host": "h.test", "methods": ["GET"], "action": "allow"}]}})",
                                           opts()));
  EXPECT_NE(ruled.find("network: HTTPS to h.test is inspected (network.inspect and the hosts "
                       "network.rules and network.credentials name): the proxy ends TLS with a "
                       "certificate from a CA made "
                       "for the session (its key in the session directory, never in the "
                       "sandbox), which the sandbox trusts"),
            std::string::npos)
      << ruled;
  std::string own = explain(parse_policy(R"({"network": {"allow": ["h.test"], "inspect": ["h.test"],
      "ca": {"cert": "/ca/my.pem", "key": "/ca/my.key"}}})",
                                         opts()));
  EXPECT_NE(own.find("with a certificate from the CA /ca/my.pem, which the sandbox trusts"),
            std::string::npos)
      << own;
  std::string none = explain(parse_policy(R"({"network": {"allow": ["h.test"]}})", opts()));
  EXPECT_NE(none.find("network: HTTPS is not inspected"), std::string::npos) << none;
  EXPECT_EQ(none.find("sandbox trusts"), std::string::npos) << none;
}

}  // namespace
}  // namespace cordon::policy
