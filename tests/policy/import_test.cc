// `cordon policy import`'s library: sandbox-runtime and Codex files (tests/data/import/, written
// from their documented schemas) become policies the loader accepts and that say what the
// originals said; every input key is mapped or listed; hostile input is refused by name.
#include "policy/import/import.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "policy/import/codex_import.h"
#include "policy/import/srt_import.h"
#include "policy/serialize.h"
#include "tests/support/test_env.h"

namespace cordon::policy::import {
namespace {

using cordon::testing::source_path;
using cordon::testing::TempDir;

std::string data(const std::string& name) { return source_path("tests/data/import/" + name); }

Policy load(const ImportResult& r, const std::string& source, std::string_view fmt) {
  LoadOptions lo;
  lo.home = "/home/u";
  lo.source_name = source;
  return parse_policy(render(r, source, fmt), lo);
}

bool listed(const ImportResult& r, const std::string& key, bool unknown = false) {
  for (const auto& u : r.unmapped) {
    if (u.key == key && u.unknown == unknown) {
      return true;
    }
  }
  return false;
}

// The patterns as written.
template <typename Pattern>
std::vector<std::string> texts(const std::vector<Pattern>& v) {
  std::vector<std::string> out;
  for (const auto& x : v) {
    out.push_back(x.text);
  }
  return out;
}

template <typename Pattern>
bool contains(const std::vector<Pattern>& v, const std::string& s) {
  auto t = texts(v);
  return std::find(t.begin(), t.end(), s) != t.end();
}
bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Every key of `j` down to `depth` levels is accounted for: an entry's origin, a note or an
// unmapped entry names it (or a key beneath it); the sections are looked into.
void expect_every_key_accounted(const ImportResult& r, const nlohmann::json& j,
                                const std::string& prefix, int depth) {
  for (const auto& [k, v] : j.items()) {
    std::string key = prefix.empty() ? k : prefix + "." + k;
    if (depth > 1 && v.is_object() && (k == "network" || k == "filesystem" || k == "credentials")) {
      expect_every_key_accounted(r, v, key, depth - 1);
      continue;
    }
    bool found = false;
    for (const auto& [path, from] : r.origin) {
      (void)path;
      found = found || from.rfind(key, 0) == 0;
    }
    for (const auto& n : r.notes) {
      found = found || n.rfind(key, 0) == 0;
    }
    for (const auto& u : r.unmapped) {
      found = found || u.key.rfind(key, 0) == 0;
    }
    EXPECT_TRUE(found) << key << " is neither mapped, noted nor listed";
  }
}

TEST(SrtImport, RealWorldSettingsBecomeAPolicyThatSaysTheSame) {
  ImportResult r = import_file(Format::Srt, data("srt-settings.json"), "");
  Policy p = load(r, "srt-settings.json", "sandbox-runtime settings");
  EXPECT_TRUE(contains(p.network.allow, "github.com"));
  EXPECT_TRUE(contains(p.network.allow, "*.github.com"));
  EXPECT_TRUE(contains(p.network.allow, "api.anthropic.com:443"));
  EXPECT_TRUE(contains(p.network.deny, "uploads.github.com"));
  EXPECT_TRUE(contains(p.filesystem.deny, "/etc/cordon-import-secret"));
  EXPECT_TRUE(contains(p.filesystem.deny, "~/.ssh"));
  // cordon's own secrets stay denied next to the imported ones.
  EXPECT_TRUE(contains(p.filesystem.deny, "**/*.pem"));
  EXPECT_TRUE(contains(p.filesystem.read, "/opt/tools"));
  EXPECT_TRUE(contains(p.filesystem.write, "/srv/cache"));
  EXPECT_TRUE(contains(p.filesystem.deny_write, ".env"));
  // srt's mandatory deny paths, beneath the workspace and beneath the write grant.
  EXPECT_TRUE(contains(p.filesystem.deny_write, "**/.git/hooks"));
  EXPECT_TRUE(contains(p.filesystem.deny_write, "**/.git/config"));
  EXPECT_TRUE(contains(p.filesystem.deny_write, "**/.bashrc"));
  EXPECT_TRUE(contains(p.filesystem.deny_write, "/srv/cache/**/.bashrc"));
  EXPECT_TRUE(contains(p.process.env.deny, "AWS_SECRET_ACCESS_KEY"));
  EXPECT_TRUE(contains(p.process.env.deny, "*TOKEN*"));

  std::string words = explain(p);
  EXPECT_NE(words.find("allow api.anthropic.com port 443"), std::string::npos) << words;
  EXPECT_NE(words.find("deny uploads.github.com"), std::string::npos) << words;
  EXPECT_NE(words.find("/etc/cordon-import-secret"), std::string::npos) << words;

  EXPECT_TRUE(listed(r, "telemetryLevel", /*unknown=*/true));
  EXPECT_TRUE(listed(r, "network.deniedDomainReasons"));
  EXPECT_TRUE(listed(r, "ignoreViolations"));
  EXPECT_TRUE(listed(r, "credentials.envVars[1]"));   // mask: needs the secret at run time
  EXPECT_TRUE(listed(r, "filesystem.allowRead[0]"));  // inside a denyRead: deny wins in cordon
  std::ifstream in(data("srt-settings.json"));
  expect_every_key_accounted(r, nlohmann::json::parse(in), "", 2);
}

TEST(SrtImport, RenderedPolicyNamesTheOriginOfEachEntry) {
  ImportResult r = import_text(Format::Srt,
                               R"({"network": {"allowedDomains": ["pypi.org"]},
                                   "filesystem": {"denyRead": ["~/.kube"], "allowWrite": [],
                                                  "denyWrite": []}})",
                               "s.json", "");
  std::string text = render(r, "s.json", "sandbox-runtime settings");
  EXPECT_NE(text.find("\"pypi.org\"  // from network.allowedDomains[0]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("// from sandbox-runtime's mandatory deny paths"), std::string::npos);
  EXPECT_EQ(r.unmapped.size(), 0u) << report(r, "s.json", "srt");
}

TEST(SrtImport, AnEntryCordonRefusesIsListedWithTheLoadersReason) {
  ImportResult r = import_text(
      Format::Srt, R"({"network": {"allowedDomains": ["ok.test", "exa mple.com"]}})", "s.json", "");
  Policy p = load(r, "s.json", "srt");
  EXPECT_EQ(texts(p.network.allow), std::vector<std::string>{"ok.test"});
  ASSERT_TRUE(listed(r, "network.allowedDomains[1]"));
  EXPECT_NE(r.unmapped.back().why.find("exa mple.com"), std::string::npos) << r.unmapped.back().why;
}

// What an import made of `text`, or the PolicyError's message when it refused.
std::string import_error(Format f, std::string_view text, const LoadOptions& lo = {}) {
  try {
    (void)import_text(f, text, "s.json", "", lo);
  } catch (const PolicyError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(SrtImport, ADenyIsNeverWeakerAfterImport) {
  // A URL, spaces and a trailing dot still deny their host while the wildcard allow stays: the
  // host on every port, whatever the URL's port was.
  ImportResult r = import_text(Format::Srt, R"({"network": {
        "allowedDomains": ["*"],
        "deniedDomains": ["https://exfil.com", " leak.test ", "HTTPS://user@x.test:8443/up?q",
                          "http://[2001:db8::1]:80/", "drop.test/path", "dot.test."]}})",
                               "s.json", "");
  Policy p = load(r, "s.json", "srt");
  for (const char* host :
       {"exfil.com", "leak.test", "x.test", "2001:db8::1", "drop.test", "dot.test"}) {
    EXPECT_TRUE(contains(p.network.deny, host)) << host << "\n" << render(r, "s.json", "srt");
  }
  EXPECT_FALSE(p.network.decide_destination("exfil.com", 443).allow);
  EXPECT_FALSE(p.network.decide_destination("x.test", 443).allow);
  EXPECT_FALSE(p.network.decide_destination("leak.test", 80).allow);
  EXPECT_TRUE(p.network.decide_destination("fine.test", 443).allow);
  EXPECT_EQ(r.unmapped.size(), 0u) << report(r, "s.json", "srt");
  EXPECT_NE(render(r, "s.json", "srt").find("\"https://exfil.com\" is denied as \"exfil.com\""),
            std::string::npos);

  // One that no rewrite makes a host: the import fails, naming the key and the fix.
  std::string e = import_error(
      Format::Srt,
      R"({"network": {"allowedDomains": ["*"], "deniedDomains": ["ok.test", "exfil com"]}})");
  EXPECT_NE(e.find("s.json: network.deniedDomains[1]: the deny entry \"exfil com\" cannot be"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("import again"), std::string::npos) << e;
  e = import_error(Format::Srt, R"({"network": {"deniedDomains": ["https:///x"]}})");
  EXPECT_NE(e.find("network.deniedDomains[0]: the deny entry"), std::string::npos) << e;
  // An allow cordon cannot take is still only listed: leaving it out narrows the policy.
  r = import_text(Format::Srt, R"({"network": {"allowedDomains": ["ok.test", "bad host"]}})",
                  "s.json", "");
  EXPECT_TRUE(listed(r, "network.allowedDomains[1]"));
}

TEST(SrtImport, ADeniedPathIsNeverWeakerAfterImport) {
  TempDir home;
  ASSERT_EQ(::mkdir((home / "real").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("/etc", (home / "link").c_str()), 0);
  LoadOptions lo;
  lo.home = home.path();
  // ".." after a real directory (or a name not there) means what it says; a trailing space is
  // trimmed and the name as written stays denied too.
  ImportResult r = import_text(Format::Srt, R"({"filesystem": {
        "denyRead": ["~/real/../.aws", "/srv/none/../secret", "/etc/shadow-copy ", "/.."],
        "denyWrite": ["~/real/./../.npmrc"]},
      "credentials": {"envVars": [{"name": " GH_TOKEN ", "mode": "deny"}]}})",
                               "s.json", "", lo);
  Policy p = parse_policy(render(r, "s.json", "srt"), lo);
  EXPECT_TRUE(contains(p.filesystem.deny, "~/.aws"));
  EXPECT_TRUE(contains(p.filesystem.deny, "/srv/secret"));
  EXPECT_TRUE(contains(p.filesystem.deny, "/etc/shadow-copy"));
  EXPECT_TRUE(contains(p.filesystem.deny, "/etc/shadow-copy "));
  EXPECT_TRUE(contains(p.filesystem.deny, "/"));
  EXPECT_TRUE(contains(p.filesystem.deny_write, "~/.npmrc"));
  EXPECT_TRUE(contains(p.process.env.deny, "GH_TOKEN"));
  EXPECT_EQ(r.unmapped.size(), 0u) << report(r, "s.json", "srt");

  // ".." after a symlink is the target's parent, not the link's; after a glob, or above "~",
  // or in a workspace path, it cannot be checked: each fails the import by name.
  std::string e =
      import_error(Format::Srt, R"({"filesystem": {"denyRead": ["~/link/../.ssh"]}})", lo);
  EXPECT_NE(e.find("filesystem.denyRead[0]: the deny entry \"~/link/../.ssh\""), std::string::npos)
      << e;
  EXPECT_NE(e.find("is a symlink on this host"), std::string::npos) << e;
  e = import_error(Format::Srt, R"({"filesystem": {"denyRead": ["/x", "/srv/*/../key"]}})", lo);
  EXPECT_NE(e.find("filesystem.denyRead[1]: the deny entry"), std::string::npos) << e;
  EXPECT_NE(e.find("pattern segment \"*\""), std::string::npos) << e;
  e = import_error(Format::Srt, R"({"filesystem": {"denyWrite": ["~/../other"]}})", lo);
  EXPECT_NE(e.find("filesystem.denyWrite[0]: the deny entry"), std::string::npos) << e;
  e = import_error(Format::Srt, R"({"filesystem": {"denyWrite": ["src/../.env"]}})", lo);
  EXPECT_NE(e.find("workspace-relative"), std::string::npos) << e;
  e = import_error(Format::Srt, R"({"filesystem": {"denyRead": ["  "]}})", lo);
  EXPECT_NE(e.find("filesystem.denyRead[0]: the deny entry"), std::string::npos) << e;
}

TEST(CodexImport, ADenyIsNeverWeakerAfterImport) {
  const std::string head = "default_permissions = \"p\"\n[permissions.p.network]\nenabled = true\n";
  ImportResult r = import_text(Format::Codex,
                               head +
                                   "[permissions.p.network.domains]\n\"*\" = \"allow\"\n"
                                   "\"https://exfil.com/x\" = \"deny\"\n",
                               "c.toml", "");
  Policy p = load(r, "c.toml", "codex");
  EXPECT_TRUE(contains(p.network.deny, "exfil.com"));
  EXPECT_FALSE(p.network.decide_destination("exfil.com", 443).allow);
  std::string e = import_error(Format::Codex, head +
                                                  "[permissions.p.network.domains]\n"
                                                  "\"bad name\" = \"deny\"\n");
  EXPECT_NE(e.find("permissions.p.network.domains.\"bad name\": the deny entry"), std::string::npos)
      << e;
  // A workspace Codex makes unreachable cannot be said in cordon, which always shows it.
  e = import_error(Format::Codex,
                   "default_permissions = \"p\"\n"
                   "[permissions.p.filesystem]\n\":workspace_roots\" = \"none\"\n");
  EXPECT_NE(e.find("permissions.p.filesystem.\":workspace_roots\": "), std::string::npos) << e;
  EXPECT_NE(e.find("cordon always shows the workspace"), std::string::npos) << e;
  // include_only with only patterns keeps nothing in Codex; in cordon too, not the defaults.
  r = import_text(Format::Codex, "[shell_environment_policy]\ninclude_only = [\"AWS_*\"]\n",
                  "c.toml", "");
  EXPECT_TRUE(load(r, "c.toml", "codex").process.env.keep.empty());
}

TEST(ImportDetection, RunRefusesAFileWithADenyItCannotMap) {
  TempDir dir;
  std::string srt = dir / "srt.json";
  std::ofstream(srt) << R"({"network": {"allowedDomains": ["*"], "deniedDomains": ["a b"]}})";
  try {
    (void)load_policy_or_import(srt, LoadOptions{}, nullptr);
    FAIL() << "the import dropped a deny";
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find(srt + ": network.deniedDomains[0]: the deny entry"),
              std::string::npos)
        << e.what();
  }
}

TEST(SrtImport, HostileInputIsRefusedNamingTheFileAndTheKey) {
  auto refused = [](std::string_view text) -> std::string {
    try {
      (void)import_text(Format::Srt, text, "bad.json", "");
    } catch (const PolicyError& e) {
      return e.what();
    }
    return "accepted";
  };
  std::string e = refused(R"({"network": {"allowedDomains": ["a.test", 42]}})");
  EXPECT_NE(e.find("bad.json: network.allowedDomains[1]: expected domains"), std::string::npos)
      << e;
  e = refused(R"({"network": {"allowedDomains": "a.test"}})");
  EXPECT_NE(e.find("network.allowedDomains: expected a list"), std::string::npos) << e;
  e = refused(R"({"filesystem": {"allowGitConfig": "yes"}})");
  EXPECT_NE(e.find("filesystem.allowGitConfig: expected true or false"), std::string::npos) << e;
  e = refused(R"({"network": {"allowedDomains": [)");
  EXPECT_NE(e.find("bad.json: is not valid JSON: line 1"), std::string::npos) << e;
  e = refused(R"(["not", "an", "object"])");
  EXPECT_NE(e.find("expected the settings object"), std::string::npos) << e;
  e = refused(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_NE(e.find("nested deeper than 64"), std::string::npos) << e;
  e = refused(R"({"credentials": {"envVars": [{"name": "X", "mode": "steal"}]}})");
  EXPECT_NE(e.find("credentials.envVars[0].mode: \"steal\" is not a mode"), std::string::npos) << e;
  std::string big = "{\"x\": \"" + std::string(kMaxInputBytes, 'a') + "\"}";
  e = refused(big);
  EXPECT_NE(e.find("larger than 1 MiB"), std::string::npos) << e;
}

TEST(CodexImport, LegacySandboxSettingsWithTheSelectedProfile) {
  // The file's own `profile = "ci"` makes the sandbox read-only; [sandbox_workspace_write]
  // then does not apply and says so.
  ImportResult r = import_file(Format::Codex, data("codex-config.toml"), "");
  Policy p = load(r, "codex-config.toml", "Codex config.toml");
  EXPECT_EQ(p.filesystem.mode, WorkspaceMode::Ro);
  EXPECT_TRUE(p.filesystem.write.empty()) << texts(p.filesystem.write).size();
  EXPECT_TRUE(listed(r, "sandbox_workspace_write.writable_roots"));
  EXPECT_TRUE(listed(r, "profiles.dev"));
  EXPECT_TRUE(listed(r, "sandbox_telemetry", /*unknown=*/true));
  EXPECT_TRUE(listed(r, "mcp_servers"));
  EXPECT_TRUE(contains(p.process.env.deny, "*_TOKEN"));
  EXPECT_EQ(p.process.env.set.at("CI"), "1");
  EXPECT_TRUE(contains(p.process.env.keep, "PATH"));
  EXPECT_FALSE(contains(p.process.env.keep, "LANG"));  // include_only is the whole list

  // --profile dev: the top level's workspace-write applies with its writable roots.
  r = import_file(Format::Codex, data("codex-config.toml"), "dev");
  p = load(r, "codex-config.toml", "Codex config.toml");
  EXPECT_EQ(p.filesystem.mode, WorkspaceMode::Cow);
  EXPECT_TRUE(contains(p.filesystem.write, "/srv/build-cache"));
  EXPECT_TRUE(contains(p.filesystem.write, "~/.cache/pip"));
  EXPECT_TRUE(p.network.allow.empty());  // network_access = false
  EXPECT_TRUE(listed(r, "profiles.ci"));
  std::string words = explain(p);
  EXPECT_NE(words.find("read-write /srv/build-cache"), std::string::npos) << words;
}

TEST(CodexImport, PermissionProfileMapsFilesystemAndDomains) {
  ImportResult r = import_file(Format::Codex, data("codex-permissions.toml"), "");
  Policy p = load(r, "codex-permissions.toml", "Codex config.toml");
  EXPECT_TRUE(contains(p.network.allow, "api.openai.com"));
  EXPECT_TRUE(contains(p.network.allow, "github.com"));    // "**.github.com": the name ...
  EXPECT_TRUE(contains(p.network.allow, "*.github.com"));  // ... and every name beneath it
  EXPECT_TRUE(contains(p.network.deny, "tracking.example.com"));
  EXPECT_TRUE(contains(p.filesystem.deny, "/etc/cordon-import-secret"));
  EXPECT_TRUE(contains(p.filesystem.deny, "**/*.env"));
  EXPECT_TRUE(contains(p.filesystem.deny_write, ".devcontainer"));
  EXPECT_TRUE(contains(p.filesystem.read, "~/.gitconfig"));
  EXPECT_TRUE(contains(p.filesystem.write, "/srv/shared-lib"));
  EXPECT_EQ(p.filesystem.mode, WorkspaceMode::Cow);
  EXPECT_TRUE(listed(r, "permissions.review-only"));
  EXPECT_TRUE(listed(r, "model"));
}

TEST(CodexImport, AProfileCanSelectThePermissionProfile) {
  // The profile's keys come after the top level's; [permissions] is still read by its choice.
  ImportResult r = import_text(Format::Codex,
                               "[profiles.locked]\ndefault_permissions = \"p\"\n"
                               "[permissions.p.network]\nenabled = true\n"
                               "[permissions.p.network.domains]\n\"pypi.org\" = \"allow\"\n"
                               "[permissions.q.network]\nenabled = true\n",
                               "c.toml", "locked");
  EXPECT_EQ(texts(load(r, "c.toml", "codex").network.allow), std::vector<std::string>{"pypi.org"});
  EXPECT_TRUE(listed(r, "permissions.q"));
}

TEST(CodexImport, NetworkAccessAllowsAnyHostAndDangerFullAccessKeepsTheDefaults) {
  ImportResult r = import_text(Format::Codex,
                               "sandbox_mode = \"workspace-write\"\n"
                               "[sandbox_workspace_write]\nnetwork_access = true\n",
                               "c.toml", "");
  EXPECT_EQ(texts(load(r, "c.toml", "codex").network.allow), std::vector<std::string>{"*"});
  r = import_text(Format::Codex, "sandbox_mode = \"danger-full-access\"\n", "c.toml", "");
  Policy p = load(r, "c.toml", "codex");
  EXPECT_TRUE(p.network.allow.empty());
  EXPECT_EQ(p.filesystem.mode, WorkspaceMode::Cow);
  EXPECT_TRUE(listed(r, "sandbox_mode"));
}

TEST(CodexImport, HostileInputIsRefusedNamingTheFileAndTheKey) {
  auto refused = [](std::string_view text, const std::string& profile = "") -> std::string {
    try {
      (void)import_text(Format::Codex, text, "config.toml", profile);
    } catch (const PolicyError& e) {
      return e.what();
    }
    return "accepted";
  };
  std::string e = refused("sandbox_mode = \n");
  EXPECT_NE(e.find("config.toml: is not valid TOML: line 1"), std::string::npos) << e;
  e = refused("sandbox_mode = 3\n");
  EXPECT_NE(e.find("config.toml: sandbox_mode: expected a string, got an integer"),
            std::string::npos)
      << e;
  e = refused("sandbox_mode = \"open\"\n");
  EXPECT_NE(e.find("\"open\" is not a sandbox mode (accepted: read-only"), std::string::npos) << e;
  e = refused(
      "sandbox_mode = \"workspace-write\"\n[sandbox_workspace_write]\nwritable_roots = [1]\n");
  EXPECT_NE(e.find("sandbox_workspace_write.writable_roots[0]: expected a string"),
            std::string::npos)
      << e;
  e = refused("model = \"x\"\n", "nope");
  EXPECT_NE(e.find("profiles.nope: no such profile"), std::string::npos) << e;
  e = refused("default_permissions = \"p\"\n[permissions.p.filesystem]\n\"/x\" = \"rw\"\n");
  EXPECT_NE(e.find("permissions.p.filesystem.\"/x\": \"rw\" is not an access"), std::string::npos)
      << e;
  e = refused("a = " + std::string(5000, '[') + std::string(5000, ']') + "\n");
  EXPECT_NE(e.find("nested deeper than 64"), std::string::npos) << e;
  std::string dotted = "a";
  for (int i = 0; i < 10000; ++i) {
    dotted += ".a";
  }
  e = refused(dotted + " = 1\n");
  EXPECT_NE(e.find("line 1: a key of more than 64 dotted parts"), std::string::npos) << e;
  // Non-ASCII outside strings and comments is invalid TOML, refused before toml++ sees it (its
  // whitespace test has undefined behaviour there); inside them it is fine.
  e = refused("model = \"x\"\n\xc5\x8d = 1\n");
  EXPECT_NE(e.find("config.toml: is not accepted as TOML: line 2: a non-ASCII character"),
            std::string::npos)
      << e;
  EXPECT_EQ(refused("model = \"\xc5\x8d\"  # \xc5\x8d\nnotify = \"\"\"\n\xc5\x8d\n\"\"\"\n"),
            "accepted");
}

TEST(ImportDetection, DecidesByKeysAndRefusesAMixture) {
  EXPECT_EQ(detect_format(R"({"network": {"allow": ["a.test"]}})", "p.json"), Format::Cordon);
  EXPECT_EQ(detect_format(R"({"version": 1})", "p.json"), Format::Cordon);
  EXPECT_EQ(detect_format("{}", "p.json"), Format::Cordon);
  EXPECT_EQ(detect_format(R"({"network": {"allowedDomains": []}, "filesystem": {}})", "s.json"),
            Format::Srt);
  EXPECT_EQ(detect_format(R"({"filesystem": {"denyRead": ["~/.ssh"]}})", "s.json"), Format::Srt);
  EXPECT_EQ(detect_format("sandbox_mode = \"read-only\"\n", "config.toml"), Format::Codex);
  // Not JSON and not TOML: the loader's JSON error is the clearer one, unless it says .toml.
  EXPECT_EQ(detect_format("{ nope", "p.json"), Format::Cordon);
  EXPECT_EQ(detect_format("{ nope", "config.toml"), Format::Codex);
  // cordon's default policy is never mistaken for anything else.
  EXPECT_EQ(detect_format(default_policy_text(), "default.json"), Format::Cordon);
  try {
    (void)detect_format(R"({"network": {"allow": ["a"], "allowedDomains": ["b"]}})", "m.json");
    FAIL() << "a mixture was accepted";
  } catch (const PolicyError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("m.json: has keys of a cordon policy (network.allow)"), std::string::npos)
        << what;
    EXPECT_NE(what.find("network.allowedDomains"), std::string::npos) << what;
  }
}

TEST(ImportDetection, LoadPolicyOrImportSaysOneLineForAnImportedFile) {
  TempDir dir;
  std::string srt = dir / "srt.json";
  std::ofstream(srt) << R"({"network": {"allowedDomains": ["pypi.org"], "mitmProxy": {}}})";
  std::optional<std::string> said;
  Policy p = load_policy_or_import(srt, LoadOptions{}, &said);
  EXPECT_EQ(texts(p.network.allow), std::vector<std::string>{"pypi.org"});
  ASSERT_TRUE(said);
  EXPECT_EQ(*said, srt +
                       " is a sandbox-runtime settings file; imported it (2 settings, 1 "
                       "without equivalent: see `cordon policy import srt " +
                       srt + "`)");

  std::string own = dir / "own.json";
  std::ofstream(own) << R"({"network": {"allow": ["pypi.org"]}})";
  said.reset();
  p = load_policy_or_import(own, LoadOptions{}, &said);
  EXPECT_FALSE(said);
  EXPECT_EQ(texts(p.network.allow), std::vector<std::string>{"pypi.org"});
}

}  // namespace
}  // namespace cordon::policy::import
