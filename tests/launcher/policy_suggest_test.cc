// `cordon policy suggest`, for real: a session refused a loopback HTTP server's name and port and a
// host directory outside the workspace; the suggestions, applied to the policy file, make the same
// run pass with no refusal in its record, and they hold exactly the entries it needed. Also
// --tighten, a session with nothing to suggest, the built-in protection, and an unknown id.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/unique_fd.h"
#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A loopback HTTP server reached as api.test, a host directory the policy does not grant, and a
// policy file (with the user's own comments) that enables the network but allows neither.
class SuggestSession {
 public:
  SuggestSession() {
    ::mkdir((files_.path() + "/www").c_str(), 0755);
    write_text(files_.path() + "/www/hello.txt", "hello\n");
    up_ = std::make_unique<Upstreams>(std::vector<std::string>{"root=" + files_.path() + "/www"});
    write_text(host_.path() + "/data.txt", "host data\n");
    // As root the program runs as the workspace's owner (see make_workspace_owned).
    if (::geteuid() == 0) {
      (void)!::chown(host_.path().c_str(), SandboxFixture::kTestUid, SandboxFixture::kTestUid);
      f_.make_workspace_owned();
    }
    policy_ = f_.home() + "/p.json";
    write_text(policy_, std::string(kPolicy));
  }
  bool ok() const { return up_->ok(); }
  int port() const { return up_->port("http"); }
  std::string api() const { return "api.test:" + std::to_string(port()); }
  const std::string& host_dir() const { return host_.path(); }
  const std::string& policy() const { return policy_; }
  SandboxFixture& fixture() { return f_; }

  // Fetches from the server, reads the host file and (where cordon-fs views can serve a write
  // grant) creates a file next to it, then aims at the metadata address.
  RunResult run(bool metadata = false) {
    // The second curl ignores the proxy settings: its lookup is refused (the name is not
    // allowed), which asks for the same api.test:PORT, not a second entry.
    std::string script = "curl -sS -m 10 http://" + api() + "/hello.txt; curl -sS -m 10 " +
                         "--noproxy '*' http://" + api() + "/hello.txt; cat " + host_dir() +
                         "/data.txt; ";
    if (fs_views_here()) {
      script += "echo made > " + host_dir() + "/made.txt; ";
    }
    if (metadata) {
      script += "curl -sS -m 5 http://169.254.169.254/latest/; ";
    }
    RunSpec spec;
    spec.deadline = std::chrono::seconds(60);
    return f_.run({"-q", "--mode", "cow", "--policy", policy_}, {"/bin/sh", "-c", script + "true"},
                  spec);
  }
  RunResult cordon(const std::vector<std::string>& args) {
    std::vector<std::string> argv{cordon_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    RunSpec spec;
    spec.env = f_.env();
    return run_program(argv, spec);
  }
  nlohmann::json suggest_json(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"policy", "suggest", "last", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = cordon(args);
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  // The user's policy: the network on (an allow entry this program never uses), api.test pinned
  // to the loopback server, and every failed open recorded (the shim's all-opens mode), which is
  // what shows a host path that is not in the sandbox at all.
  static constexpr char kPolicy[] = R"({
  // my sandbox policy
  "version": 1,
  "network": {
    "allow": ["unused.test:443"],  // kept
    "resolve": {"api.test": "127.0.0.1"}
  },
  "process": {"env": {"set": {"CORDON_SHIM_FS_EVENTS": "all"}}}
}
)";

 private:
  TempDir files_, host_;
  std::unique_ptr<Upstreams> up_;
  SandboxFixture f_;
  std::string policy_;
};

// Every refusal of the newest session's record: net.refused, fs.refused, a denied lookup, and a
// failed open of a path outside the workspace.
std::vector<nlohmann::json> refusals(SandboxFixture& f, const std::string& host_dir) {
  std::vector<nlohmann::json> out;
  for (const auto& kind : {"net.refused", "fs.refused", "net.dns", "fs.open", "net.exfil"}) {
    for (auto& ev : f.last_events(kind)) {
      bool refused = ev.value("decision", "") == "deny" ||
                     (ev.contains("errno") && ev.value("path", "").rfind(host_dir, 0) == 0);
      if (refused) {
        out.push_back(ev);
      }
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> entries(const nlohmann::json& report) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& a : report["add"]) {
    out.emplace_back(a["field"].get<std::string>(), a["entry"].get<std::string>());
  }
  return out;
}

TEST(PolicySuggest, AppliedSuggestionsMakeTheSameRunPassWithNoRefusals) {
  SuggestSession s;
  ASSERT_TRUE(s.ok());
  auto first = s.run(/*metadata=*/true);
  EXPECT_THAT(first.out, Not(HasSubstr("hello"))) << first.err;
  EXPECT_THAT(first.out, HasSubstr("is not in network.allow")) << first.err;
  ASSERT_FALSE(refusals(s.fixture(), s.host_dir()).empty());

  nlohmann::json report = s.suggest_json();
  ASSERT_TRUE(report.is_object());
  // Exactly what the run needed: the name and port, and the directory (the write creates a file
  // there; the read beneath it needs nothing more) or, without a write, the file read.
  std::vector<std::pair<std::string, std::string>> want{{"network.allow", s.api()}};
  if (fs_views_here()) {
    want.emplace_back("filesystem.write", s.host_dir());
  } else {
    want.emplace_back("filesystem.read", s.host_dir() + "/data.txt");
  }
  EXPECT_EQ(entries(report), want) << report.dump(2);
  for (const auto& a : report["add"]) {
    EXPECT_GE(a["evidence"]["count"].get<int>(), 1);
    EXPECT_THAT(a["evidence"]["first_process"].get<std::string>(), HasSubstr("(pid "));
    EXPECT_FALSE(a["evidence"]["example"].get<std::string>().empty());
  }
  // The metadata address is listed as held back, never suggested.
  ASSERT_EQ(report["held_back"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["held_back"][0]["what"], "169.254.169.254:80");
  EXPECT_THAT(report["held_back"][0]["reason"].get<std::string>(),
              HasSubstr("refused by the built-in protection; not suggested"));

  auto text = s.cordon({"policy", "suggest", "last"});
  EXPECT_EQ(text.exit_code(), 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("network.allow += \"" + s.api() + "\""));
  EXPECT_THAT(text.out, HasSubstr("first process: curl (pid "));
  EXPECT_THAT(text.out, HasSubstr("example: GET http://" + s.api() + "/hello.txt"));

  auto apply = s.cordon({"policy", "suggest", "last", "--apply", s.policy()});
  EXPECT_EQ(apply.exit_code(), 0) << apply.err;
  std::string applied = read_text(s.policy());
  EXPECT_THAT(applied, HasSubstr("// my sandbox policy"));  // the user's comments stay
  EXPECT_THAT(applied, HasSubstr("\"unused.test:443\""));
  EXPECT_THAT(applied, HasSubstr("// cordon policy suggest "));
  auto check = s.cordon({"policy", "check", s.policy()});
  EXPECT_EQ(check.exit_code(), 0) << check.out << check.err << applied;

  auto second = s.run();
  EXPECT_EQ(second.exit_code(), 0) << second.err;
  EXPECT_EQ(second.out, "hello\nhello\nhost data\n") << second.err;
  EXPECT_EQ(refusals(s.fixture(), s.host_dir()), std::vector<nlohmann::json>{}) << applied;
  if (fs_views_here()) {
    EXPECT_EQ(read_text(s.host_dir() + "/made.txt"), "made\n");
  }
  nlohmann::json after = s.suggest_json();
  EXPECT_EQ(after["add"].size(), 0u) << after.dump(2);

  // --tighten on that session: the allow entry it never used, and only that one.
  nlohmann::json tight = s.suggest_json({"--tighten"});
  ASSERT_EQ(tight["unused"].size(), 1u) << tight.dump(2);
  EXPECT_EQ(tight["unused"][0]["field"], "network.allow[0]");
  EXPECT_EQ(tight["unused"][0]["entry"], "unused.test:443");
}

TEST(PolicySuggest, AnExecOutsideExecAllowIsSuggestedAsThatProgram) {
  SandboxFixture f;
  std::string p = f.home() + "/p.json";
  write_text(p, "{\"version\": 1, \"process\": {\"exec_allow\": [\"/usr/bin\"]}}\n");
  const std::vector<std::string> cmd{"/bin/sh", "-c", "/usr/sbin/ldconfig --version >/dev/null"};
  auto r = f.run({"-q", "--mode", "cow", "--policy", p}, cmd);
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_THAT(r.err, HasSubstr("not in process.exec_allow"));
  auto s =
      run_program({cordon_bin(), "policy", "suggest", "last", "--json"}, RunSpec{.env = f.env()});
  ASSERT_EQ(s.exit_code(), 0) << s.err;
  auto report = nlohmann::json::parse(s.out, nullptr, false);
  using Entries = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(entries(report), (Entries{{"process.exec_allow", "/usr/sbin/ldconfig"}})) << s.out;
  auto a = run_program({cordon_bin(), "policy", "suggest", "last", "--apply", p},
                       RunSpec{.env = f.env()});
  ASSERT_EQ(a.exit_code(), 0) << a.err;
  auto again = f.run({"-q", "--mode", "cow", "--policy", p}, cmd);
  EXPECT_EQ(again.exit_code(), 0) << again.err << read_text(p);
}

TEST(PolicySuggest, ASessionWithoutRefusalsSuggestsNothing) {
  SandboxFixture f;
  auto r = f.run({"-q", "--mode", "cow"}, {"/bin/sh", "-c", "echo fine"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto s = run_program({cordon_bin(), "policy", "suggest", "last"}, RunSpec{.env = f.env()});
  EXPECT_EQ(s.exit_code(), 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr(": nothing to suggest"));
  std::string p = f.home() + "/p.json";
  write_text(p, "{\"version\": 1}\n");
  auto a = run_program({cordon_bin(), "policy", "suggest", "last", "--apply", p},
                       RunSpec{.env = f.env()});
  EXPECT_EQ(a.exit_code(), 0) << a.err;
  EXPECT_THAT(a.err, HasSubstr("left unchanged"));
  EXPECT_EQ(read_text(p), "{\"version\": 1}\n");
}

// One suggestion no policy may hold (a bare "localhost"), a metadata name and a host socket in
// the record: each is listed as not suggested, and --apply adds the rest. The record is written
// by hand into a --state-dir, as a session leaves it.
TEST(PolicySuggest, OneInvalidEntryDoesNotStopTheOthersFromBeingApplied) {
  TempDir state, host;
  const std::string id = "20261127-100000-abcdef";
  const std::string dir = state / ("sessions/" + id);
  std::filesystem::create_directories(dir);
  write_text(dir + "/policy.json", "{\"version\": 1}\n");
  write_text(dir + "/summary.json", "{}\n");
  write_text(host / "data.csv", "a\n");
  const std::string sock = host / "agent.sock";
  {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    ASSERT_LT(sock.size(), sizeof sa.sun_path);
    std::memcpy(sa.sun_path, sock.c_str(), sock.size() + 1);
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  }
  std::string events;
  auto add = [&](nlohmann::json ev) {
    ev["ts"] = "2026-11-27T10:00:00.000000Z";
    ev["session"] = id;
    events += ev.dump() + "\n";
  };
  for (const char* name : {"localhost", "metadata.google.internal"}) {
    add({{"kind", "net.dns"},
         {"source", "netproxy"},
         {"decision", "deny"},
         {"name", name},
         {"type", "A"},
         {"rcode", "NXDOMAIN"},
         {"rule", "network.allow (no match)"}});
  }
  add({{"kind", "net.refused"},
       {"source", "netproxy"},
       {"name", "api.test"},
       {"port", 8443},
       {"decision", "deny"},
       {"rule", "network.allow (no match)"}});
  for (const auto& path : {sock, host / "data.csv"}) {
    add({{"kind", "fs.open"},
         {"source", "shim"},
         {"path", path},
         {"errno", ENOENT},
         {"flags", O_RDWR},
         {"pid", 7},
         {"exe", "/usr/bin/python3"}});
  }
  write_text(dir + "/events.jsonl", events);
  const std::string p = host / "p.json";
  write_text(p, "{\n  // mine\n  \"version\": 1\n}\n");

  auto r = run_program(
      {cordon_bin(), "policy", "suggest", id, "--state-dir", state.path(), "--apply", p});
  ASSERT_EQ(r.exit_code(), 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("  localhost: names the host's loopback; not suggested"));
  EXPECT_THAT(r.out, HasSubstr("  metadata.google.internal: a cloud metadata service's name"));
  EXPECT_THAT(r.out, HasSubstr("  " + sock +
                               ": not suggested: a socket grants a connection to a host service"));
  EXPECT_THAT(r.err, HasSubstr("added 2 entries"));
  const std::string applied = read_text(p);
  EXPECT_THAT(applied, HasSubstr("// mine"));
  EXPECT_THAT(applied, HasSubstr("\"api.test:8443\""));
  EXPECT_THAT(applied, HasSubstr("\"" + host / "data.csv" + "\""));
  EXPECT_THAT(applied, Not(HasSubstr("localhost")));
  EXPECT_THAT(applied, Not(HasSubstr("metadata.google.internal")));
  EXPECT_THAT(applied, Not(HasSubstr("agent.sock")));
  auto check = run_program({cordon_bin(), "policy", "check", p});
  EXPECT_EQ(check.exit_code(), 0) << check.err;
}

TEST(PolicySuggest, AnUnknownIdIsAClearError) {
  SandboxFixture f;
  auto r = f.run({"-q", "--mode", "cow"}, {"/bin/true"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto s = run_program({cordon_bin(), "policy", "suggest", "20000101-000000-abcdef"},
                       RunSpec{.env = f.env()});
  EXPECT_EQ(s.exit_code(), 125);
  EXPECT_THAT(s.err, HasSubstr("no session \"20000101-000000-abcdef\""));
  EXPECT_EQ(s.out, "");
  auto bad = run_program({cordon_bin(), "policy", "suggest", "../x"}, RunSpec{.env = f.env()});
  EXPECT_EQ(bad.exit_code(), 125);
  EXPECT_THAT(bad.err, HasSubstr("is not a session id"));
}

}  // namespace
}  // namespace cordon::testing
