// `cordon policy import` and `cordon run --policy` with a sandbox-runtime or Codex file, through
// the built binary: the policy and the report it writes, the errors for hostile files, and an
// imported deny enforced in a real sandbox (a denied read, a host not allowed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/sink_netns.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string data(const std::string& name) { return source_path("tests/data/import/" + name); }

RunResult cordon(const std::vector<std::string>& args) {
  std::vector<std::string> argv{cordon_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

TEST(PolicyImport, SrtFileBecomesACommentedPolicyAndAReport) {
  auto r = cordon({"policy", "import", "srt", data("srt-settings.json")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"github.com\",  // from network.allowedDomains[0]"));
  EXPECT_THAT(r.out, HasSubstr("\"/etc/cordon-import-secret\"  // from filesystem.denyRead[2]"));
  EXPECT_THAT(r.out, HasSubstr("\"**/.git/hooks\",  // from sandbox-runtime's mandatory deny"));
  EXPECT_THAT(r.out,
              HasSubstr("\"~/.ssh\",  // from filesystem.denyRead[0] (and cordon's default)"));
  EXPECT_THAT(r.err, HasSubstr("29 settings, 9 without equivalent"));
  EXPECT_THAT(r.err, HasSubstr("  telemetryLevel: unknown key"));
  EXPECT_THAT(r.err, HasSubstr("  network.deniedDomainReasons: "));
  EXPECT_THAT(r.err, HasSubstr("  ignoreViolations: "));

  TempDir dir;
  r = cordon({"policy", "import", "srt", data("srt-settings.json"), "-o", dir / "p.json",
              "--report", dir / "report.txt"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(read_text(dir / "report.txt"), HasSubstr("telemetryLevel: unknown key"));
  r = cordon({"policy", "check", dir / "p.json"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  r = cordon({"policy", "explain", dir / "p.json"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("network: allow api.anthropic.com port 443 (network.allow[2])"));
  EXPECT_THAT(r.out, HasSubstr("network: deny uploads.github.com any port"));
  EXPECT_THAT(r.out, HasSubstr("never readable or writable: ~/.ssh"));
  EXPECT_THAT(r.out, HasSubstr("/etc/cordon-import-secret"));
}

TEST(PolicyImport, CodexFileWithAProfile) {
  auto r = cordon({"policy", "import", "codex", data("codex-config.toml"), "--profile", "dev"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(
      r.out, HasSubstr("\"/srv/build-cache\",  // from sandbox_workspace_write.writable_roots[0]"));
  EXPECT_THAT(r.err, HasSubstr("  sandbox_telemetry: unknown key"));
  EXPECT_THAT(r.err, HasSubstr("  profiles.ci: a profile not selected"));

  TempDir dir;
  r = cordon({"policy", "import", "codex", data("codex-permissions.toml"), "-o", dir / "p.json"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  r = cordon({"policy", "explain", dir / "p.json"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("allow api.openai.com any port"));
  EXPECT_THAT(r.out, HasSubstr("allow any subdomain of github.com"));
  EXPECT_THAT(r.out, HasSubstr("deny tracking.example.com"));
  EXPECT_THAT(r.out, HasSubstr("read-write /srv/shared-lib"));
}

TEST(PolicyImport, CheckAndExplainReadTheFilesThemselves) {
  auto r = cordon({"policy", "check", data("srt-settings.json")});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(data("srt-settings.json") +
                               " is a sandbox-runtime settings file; imported it (29 settings, 9 "
                               "without equivalent: see `cordon policy import srt "));
  r = cordon({"policy", "explain", data("codex-permissions.toml")});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("deny tracking.example.com"));
  EXPECT_THAT(r.err, HasSubstr("is a Codex config.toml; imported it"));
}

TEST(PolicyImport, HostileFilesAreRefusedNamingFileKeyAndFix) {
  TempDir dir;
  auto refused = [&](const std::string& name, const std::string& text, const char* format) {
    write_text(dir / name, text);
    return cordon({"policy", "import", format, dir / name});
  };
  auto r = refused("types.json", R"({"network": {"allowedDomains": ["a.test", 7]}})", "srt");
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr(dir / "types.json" + ": network.allowedDomains[1]: expected"));
  r = refused("broken.json", "{\"network\": ", "srt");
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr("broken.json: is not valid JSON: line 1"));
  r = refused("deep.json", std::string(5000, '[') + std::string(5000, ']'), "srt");
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr("deep.json: nested deeper than 64"));
  r = refused("huge.json", "{\"a\": \"" + std::string(2 << 20, 'x') + "\"}", "srt");
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr("huge.json: is larger than 1 MiB"));
  r = refused("bad.toml", "sandbox_mode = [\n", "codex");
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr("bad.toml: is not valid TOML: line"));
  r = refused("mode.toml", "sandbox_mode = \"wide-open\"\n", "codex");
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr("mode.toml: sandbox_mode: \"wide-open\" is not a sandbox mode"));
  r = cordon({"policy", "import", "codex", data("codex-config.toml"), "--profile", "nope"});
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr("profiles.nope: no such profile; the file defines: ci, dev"));
  r = cordon({"policy", "import", "srt", dir / "missing.json"});
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.err, HasSubstr(dir / "missing.json" + ": cannot open it"));
  // Usage errors: 125 like cordon's other usage errors.
  r = cordon({"policy", "import", "bwrap", data("srt-settings.json")});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_THAT(r.err, HasSubstr("accepted: srt for sandbox-runtime's settings, codex"));
  r = cordon({"policy", "import", "srt", data("srt-settings.json"), "--profile", "x"});
  EXPECT_EQ(r.exit_code(), 125);
}

TEST(PolicyImport, AFileWithKeysOfBothKindsIsRefused) {
  SandboxFixture f;
  TempDir dir;
  write_text(dir / "mixed.json",
             R"({"network": {"allow": ["a.test"]}, "filesystem": {"denyRead": ["~/.ssh"]}})");
  auto r = f.run({"-q", "--policy", dir / "mixed.json"}, {"/bin/true"});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_THAT(r.err, HasSubstr("mixed.json: has keys of a cordon policy (network.allow) and of "
                               "sandbox-runtime's settings (filesystem.denyRead)"));
}

// A deny is never weaker after import: a URL becomes its host, and one that cannot be put in
// cordon's syntax fails `policy import` and `run --policy` alike, before any sandbox exists.
TEST(PolicyImport, ADenyThatCannotBeMappedFailsTheImportAndTheRun) {
  TempDir dir;
  write_text(dir / "url.json",
             R"({"network": {"allowedDomains": ["*"], "deniedDomains": ["https://exfil.com/x"]}})");
  auto r = cordon({"policy", "explain", dir / "url.json"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("network: deny exfil.com any port"));

  write_text(dir / "bad.json",
             R"({"network": {"allowedDomains": ["*"], "deniedDomains": ["exfil com"]}})");
  r = cordon({"policy", "import", "srt", dir / "bad.json"});
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr(dir / "bad.json" +
                               ": network.deniedDomains[0]: the deny entry \"exfil com\" cannot "
                               "be put in cordon's syntax"));
  SandboxFixture f;
  r = f.run({"-q", "--policy", dir / "bad.json"}, {"/bin/echo", "ran"});
  EXPECT_EQ(r.exit_code(), 125) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("ran")));
  EXPECT_THAT(r.err, HasSubstr("network.deniedDomains[0]: the deny entry \"exfil com\""));
}

// The imported denies hold in a real sandbox: a denyRead path inside an allowRead grant is
// unreadable, and a host not in allowedDomains is refused by the proxy before anything leaves
// (as root, SinkNetns counts what would have).
TEST(PolicyImport, RunEnforcesAnImportedSrtFile) {
  std::unique_ptr<SinkNetns> sink;
  if (::geteuid() == 0) {
    sink = std::make_unique<SinkNetns>();
    CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  }
  SandboxFixture f;
  TempDir grant;
  write_text(grant / "public.txt", "public-words\n");
  write_text(grant / "secret.txt", "secret-words\n");
  TempDir dir;
  const std::string srt = dir / "srt-settings.json";
  write_text(srt, R"({
    "network": {"allowedDomains": ["api.test"], "deniedDomains": []},
    "filesystem": {"allowRead": [")" +
                      grant.path() + R"("], "denyRead": [")" + (grant / "secret.txt") +
                      R"("], "allowWrite": ["."], "denyWrite": []}
  })");
  auto r = f.run({"-q", "--policy", srt},
                 {"/bin/sh", "-c",
                  "cat '" + (grant / "public.txt") + "'; cat '" + (grant / "secret.txt") +
                      "' || echo secret-refused; curl -sS -m 20 --noproxy '*' "
                      "http://198.51.100.7:8080/; echo \" raw=$?\""});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("public-words"));
  EXPECT_THAT(r.out, Not(HasSubstr("secret-words")));
  EXPECT_THAT(r.out, HasSubstr("secret-refused"));
  EXPECT_THAT(r.out, HasSubstr("198.51.100.7:8080 is not in network.allow")) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("cordon: " + srt +
                               " is a sandbox-runtime settings file; imported it (6 settings, 0 "
                               "without equivalent: see `cordon policy import srt " +
                               srt + "`)"));
  if (sink) {
    EXPECT_EQ(sink->hits(), 0);
  }
}

}  // namespace
}  // namespace cordon::testing
