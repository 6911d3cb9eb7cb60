// Loading: the schema, defaults for keys not given, and every refusal naming field and value.
#include "policy/loader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "policy/serialize.h"
#include "tests/support/test_env.h"

namespace cordon::policy {
namespace {

LoadOptions opts() {
  LoadOptions o;
  o.home = "/home/alice";
  o.source_name = "p.json";
  return o;
}

Policy load(std::string_view text) { return parse_policy(text, opts()); }

// Parses `text`, expects a PolicyError, and returns it.
PolicyError error_of(std::string_view text) {
  try {
    load(text);
  } catch (const PolicyError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << text;
  return PolicyError("", "");
}

TEST(ParsePolicy, EmptyObjectKeepsDefaults) {
  Policy p = load("{}");
  Policy d;
  EXPECT_EQ(p.network, d.network);
  EXPECT_EQ(p.process, d.process);
  EXPECT_EQ(p.filesystem.mode, WorkspaceMode::Cow);
  EXPECT_EQ(p.filesystem.protect, default_protected());
  EXPECT_EQ(p.filesystem.deny, default_denied("/home/alice"));
  EXPECT_FALSE(p.filesystem.deny.empty());
  EXPECT_FALSE(p.filesystem.xattrs);  // the workspace keeps no extended attributes
}

TEST(ParsePolicy, ReadsEveryField) {
  Policy p = load(R"(
  // comments are allowed
  {
    "version": 1,
    "network": {
      "allow": ["api.openai.com:443", "*.githubusercontent.com", "10.0.0.0/8"],
      "deny": ["169.254.169.254"],
      "max_connections": 8, "max_connections_per_host": 2, "connections_per_minute": 60,
      "max_bytes_out": "100M", "max_bytes_in": 1048576, "idle_timeout": "90s",
      "connect_timeout": 2.5,
      "resolve": {"API.Test.": "127.0.0.1", "multi.test": ["::1", "127.0.0.2"]},
      "dns": {"types": ["a", "AAAA", "txt"]},
      "proxy_env": false
    },
    /* block comment */
    "filesystem": {
      "workspace": "~/proj", "mode": "ro", "read": ["~/.gitconfig"], "write": ["/tmp/out"],
      "deny": ["**/*.pem"], "deny_write": ["vendor"], "protect": [".envrc"],
      "deny_style": "hide", "quota": {"bytes": "2G", "inodes": 0}, "tmp": "128M",
      "xattrs": true
    },
    "process": {
      "memory": "512M", "cpus": 0.5, "pids": 0, "nofile": 4096, "fsize": "1G",
      "timeout": "1h30m", "kill_grace": 0,
      "env": {"keep": ["PATH"], "set": {"CI": "1"}, "deny": ["*TOKEN*"]},
      "exec_allow": ["/usr/bin/*"], "seccomp": {"allow": ["ptrace"], "deny": ["io_uring_setup"]},
      "hostname": "box-1"
    }
  })");
  const NetworkPolicy& n = p.network;
  ASSERT_EQ(n.allow.size(), 3u);
  EXPECT_EQ(n.allow[0].name, "api.openai.com");
  EXPECT_EQ(n.allow[2].kind, HostPattern::Kind::Cidr);
  EXPECT_EQ(n.deny.size(), 1u);
  EXPECT_EQ(n.max_connections, 8u);
  EXPECT_EQ(n.max_connections_per_host, 2u);
  EXPECT_EQ(n.connections_per_minute, 60u);
  EXPECT_EQ(n.max_bytes_out, 100ull << 20);
  EXPECT_EQ(n.max_bytes_in, 1048576u);
  EXPECT_EQ(n.idle_timeout, std::chrono::seconds(90));
  EXPECT_EQ(n.connect_timeout, std::chrono::milliseconds(2500));
  ASSERT_EQ(n.resolve.count("api.test"), 1u);
  EXPECT_EQ(n.resolve.at("api.test")[0].to_string(), "127.0.0.1");
  EXPECT_EQ(n.resolve.at("multi.test").size(), 2u);
  EXPECT_EQ(n.dns_types, (std::vector<std::string>{"A", "AAAA", "TXT"}));
  EXPECT_FALSE(n.proxy_env);
  const FilesystemPolicy& f = p.filesystem;
  EXPECT_EQ(f.workspace, "~/proj");
  EXPECT_EQ(f.mode, WorkspaceMode::Ro);
  EXPECT_EQ(f.read[0].expanded, "/home/alice/.gitconfig");
  EXPECT_EQ(f.write[0].expanded, "/tmp/out");
  EXPECT_EQ(f.deny.size(), 1u);  // given: replaces the default list
  EXPECT_EQ(f.deny_write[0].text, "vendor");
  EXPECT_EQ(f.protect.size(), 1u);
  EXPECT_EQ(f.deny_style, DenyStyle::Hide);
  EXPECT_EQ(f.quota.bytes, 2ull << 30);
  EXPECT_EQ(f.quota.inodes, 0u);
  EXPECT_EQ(f.tmp, 128ull << 20);
  EXPECT_TRUE(f.xattrs);
  const ProcessPolicy& pr = p.process;
  EXPECT_EQ(pr.memory, 512ull << 20);
  EXPECT_DOUBLE_EQ(pr.cpus, 0.5);
  EXPECT_EQ(pr.pids, 0u);
  EXPECT_EQ(pr.nofile, 4096u);
  EXPECT_EQ(pr.fsize, 1ull << 30);
  EXPECT_EQ(pr.timeout, std::chrono::minutes(90));
  EXPECT_EQ(pr.kill_grace, std::chrono::milliseconds(0));
  EXPECT_EQ(pr.env.keep, (std::vector<std::string>{"PATH"}));
  EXPECT_EQ(pr.env.set.at("CI"), "1");
  EXPECT_EQ(pr.env.deny, (std::vector<std::string>{"*TOKEN*"}));
  EXPECT_TRUE(pr.exec_allow[0].matches("/usr/bin/python3"));
  EXPECT_EQ(pr.seccomp.allow, (std::vector<std::string>{"ptrace"}));
  EXPECT_EQ(pr.seccomp.deny, (std::vector<std::string>{"io_uring_setup"}));
  EXPECT_EQ(pr.hostname, "box-1");
}

TEST(ParsePolicy, RecordBoundsHaveUnitsAndNoUnlimitedCap) {
  Policy d = load("{}");
  EXPECT_EQ(d.record.max_bytes, 256ull << 20);
  EXPECT_EQ(d.record.events_per_second, 1000u);
  Policy p = load(R"({"record": {"max_bytes": "2M", "events_per_second": 50}})");
  EXPECT_EQ(p.record.max_bytes, 2ull << 20);
  EXPECT_EQ(p.record.events_per_second, 50u);
  EXPECT_EQ(load(R"({"record": {"events_per_second": 0}})").record.events_per_second, 0u);
  struct Case {
    const char* text;
    const char* path;
    const char* part;
  } cases[] = {
      // The cap exists so that no program can fill the disk: it cannot be lifted.
      {R"({"record": {"max_bytes": 0}})", "record.max_bytes", "zero, which is not allowed"},
      {R"({"record": {"max_bytes": "unlimited"}})", "record.max_bytes", "not allowed"},
      {R"({"record": {"max_bytes": "512K"}})", "record.max_bytes", "the least is 1M"},
      {R"({"record": {"max_bytes": "lots"}})", "record.max_bytes", "is not a size"},
      {R"({"record": {"events_per_second": -1}})", "record.events_per_second", "negative"},
      {R"({"record": {"events_per_second": 2000000}})", "record.events_per_second", "out of range"},
      {R"({"record": []})", "record", "expected an object"},
      {R"({"record": {"max_byte": "1M"}})", "record.max_byte", "did you mean `max_bytes`?"},
      {R"({"max_bytes": "1M"})", "max_bytes", "belongs in `record` (`record.max_bytes`)"},
  };
  for (const auto& c : cases) {
    PolicyError e = error_of(c.text);
    EXPECT_EQ(e.field_path(), c.path) << c.text;
    EXPECT_NE(std::string(e.what()).find(c.part), std::string::npos) << e.what();
  }
}

TEST(ParsePolicy, RecordOtlpIsACheckedCollectorUrl) {
  EXPECT_EQ(load("{}").record.otlp, "");
  EXPECT_EQ(load(R"({"record": {"otlp": "http://127.0.0.1:4318"}})").record.otlp,
            "http://127.0.0.1:4318");
  struct Case {
    const char* text;
    const char* part;
  } cases[] = {
      {R"({"record": {"otlp": "ftp://collector"}})", "the scheme ftp:// is not one"},
      {R"({"record": {"otlp": "https://u:p@collector"}})", "user info in the URL"},
      {R"({"record": {"otlp": ""}})", "no scheme"},
      {R"({"record": {"otlp": 4318}})", "an http:// or https:// URL"},
  };
  for (const auto& c : cases) {
    PolicyError e = error_of(c.text);
    EXPECT_EQ(e.field_path(), "record.otlp") << c.text;
    EXPECT_NE(std::string(e.what()).find(c.part), std::string::npos) << e.what();
  }
  EXPECT_NE(std::string(error_of(R"({"otlp": "http://c"})").what()).find("`record.otlp`"),
            std::string::npos);
}

TEST(ParsePolicy, UnknownKeysGetASuggestion) {
  struct Case {
    const char* text;
    const char* path;
    const char* suggestion;
  } cases[] = {
      {R"({"network": {"max_conections": 3}})", "network.max_conections", "`max_connections`"},
      {R"({"netwrok": {}})", "netwrok", "`network`"},
      {R"({"filesystem": {"quota": {"byte": 1}}})", "filesystem.quota.byte", "`bytes`"},
      {R"({"process": {"env": {"Keep": []}}})", "process.env.Keep", "`keep`"},
      {R"({"process": {"seccomp": {"denied": []}}})", "process.seccomp.denied", "`deny`"},
      {R"({"network": {"dns": {"type": ["A"]}}})", "network.dns.type", "`types`"},
      {R"({"filesystem": {"deny-write": []}})", "filesystem.deny-write", "`deny_write`"},
  };
  for (const auto& c : cases) {
    PolicyError e = error_of(c.text);
    EXPECT_EQ(e.field_path(), c.path) << c.text;
    std::string what = e.what();
    EXPECT_NE(what.find(std::string("did you mean ") + c.suggestion + "?"), std::string::npos)
        << what;
    EXPECT_EQ(what.rfind("p.json: ", 0), 0u) << what;
  }
  // Right key, wrong section.
  PolicyError moved = error_of(R"({"allow": ["pypi.org"]})");
  EXPECT_EQ(moved.field_path(), "allow");
  EXPECT_NE(std::string(moved.what()).find("belongs in `network` (`network.allow`)"),
            std::string::npos)
      << moved.what();
  PolicyError moved2 = error_of(R"({"process": {"workspace": "."}})");
  EXPECT_NE(std::string(moved2.what()).find("`filesystem.workspace`"), std::string::npos)
      << moved2.what();
  // Nothing close: no guess, but the accepted keys are listed.
  PolicyError e = error_of(R"({"zzzzzzzzzzzzzzzz": 1})");
  EXPECT_EQ(std::string(e.what()).find("did you mean"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("network"), std::string::npos);
}

TEST(ParsePolicy, EveryErrorNamesFieldPathValueAndWhatIsAccepted) {
  struct Case {
    const char* text;
    const char* path;
    std::vector<const char*> parts;  // substrings of what()
  } cases[] = {
      {R"({"version": 2})", "version", {"2", "accepted: 1"}},
      {R"({"version": "1"})", "version", {"\"1\"", "accepted: 1"}},
      {R"({"network": []})", "network", {"expected an object", "[]"}},
      {R"({"network": {"allow": "a.com"}})", "network.allow", {"expected an array", "\"a.com\""}},
      {R"({"network": {"allow": ["a.com", "b.com", "exa mple.com:443"]}})",
       "network.allow[2]",
       {"\"exa mple.com:443\" is not a host pattern", "spaces", "accepted: name, *.suffix"}},
      {R"({"network": {"allow": [42]}})", "network.allow[0]", {"42", "host pattern"}},
      {R"({"network": {"allow": ["https://pypi.org/simple"]}})",
       "network.allow[0]",
       {"\"pypi.org:443\""}},
      {R"({"network": {"deny": ["a.*.com"]}})", "network.deny[0]", {"\"a.*.com\"", "'*'"}},
      {R"({"network": {"allow": ["h:70000"]}})", "network.allow[0]", {"70000", "1-65535"}},
      {R"({"network": {"allow": ["10.0.0.1/8"]}})",
       "network.allow[0]",
       {"host bits", "10.0.0.0/8"}},
      {R"({"network": {"max_connections": -1}})",
       "network.max_connections",
       {"-1", "negative", "0 to 1000000"}},
      {R"({"network": {"max_connections": 1.5}})",
       "network.max_connections",
       {"1.5", "whole number"}},
      {R"({"network": {"max_connections": "10"}})",
       "network.max_connections",
       {"\"10\"", "whole number"}},
      {R"({"network": {"max_connections_per_host": 0}})",
       "network.max_connections_per_host",
       {"0", "1 to 1000000"}},
      {R"({"network": {"max_bytes_out": "12X"}})",
       "network.max_bytes_out",
       {"\"12X\" is not a size", "\"64M\""}},
      {R"({"network": {"max_bytes_out": -5}})", "network.max_bytes_out", {"-5", "negative"}},
      {R"({"network": {"max_bytes_out": 1.5}})", "network.max_bytes_out", {"1.5", "whole number"}},
      {R"({"network": {"idle_timeout": "5 minutes"}})",
       "network.idle_timeout",
       {"\"5 minutes\"", "\"1m30s\""}},
      {R"({"network": {"idle_timeout": -1}})", "network.idle_timeout", {"-1", "duration"}},
      {R"({"network": {"connect_timeout": 0}})", "network.connect_timeout", {"0", "zero"}},
      {R"({"network": {"connect_timeout": "400d"}})",
       "network.connect_timeout",
       {"\"400d\"", "365d"}},
      {R"({"network": {"resolve": {"api.test": "localhost"}}})",
       "network.resolve[\"api.test\"]",
       {"\"localhost\"", "not an IP"}},
      {R"({"network": {"resolve": {"api.test": ["127.0.0.1", "x"]}}})",
       "network.resolve[\"api.test\"][1]",
       {"\"x\""}},
      {R"({"network": {"resolve": {"api.test": []}}})",
       "network.resolve[\"api.test\"]",
       {"1 to 64"}},
      {R"({"network": {"resolve": {"*.test": "127.0.0.1"}}})",
       "network.resolve[\"*.test\"]",
       {"\"*.test\"", "not a host name"}},
      {R"({"network": {"resolve": {"a.test": "127.0.0.1", "A.TEST.": "::1"}}})",
       "network.resolve[\"a.test\"]",
       {"second time"}},
      {R"({"network": {"dns": {"types": ["A", "BOGUS"]}}})",
       "network.dns.types[1]",
       {"\"BOGUS\"", "AAAA", "TXT"}},
      {R"({"network": {"proxy_env": "yes"}})", "network.proxy_env", {"\"yes\"", "true or false"}},
      {R"({"filesystem": {"mode": "copy"}})",
       "filesystem.mode",
       {"\"copy\"", "\"cow\"", "\"ro\"", "\"rw\""}},
      {R"({"filesystem": {"deny_style": "EACCES"}})",
       "filesystem.deny_style",
       {"\"EACCES\"", "\"hide\""}},
      {R"({"filesystem": {"read": ["relative/dir"]}})",
       "filesystem.read[0]",
       {"\"relative/dir\"", "absolute"}},
      {R"({"filesystem": {"write": ["/tmp/*"]}})", "filesystem.write[0]", {"\"/tmp/*\"", "glob"}},
      {R"({"filesystem": {"deny": ["~/.ssh", "~root/.ssh"]}})",
       "filesystem.deny[1]",
       {"\"~root/.ssh\"", "~user"}},
      {R"({"filesystem": {"deny": ["a/../b"]}})", "filesystem.deny[0]", {"\"a/../b\"", ".."}},
      {R"({"filesystem": {"protect": [""]}})", "filesystem.protect[0]", {"\"\"", "empty"}},
      {R"({"filesystem": {"quota": {"bytes": true}}})",
       "filesystem.quota.bytes",
       {"expected a size like \"512M\", got true"}},
      {R"({"filesystem": {"quota": {"inodes": -1}}})", "filesystem.quota.inodes", {"-1"}},
      {R"({"filesystem": {"tmp": "1K"}})", "filesystem.tmp", {"\"1K\"", "too small", "1M"}},
      {R"({"filesystem": {"xattrs": "no"}})", "filesystem.xattrs", {"\"no\"", "true or false"}},
      {R"({"filesystem": {"xattrs": 1}})", "filesystem.xattrs", {"got 1", "true or false"}},
      {R"({"xattrs": true})", "xattrs", {"belongs in `filesystem` (`filesystem.xattrs`)"}},
      {R"({"filesystem": {"workspace": ""}})", "filesystem.workspace", {"\"\""}},
      {R"({"filesystem": {"workspace": 7}})",
       "filesystem.workspace",
       {"7", "expected a directory path"}},
      {R"({"process": {"memory": true}})",
       "process.memory",
       {"expected a size like \"512M\", got true"}},
      {R"({"process": {"memory": "100K"}})", "process.memory", {"\"100K\"", "too small"}},
      {R"({"process": {"cpus": 0.0001}})", "process.cpus", {"0.0001", "0.01 to 1024"}},
      {R"({"process": {"cpus": 2000}})", "process.cpus", {"2000", "1024"}},
      {R"({"process": {"cpus": -1}})", "process.cpus", {"-1"}},
      {R"({"process": {"cpus": "2"}})", "process.cpus", {"\"2\""}},
      {R"({"process": {"pids": 5000000}})", "process.pids", {"5000000", "4194304"}},
      {R"({"process": {"nofile": 8}})", "process.nofile", {"8", "16 to 1048576"}},
      {R"({"process": {"nofile": 0}})", "process.nofile", {"0", "16 to 1048576"}},
      {R"({"process": {"nofile": 99999999999999999999}})", "process.nofile", {"1048576"}},
      {R"({"process": {"timeout": "forever"}})", "process.timeout", {"\"forever\"", "\"30m\""}},
      {R"({"process": {"env": {"keep": ["PATH", "BAD-NAME"]}}})",
       "process.env.keep[1]",
       {"\"BAD-NAME\""}},
      {R"({"process": {"env": {"set": {"1X": "v"}}}})", "process.env.set.1X", {"\"1X\""}},
      {R"({"process": {"env": {"set": {"X": 1}}}})", "process.env.set.X", {"1", "string"}},
      {R"({"process": {"env": {"deny": ["A?B"]}}})", "process.env.deny[0]", {"\"A?B\"", "*TOKEN*"}},
      {R"({"process": {"seccomp": {"deny": ["PTRACE"]}}})",
       "process.seccomp.deny[0]",
       {"\"PTRACE\"", "lowercase"}},
      {R"({"process": {"seccomp": {"allow": ["a b"]}}})", "process.seccomp.allow[0]", {"\"a b\""}},
      {R"({"process": {"hostname": "-bad"}})", "process.hostname", {"\"-bad\"", "hostname"}},
      {R"({"process": {"hostname": "a_b"}})", "process.hostname", {"\"a_b\""}},
      {R"({"process": {"hostname": ""}})", "process.hostname", {"\"\""}},
      {R"({"process": {"exec_allow": [null]}})", "process.exec_allow[0]", {"null"}},
      // The user-namespace filters are lifted by nested_sandbox only: `check` agrees with `run`.
      {R"({"process": {"seccomp": {"allow": ["ptrace", "unshare"]}}})",
       "process.seccomp.allow[1]",
       {"\"unshare\" cannot be allowed", "process.nested_sandbox: true"}},
      {R"({"process": {"seccomp": {"allow": ["clone3"]}}})",
       "process.seccomp.allow[0]",
       {"\"clone3\""}},
      {R"({"process": {"seccomp": {"deny": ["execve"]}}})",
       "process.seccomp.deny[0]",
       {"\"execve\" cannot be denied", "exec_allow"}},
      {R"({"process": {"nested_sandbox": "yes"}})", "process.nested_sandbox", {"true or false"}},
      {R"({"process": {"exec_allow": ["/usr/bin/**"], "nested_sandbox": true}})",
       "process.nested_sandbox",
       {"process.exec_allow", "Landlock"}},
      {R"({"process": {"env": {"pass": ["*_KEY"]}}})",
       "process.env.pass[0]",
       {"\"*_KEY\"", "no globs"}},
      // The host's loopback on every port would hand over every local service.
      {R"({"network": {"allow": ["localhost"]}})",
       "network.allow[0]",
       {"\"localhost\"", "every port", "localhost:11434"}},
      {R"({"network": {"allow": ["a.test", "127.0.0.0/8"]}})", "network.allow[1]", {"every port"}},
      {R"({"network": {"allow": ["[::1]"]}})", "network.allow[0]", {"every port"}},
  };
  for (const auto& c : cases) {
    PolicyError e = error_of(c.text);
    EXPECT_EQ(e.field_path(), c.path) << c.text << "\n  -> " << e.what();
    std::string what = e.what();
    EXPECT_EQ(what.rfind(std::string("p.json: ") + c.path + ": ", 0), 0u) << what;
    for (const char* part : c.parts) {
      EXPECT_NE(what.find(part), std::string::npos) << "missing [" << part << "] in: " << what;
    }
  }
}

TEST(ParsePolicy, AcceptsBoundaryValues) {
  Policy p = load(R"({"network": {"max_connections": 0, "allow": ["a.b:65535", "c.d:1"]},
      "process": {"nofile": 16, "cpus": 1024, "pids": 1, "memory": "1M", "timeout": 0,
                  "hostname": "a"}, "filesystem": {"tmp": 0}})");
  EXPECT_EQ(p.network.max_connections, 0u);
  EXPECT_EQ(p.process.nofile, 16u);
  EXPECT_EQ(p.process.cpus, 1024.0);
  EXPECT_EQ(p.process.pids, 1u);
  EXPECT_EQ(p.process.memory, 1ull << 20);
  EXPECT_EQ(p.process.timeout.count(), 0);
  EXPECT_EQ(p.filesystem.tmp, 0u);
  Policy q = load(R"({"process": {"nofile": 1048576, "cpus": 0, "memory": "unlimited"},
                      "network": {"max_bytes_out": "0"}})");
  EXPECT_EQ(q.process.nofile, 1048576u);
  EXPECT_EQ(q.process.cpus, 0.0);
  EXPECT_EQ(q.process.memory, 0u);
}

TEST(ParsePolicy, RejectsDuplicateKeys) {
  PolicyError e = error_of(R"({"network": {"allow": [], "allow": ["*"]}})");
  EXPECT_EQ(e.field_path(), "network.allow");
  EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos);
  PolicyError e2 = error_of(R"({"process": {"env": {"set": {"A": "1", "A": "2"}}}})");
  EXPECT_EQ(e2.field_path(), "process.env.set.A");
  // Paths through arrays count elements correctly.
  PolicyError e3 = error_of(R"({"network": {"allow": [], "x": [1, {}, {"k": 1, "k": 2}]}})");
  EXPECT_EQ(e3.field_path(), "network.x[2].k");
  // The same key in different objects is fine.
  EXPECT_NO_THROW(load(R"({"network": {"deny": []}, "filesystem": {"deny": []}})"));
}

TEST(ParsePolicy, SyntaxErrorsGiveLineAndColumn) {
  PolicyError e = error_of("{\n  \"network\": {\n    \"allow\": [\"a.com\",]\n  }\n}");
  std::string what = e.what();
  EXPECT_EQ(e.field_path(), "");
  EXPECT_NE(what.find("line 3"), std::string::npos) << what;
  EXPECT_NE(what.find("column"), std::string::npos) << what;
  EXPECT_EQ(what.rfind("p.json: invalid JSON", 0), 0u) << what;
  EXPECT_NE(std::string(error_of("{} x").what()).find("line 1"), std::string::npos);
  EXPECT_NE(std::string(error_of("").what()).find("invalid JSON"), std::string::npos);
  EXPECT_NE(std::string(error_of("{\"a\": 1} // ok\n {}").what()).find("invalid JSON"),
            std::string::npos);
}

TEST(ParsePolicy, TopLevelMustBeAnObject) {
  for (const char* t : {"[]", "1", "\"x\"", "null", "true"}) {
    PolicyError e = error_of(t);
    EXPECT_NE(std::string(e.what()).find("a policy is a JSON object"), std::string::npos) << t;
  }
}

TEST(ParsePolicy, HostileInputIsRefusedCleanly) {
  // 100000 levels of nesting: refused by depth, no stack exhaustion.
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  EXPECT_NE(std::string(error_of(deep).what()).find("nested deeper"), std::string::npos);
  std::string deep_obj;
  for (int i = 0; i < 100000; ++i) {
    deep_obj += "{\"a\":";
  }
  EXPECT_NE(std::string(error_of(deep_obj).what()).find("nested deeper"), std::string::npos);
  std::string deep_in_field = R"({"network": {"allow": )" + std::string(1000, '[');
  EXPECT_EQ(error_of(deep_in_field).field_path().rfind("network.allow[0]", 0), 0u);

  // A 2 MB string value (twice what a policy file may hold): refused with a short message.
  std::string giant = R"({"process": {"hostname": ")" + std::string(2 << 20, 'a') + "\"}}";
  PolicyError g = error_of(giant);
  EXPECT_EQ(g.field_path(), "process.hostname");
  EXPECT_LT(std::string(g.what()).size(), 600u);
  std::string giant_key = "{\"" + std::string(1 << 20, 'k') + "\": 1}";
  EXPECT_LT(std::string(error_of(giant_key).what()).size(), 1000u);

  // NUL bytes: outside strings, inside strings (raw and escaped).
  EXPECT_NE(std::string(error_of(std::string_view("{\0}", 3)).what()).find("invalid JSON"),
            std::string::npos);
  std::string raw_nul("{\"process\": {\"hostname\": \"a\0b\"}}", 33);
  PolicyError rn = error_of(raw_nul);
  EXPECT_EQ(std::string(rn.what()).find('\0'), std::string::npos);
  PolicyError en = error_of(R"({"process": {"hostname": "a\u0000b"}})");
  EXPECT_EQ(en.field_path(), "process.hostname");
  EXPECT_EQ(error_of(R"({"network": {"allow": ["a.com\u0000.evil"]}})").field_path(),
            "network.allow[0]");
  EXPECT_EQ(error_of(R"({"filesystem": {"deny": ["/a\u0000b"]}})").field_path(),
            "filesystem.deny[0]");

  // Invalid UTF-8 in a string; error messages must not echo raw control bytes.
  std::string bad_utf8 = "{\"network\": {\"allow\": [\"\xff\xfe\"]}}";
  std::string w = error_of(bad_utf8).what();
  EXPECT_NE(w.find("invalid JSON"), std::string::npos) << w;
  for (char c : w) {
    EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f) << w;
  }

  // Numbers out of every range.
  EXPECT_NE(
      std::string(error_of(R"({"network": {"max_bytes_out": 1e400}})").what()).find("invalid JSON"),
      std::string::npos);
  EXPECT_EQ(error_of(R"({"network": {"max_bytes_out": 1e300}})").field_path(),
            "network.max_bytes_out");
  EXPECT_EQ(error_of(R"({"network": {"max_bytes_out": -1e300}})").field_path(),
            "network.max_bytes_out");
  EXPECT_EQ(error_of(R"({"process": {"timeout": 1e300}})").field_path(), "process.timeout");
  EXPECT_EQ(error_of(R"({"process": {"pids": 1e300}})").field_path(), "process.pids");
  EXPECT_EQ(error_of(R"({"process": {"pids": 4294967297}})").field_path(), "process.pids");
  EXPECT_EQ(error_of(R"({"network": {"max_bytes_out": "99999999999999999999999"}})").field_path(),
            "network.max_bytes_out");
  EXPECT_EQ(error_of(R"({"network": {"allow": ["a:99999999999999999999999"]}})").field_path(),
            "network.allow[0]");
  EXPECT_EQ(error_of(R"({"network": {"allow": ["a:-1"]}})").field_path(), "network.allow[0]");
}

TEST(LoadPolicyFile, ReadsAFileAndNamesItInErrors) {
  testing::TempDir dir;
  std::string good = dir / "good.json";
  std::ofstream(good) << R"({"network": {"allow": ["pypi.org:443"]}})";
  Policy p = load_policy_file(good, LoadOptions{"/home/alice", "policy"});
  ASSERT_EQ(p.network.allow.size(), 1u);

  std::string bad = dir / "bad.json";
  std::ofstream(bad) << R"({"network": {"alow": []}})";
  try {
    load_policy_file(bad, LoadOptions{"/home/alice", "policy"});
    ADD_FAILURE() << "accepted";
  } catch (const PolicyError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(bad + ": network.alow: ", 0), 0u) << e.what();
    EXPECT_EQ(e.field_path(), "network.alow");
  }
}

std::string file_error(const std::string& path) {
  try {
    load_policy_file(path, LoadOptions{"/home/alice", "policy"});
  } catch (const PolicyError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted " << path;
  return {};
}

TEST(LoadPolicyFile, ClearErrorsForMissingDirectoryUnreadableAndHuge) {
  testing::TempDir dir;
  std::string missing = file_error(dir / "nope.json");
  EXPECT_NE(missing.find(dir / "nope.json"), std::string::npos) << missing;
  EXPECT_NE(missing.find("No such file"), std::string::npos) << missing;
  EXPECT_NE(missing.find("cordon policy default"), std::string::npos) << missing;

  std::string isdir = file_error(dir.path());
  EXPECT_NE(isdir.find("is a directory"), std::string::npos) << isdir;

  std::string huge = dir / "huge.json";
  {
    std::ofstream out(huge);
    out << "{" << std::string((1 << 20) + 10, ' ') << "}";
  }
  EXPECT_NE(file_error(huge).find("at most 1 MiB"), std::string::npos);

  std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(file_error(fifo).find("not a regular file"), std::string::npos);

  std::string locked = dir / "locked.json";
  std::ofstream(locked) << "{}";
  ::chmod(locked.c_str(), 0);
  if (::geteuid() != 0) {  // root reads it anyway (CAP_DAC_OVERRIDE)
    std::string e = file_error(locked);
    EXPECT_NE(e.find("Permission denied"), std::string::npos) << e;
  }
}

TEST(ParsePolicy, ReadsTheAgentFields) {
  Policy p = load(R"({"process": {"nested_sandbox": true,
      "env": {"pass": ["ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY", "OTHER"]}},
      "network": {"allow": ["localhost:11434", "127.0.0.1:8000-8100", "[::1]:9000"]}})");
  EXPECT_TRUE(p.process.nested_sandbox);
  EXPECT_EQ(p.process.env.pass, (std::vector<std::string>{"ANTHROPIC_API_KEY", "OTHER"}));
  EXPECT_TRUE(p.process.env.is_secret("OTHER"));         // passed: a secret, by name
  EXPECT_TRUE(p.process.env.is_secret("GITHUB_TOKEN"));  // denied: a secret
  EXPECT_FALSE(p.process.env.is_secret("PATH"));
  EXPECT_FALSE(load("{}").process.nested_sandbox);  // off by default
  for (const auto& a : p.network.allow) {
    EXPECT_TRUE(a.names_host_loopback()) << a.text;
  }
}

TEST(ApplyOverride, FlagsGoThroughTheFieldValidators) {
  Policy p = load("{}");
  auto refusal = [&](const Override& o) -> std::string {
    Policy q = p;
    try {
      apply_override(q, o, opts());
    } catch (const PolicyError& e) {
      EXPECT_EQ(q, p) << "a refused flag changed the policy";
      return e.what();
    }
    ADD_FAILURE() << "accepted " << o.flag << " " << o.value.dump();
    return {};
  };
  std::string e = refusal({"--read", "filesystem.read", "rel/path", Override::How::Append});
  EXPECT_EQ(e.rfind("--read: filesystem.read[0]: \"rel/path\" is relative", 0), 0u) << e;
  e = refusal({"--write", "filesystem.write", "/tmp/*", Override::How::Append});
  EXPECT_NE(e.find("--write: filesystem.write[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("glob"), std::string::npos) << e;
  e = refusal({"--memory", "process.memory", "12Q", Override::How::Set});
  EXPECT_EQ(e.rfind("--memory: process.memory: \"12Q\" is not a size", 0), 0u) << e;
  e = refusal({"--cpus", "process.cpus", 5000, Override::How::Set});
  EXPECT_NE(e.find("--cpus: process.cpus: 5000 is out of range"), std::string::npos) << e;
  e = refusal({"--env-pass", "process.env.pass", "A-B", Override::How::Append});
  EXPECT_NE(e.find("--env-pass: process.env.pass[0]: \"A-B\""), std::string::npos) << e;
  e = refusal({"--allow-host", "network.allow", "127.0.0.1", Override::How::Append});
  EXPECT_NE(e.find("--allow-host: network.allow[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("every port"), std::string::npos) << e;

  // Appends keep what the policy had; sets replace; merges add keys.
  apply_override(p, {"--read", "filesystem.read", "~/.gitconfig", Override::How::Append}, opts());
  apply_override(p, {"--read", "filesystem.read", "/opt/tool", Override::How::Append}, opts());
  apply_override(p, {"--write", "filesystem.write", "~/.claude", Override::How::Append}, opts());
  apply_override(p, {"--memory", "process.memory", "2G", Override::How::Set}, opts());
  apply_override(p, {"--env-set", "process.env.set", {{"A", "1"}}, Override::How::Merge}, opts());
  apply_override(p, {"--env-set", "process.env.set", {{"B", "2"}}, Override::How::Merge}, opts());
  ASSERT_EQ(p.filesystem.read.size(), 2u);
  EXPECT_EQ(p.filesystem.read[0].expanded, "/home/alice/.gitconfig");
  EXPECT_EQ(p.filesystem.read[1].expanded, "/opt/tool");
  ASSERT_EQ(p.filesystem.write.size(), 1u);
  EXPECT_EQ(p.filesystem.write[0].expanded, "/home/alice/.claude");
  EXPECT_EQ(p.process.memory, 2ull << 30);
  EXPECT_EQ(p.process.env.set, (std::map<std::string, std::string>{{"A", "1"}, {"B", "2"}}));
  EXPECT_EQ(p.filesystem.deny, load("{}").filesystem.deny);  // the defaults stay
}

// A list left at its default is not written out by to_json: a flag still appends to it, and a
// bad value in it is refused for the file's reason, not as a missing field.
TEST(ApplyOverride, AppendsToAListTheSerializedPolicyLeavesOut) {
  Policy p = load("{}");
  ASSERT_TRUE(p.network.inspect.empty());
  try {
    Policy q = p;
    apply_override(q, {"--inspect", "network.inspect", "exa mple.com", Override::How::Append},
                   opts());
    ADD_FAILURE() << "accepted a host pattern with a space";
  } catch (const PolicyError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--inspect: network.inspect[0]: \"exa mple.com\"", 0), 0u)
        << e.what();
  }
  apply_override(p, {"--inspect", "network.inspect", "example.com", Override::How::Append}, opts());
  ASSERT_EQ(p.network.inspect.size(), 1u);
  EXPECT_EQ(p.network.inspect[0].text, "example.com");
  // Only the last key may be missing: a path the schema lacks is still cordon's bug.
  EXPECT_THROW(apply_override(p, {"--x", "nosuch.inspect", "a", Override::How::Append}, opts()),
               PolicyError);
}

TEST(WidenHomeRules, TildeRulesHoldUnderEveryHomeInPlay) {
  Policy p = load(R"({"filesystem": {"deny_write": ["~/.claude/settings.json", "/etc/x"]}})");
  size_t denies = p.filesystem.deny.size();
  widen_home_rules(p, {"/root", "/home/bob"});
  auto has = [](const std::vector<PathPattern>& v, const std::string& path) {
    for (const auto& r : v) {
      if (r.expanded == path) {
        return r.text == path || r.text[0] == '~';
      }
    }
    return false;
  };
  for (const char* home : {"/home/alice", "/root", "/home/bob"}) {
    std::string h = home;
    EXPECT_TRUE(has(p.filesystem.deny, h + "/.ssh")) << h;
    EXPECT_TRUE(has(p.filesystem.deny, h + "/.aws")) << h;
    EXPECT_TRUE(has(p.filesystem.deny, h + "/.netrc")) << h;
    EXPECT_TRUE(has(p.filesystem.deny_write, h + "/.claude/settings.json")) << h;
  }
  // Appended after what the policy had: earlier rules keep their index; the globs are shared.
  EXPECT_EQ(p.filesystem.deny[0].text, "~/.ssh");
  EXPECT_EQ(p.filesystem.deny.size(), denies + 2 * 11);  // the 11 "~" secrets, twice more
  EXPECT_EQ(p.filesystem.deny_write.size(), 4u);
  // Written out as the paths they name, so policy.json re-reads the same under any home.
  Policy again = parse_policy(to_json(p).dump(), opts());
  EXPECT_EQ(again.filesystem.deny, p.filesystem.deny);
  EXPECT_EQ(again.filesystem.deny_write, p.filesystem.deny_write);
  LoadOptions other = opts();
  other.home = "/home/carol";
  EXPECT_TRUE(has(parse_policy(to_json(p).dump(), other).filesystem.deny, "/root/.ssh"));
}

}  // namespace
}  // namespace cordon::policy
