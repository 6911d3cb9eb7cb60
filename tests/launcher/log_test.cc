// `cordon log` and `cordon ls` over real session directories: pretty and raw output, torn lines,
// hostile bytes, colour, filters; and the whole `cordon` binary after a real `cordon run`.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "launcher/session/session.h"
#include "policy/loader.h"
#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/sink_netns.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace cordon::launcher {
namespace {

using cordon::testing::TempDir;
using nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using cordon::testing::lines_of;

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("CORDON_STATE_DIR");
    had_old_ = old != nullptr;
    if (had_old_) {
      old_ = old;
    }
    state_ = tmp_ / "state";
    ASSERT_EQ(::setenv("CORDON_STATE_DIR", state_.c_str(), 1), 0);
    root_ = state_ + "/sessions";
  }
  void TearDown() override {
    if (had_old_) {
      ::setenv("CORDON_STATE_DIR", old_.c_str(), 1);
    } else {
      ::unsetenv("CORDON_STATE_DIR");
    }
  }

  // A finished session with a launcher start/end around netproxy and fusefs events.
  Session make_session(bool finish = true) {
    auto s = Session::create(policy::default_policy(), {"curl", "https://example.test/"}, "/w");
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().to_string());
    Session session = std::move(s).value();
    EXPECT_TRUE(session.started(99, "limits: rlimits only").ok());
    auto proxy = record::EventLog::open(session.paths().events, session.id(), "netproxy", {});
    EXPECT_TRUE(proxy.ok());
    EXPECT_TRUE(proxy
                    ->emit("net.connect", {{"decision", "allow"},
                                           {"rule", "network.allow[0]"},
                                           {"host", "example.test"},
                                           {"port", 443},
                                           {"pid", 12}})
                    .ok());
    EXPECT_TRUE(proxy
                    ->emit("net.refused", {{"decision", "deny"},
                                           {"rule", "network.allow (no match)"},
                                           {"host", "evil.test"},
                                           {"port", 80}})
                    .ok());
    auto fs = record::EventLog::open(session.paths().events, session.id(), "fusefs", {});
    EXPECT_TRUE(fs.ok());
    EXPECT_TRUE(fs->emit("fs.refused", {{"decision", "deny"},
                                        {"rule", "filesystem.deny[0]"},
                                        {"path", "/home/u/.ssh/id_rsa"},
                                        {"op", "open"}})
                    .ok());
    if (finish) {
      SessionEnd end;
      end.exit_code = 3;
      end.duration = std::chrono::milliseconds(2500);
      EXPECT_TRUE(session.finish(end).ok());
    }
    return session;
  }

  int log(const std::string& id, const LogOptions& opts, std::string* out, std::string* err) {
    std::ostringstream o, e;
    int rc = log_command(root_, id, opts, o, e);
    *out = o.str();
    *err = e.str();
    return rc;
  }

  TempDir tmp_;
  std::string state_, root_, old_;
  bool had_old_ = false;
};

TEST_F(LogTest, PrettyOneLinePerEvent) {
  Session s = make_session();
  std::string out, err;
  ASSERT_EQ(log("last", {}, &out, &err), 0) << err;
  auto lines = lines_of(out);
  ASSERT_EQ(lines.size(), 5u) << out;
  EXPECT_NE(lines[0].find("launcher  session.start"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("argv=[\"curl\",\"https://example.test/\"]"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("netproxy  net.connect     allow  rule=network.allow[0]  "
                          "host=example.test  port=443  pid=12"),
            std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find("net.refused     deny   rule=\"network.allow (no match)\"  "
                          "host=evil.test  port=80"),
            std::string::npos)
      << lines[2];
  EXPECT_NE(lines[3].find("fusefs    fs.refused      deny   rule=filesystem.deny[0]  "
                          "path=/home/u/.ssh/id_rsa  op=open"),
            std::string::npos)
      << lines[3];
  EXPECT_NE(lines[4].find("session.end"), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("exit_code=3"), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("duration=2.5s"), std::string::npos) << "human units: " << lines[4];
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << "no colour unless asked";
  // Local wall-clock time first: HH:MM:SS.mmm
  EXPECT_EQ(lines[0][2], ':');
  EXPECT_EQ(lines[0][8], '.');
}

TEST_F(LogTest, JsonPrintsRawLinesUnchanged) {
  Session s = make_session();
  std::string out, err;
  LogOptions opts;
  opts.json = true;
  ASSERT_EQ(log(s.id(), opts, &out, &err), 0) << err;
  EXPECT_EQ(out, slurp(s.paths().events));
}

TEST_F(LogTest, TornAndMalformedLinesDoNotStopTheListing) {
  Session s = make_session(false);
  {
    std::ofstream f(s.paths().events, std::ios::app | std::ios::binary);
    f << "this is not json\n";
    f << "{\"kind\":\"net.dns\",\"source\":\"netproxy\",\"ts\":\"x\"}\n";
    f << "{\"kind\":\"fs.op";  // the writer died here
  }
  std::string out, err;
  ASSERT_EQ(log(s.id().substr(0, 18), {}, &out, &err), 0) << err;
  auto lines = lines_of(out);
  ASSERT_EQ(lines.size(), 7u) << out;
  EXPECT_EQ(lines[4], "(unparseable line 5)");
  EXPECT_NE(lines[5].find("net.dns"), std::string::npos) << lines[5];
  EXPECT_EQ(lines[6], "(unparseable line 7)");

  LogOptions opts;
  opts.json = true;
  ASSERT_EQ(log(s.id(), opts, &out, &err), 0) << err;
  EXPECT_EQ(out, slurp(s.paths().events) + "\n") << "raw, the torn tail newline-terminated";
}

TEST_F(LogTest, DeepNestingAndHugeLinesAreRefusedNotFatal) {
  Session s = make_session(false);
  {
    std::ofstream f(s.paths().events, std::ios::app | std::ios::binary);
    // 200k levels would overflow the stack of a recursive printer.
    f << "{\"kind\":\"x\",\"a\":" << std::string(200000, '[') << std::string(200000, ']') << "}\n";
    // Longer than any line EventLog writes: skipped without being buffered.
    f << "{\"kind\":\"y\",\"a\":\"" << std::string(3u << 20, 'a') << "\"}\n";
    // Thousands of fields: the pretty line is capped.
    json many = {{"kind", "z"}};
    for (int i = 0; i < 5000; ++i) {
      many["k" + std::to_string(i)] = i;
    }
    f << many.dump() << "\n";
    f << R"({"kind":"after","ts":"2026-11-22T10:57:47.123456Z"})"
         "\n";
  }
  std::string out, err;
  LogOptions raw;
  raw.json = true;
  ASSERT_EQ(log(s.id(), raw, &out, &err), 0) << err;
  EXPECT_EQ(out, slurp(s.paths().events)) << "--json passes even these through unchanged";
  ASSERT_EQ(log(s.id(), {}, &out, &err), 0) << err;
  auto lines = lines_of(out);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[4], "(unparseable line 5)");
  EXPECT_EQ(lines[5], "(unparseable line 6)");
  EXPECT_NE(lines[6].find("  z  "), std::string::npos);
  EXPECT_LT(lines[6].size(), 4200u);
  EXPECT_NE(lines[7].find("after"), std::string::npos);
}

TEST_F(LogTest, HostileBytesNeverReachTheTerminal) {
  Session s = make_session(false);
  auto shim = record::EventLog::open(s.paths().events, s.id(), "shim", {});
  ASSERT_TRUE(shim.ok());
  // A sandboxed program controls paths and names: an OSC title change, CSI, C1 CSI, a newline.
  ASSERT_TRUE(shim->emit("fs.open", {{"path",
                                      "a\x1b]0;owned\x07"
                                      "b\x1b[2Jc\xc2\x9b"
                                      "31md\ne"},
                                     {"exe\x1b[1m", "x"}})
                  .ok());
  ASSERT_TRUE(shim->emit("net.http", {{"url", "/say \"hi\""}}).ok());
  std::string out, err;
  LogOptions opts;
  opts.color = true;
  ASSERT_EQ(log(s.id(), opts, &out, &err), 0) << err;
  auto lines = lines_of(out);
  ASSERT_EQ(lines.size(), 6u) << "the embedded newline did not split the event: " << out;
  EXPECT_NE(lines[5].find(R"(url="/say \"hi\"")"), std::string::npos) << lines[5];
  const std::string& l = lines[4];
  EXPECT_EQ(l.find('\x1b'), std::string::npos) << l;
  EXPECT_EQ(l.find('\x07'), std::string::npos) << l;
  EXPECT_EQ(l.find("\xc2\x9b"), std::string::npos) << l;
  EXPECT_NE(l.find("path=a\\x1b]0;owned\\x07b\\x1b[2Jc\\u009b31md\\x0ae"), std::string::npos) << l;
}

TEST_F(LogTest, ColourOnlyWhenAsked) {
  Session s = make_session();
  std::string out, err;
  LogOptions opts;
  opts.color = true;
  ASSERT_EQ(log(s.id(), opts, &out, &err), 0) << err;
  auto lines = lines_of(out);
  EXPECT_NE(lines[1].find("\x1b[32mallow\x1b[0m"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("\x1b[31mdeny \x1b[0m"), std::string::npos) << lines[2];
}

TEST_F(LogTest, NoColorAndPipesGetPlainText) {
  // log_command(id, json) decides on colour itself; under gtest stdout is not a tty, and
  // NO_COLOR is honoured regardless. Run the real binary so stdout can be captured.
  make_session();
  std::string cordon = cordon::testing::build_path("launcher/cordon");
  CORDON_REQUIRE(::access(cordon.c_str(), X_OK) == 0, "the cordon binary built");
  cordon::testing::RunSpec spec;
  auto r = cordon::testing::run_program({cordon, "log", "last"}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_NE(r.out.find("net.refused"), std::string::npos) << r.out;
}

TEST_F(LogTest, FilterByKindSourceDecision) {
  Session s = make_session();
  std::string out, err;
  LogOptions opts;
  opts.filter.kind_prefixes = {"net."};
  ASSERT_EQ(log(s.id(), opts, &out, &err), 0) << err;
  auto lines = lines_of(out);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_NE(lines[0].find("net.connect"), std::string::npos);
  EXPECT_NE(lines[1].find("net.refused"), std::string::npos);

  opts.filter = {};
  opts.filter.decision = "deny";
  opts.json = true;
  ASSERT_EQ(log(s.id(), opts, &out, &err), 0) << err;
  lines = lines_of(out);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_EQ(json::parse(lines[0])["kind"], "net.refused");
  EXPECT_EQ(json::parse(lines[1])["kind"], "fs.refused");

  opts.filter = {};
  opts.filter.source = "launcher";
  opts.json = false;
  ASSERT_EQ(log(s.id(), opts, &out, &err), 0) << err;
  EXPECT_EQ(lines_of(out).size(), 2u) << out;
}

TEST_F(LogTest, UnknownAndTraversingIdsFail) {
  make_session();
  std::string out, err;
  EXPECT_EQ(log("19990101", {}, &out, &err), 1);
  EXPECT_NE(err.find("cordon: no session \"19990101\""), std::string::npos) << err;
  EXPECT_EQ(log("../../etc", {}, &out, &err), 1);
  EXPECT_NE(err.find("is not a session id"), std::string::npos) << err;
  EXPECT_TRUE(out.empty());
}

TEST_F(LogTest, PlantedSymlinkIsNotFollowed) {
  Session s = make_session();
  std::string secret = tmp_ / "secret";
  { std::ofstream(secret) << "{\"kind\":\"secret.content\"}\n"; }
  ASSERT_EQ(::unlink(s.paths().events.c_str()), 0);
  ASSERT_EQ(::symlink(secret.c_str(), s.paths().events.c_str()), 0);
  std::string out, err;
  EXPECT_EQ(log(s.id(), {}, &out, &err), 1);
  EXPECT_EQ(out.find("secret.content"), std::string::npos) << out;
  EXPECT_NE(err.find("O_NOFOLLOW"), std::string::npos) << err;
}

TEST_F(LogTest, LsListsSessionsNewestLast) {
  {
    std::ostringstream o, e;
    EXPECT_EQ(ls_command(root_, o, e), 0);
    EXPECT_NE(o.str().find("no sessions yet"), std::string::npos) << o.str();
  }
  Session a = make_session();
  Session b = make_session(false);  // still running: this process holds its lock
  std::ostringstream o, e;
  ASSERT_EQ(ls_command(root_, o, e), 0) << e.str();
  auto lines = lines_of(o.str());
  ASSERT_EQ(lines.size(), 3u) << o.str();
  EXPECT_EQ(lines[0].rfind("ID", 0), 0u);
  for (const char* col : {"START", "DURATION", "EXIT", "SIZE", "PENDING", "COMMAND", "WORKSPACE"}) {
    EXPECT_NE(lines[0].find(col), std::string::npos) << col;
  }
  EXPECT_EQ(lines[1].rfind(a.id(), 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("2.5s"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(" 3 "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("curl https://example.test/"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("/w"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].rfind(b.id(), 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find(" running "), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("curl https://example.test/"), std::string::npos)
      << "command from session.start when there is no summary: " << lines[2];
}

TEST_F(LogTest, LsTruncatesLongCommands) {
  std::vector<std::string> argv = {"python3", "-c", std::string(300, 'x')};
  auto s = Session::create(policy::default_policy(), argv, "/w");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->started(1, "").ok());
  std::ostringstream o, e;
  ASSERT_EQ(ls_command(root_, o, e), 0);
  auto lines = lines_of(o.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_LT(lines[1].size(), 160u) << lines[1];
  EXPECT_NE(lines[1].find("python3 -c xxx"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("..."), std::string::npos) << lines[1];
}

// The proxy's refusal of a plain-HTTP request (as transparent.cc writes it) is a request too:
// `log --net` counts its method and cordon's 403 instead of "no plaintext HTTP requests".
TEST_F(LogTest, NetReportCountsRefusedPlainHttpRequests) {
  auto s = Session::create(policy::default_policy(), {"curl"}, "/w");
  ASSERT_TRUE(s.ok());
  auto proxy = record::EventLog::open(s->paths().events, s->id(), "netproxy", {});
  ASSERT_TRUE(proxy.ok());
  for (const char* method : {"GET", "GET", "POST"}) {
    ASSERT_TRUE(proxy
                    ->emit("net.refused", {{"name", "198.51.100.7"},
                                           {"address", "198.51.100.7"},
                                           {"port", 80},
                                           {"mode", "transparent"},
                                           {"decision", "deny"},
                                           {"rule", "network.allow (no match)"},
                                           {"peek", "http"},
                                           {"method", method},
                                           {"client", "10.0.2.1:40000"}})
                    .ok());
  }
  // A refused TLS connection has no method: not a plaintext request.
  ASSERT_TRUE(
      proxy
          ->emit("net.refused",
                 {{"name", "evil.test"}, {"port", 443}, {"decision", "deny"}, {"peek", "tls"}})
          .ok());
  LogOptions opts;
  opts.net = true;
  std::string out, err;
  ASSERT_EQ(log(s->id(), opts, &out, &err), 0) << err;
  EXPECT_EQ(out.find("no plaintext HTTP requests"), std::string::npos) << out;
  EXPECT_NE(out.find("Methods:\n  GET       2\n  POST      1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Statuses:\n  403 (refused by cordon) 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Refused (4):"), std::string::npos) << out;
}

// A refusal's program, from the net.attribution cordon writes at the session's end (joined by the
// proxy's client address): `log --net` names it on the refusal's line, and only on that one.
TEST_F(LogTest, NetReportNamesTheProgramOfARefusedConnection) {
  auto s = Session::create(policy::default_policy(), {"sh"}, "/w");
  ASSERT_TRUE(s.ok());
  auto proxy = record::EventLog::open(s->paths().events, s->id(), "netproxy", {});
  ASSERT_TRUE(proxy.ok());
  ASSERT_TRUE(proxy
                  ->emit("net.refused", {{"name", "198.51.100.7"},
                                         {"port", 80},
                                         {"decision", "deny"},
                                         {"client", "10.0.2.1:40000"}})
                  .ok());
  ASSERT_TRUE(proxy
                  ->emit("net.refused", {{"name", "evil.test"},
                                         {"port", 443},
                                         {"decision", "deny"},
                                         {"client", "10.0.2.1:40001"}})
                  .ok());
  auto launcher = record::EventLog::open(s->paths().events, s->id(), "launcher", {});
  ASSERT_TRUE(launcher.ok());
  ASSERT_TRUE(launcher
                  ->emit("net.attribution", {{"of", "net.refused"},
                                             {"client", "10.0.2.1:40000"},
                                             {"name", "198.51.100.7"},
                                             {"pid", 12},
                                             {"exe", "/usr/bin/curl"}})
                  .ok());
  LogOptions opts;
  opts.net = true;
  std::string out, err;
  ASSERT_EQ(log(s->id(), opts, &out, &err), 0) << err;
  size_t line = out.find("198.51.100.7:80");
  ASSERT_NE(line, std::string::npos) << out;
  EXPECT_NE(out.substr(line, out.find('\n', line) - line).find("by curl (pid 12)"),
            std::string::npos)
      << out;
  size_t other = out.find("evil.test:443");
  ASSERT_NE(other, std::string::npos) << out;
  EXPECT_EQ(out.substr(other, out.find('\n', other) - other).find(" by "), std::string::npos)
      << out;
}

// The same through the real proxy: a plain-HTTP GET to an address the policy does not allow,
// refused by cordon-netproxy (a 403 the client reads), shows up under Methods and Statuses.
TEST_F(LogTest, EndToEndRefusedPlainHttpGetIsCountedByLogNet) {
  std::string cordon = cordon::testing::build_path("launcher/cordon");
  CORDON_REQUIRE(::access(cordon.c_str(), X_OK) == 0, "the cordon binary built");
  std::unique_ptr<cordon::testing::SinkNetns> sink;
  if (::geteuid() == 0) {
    sink = std::make_unique<cordon::testing::SinkNetns>();
    CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  }
  TempDir ws;
  std::string policy = tmp_ / "p.json";
  { std::ofstream(policy) << R"({"version": 1, "network": {"allow": ["api.test:9"]}})"; }
  cordon::testing::RunSpec spec;
  spec.deadline = std::chrono::seconds(60);
  auto run = cordon::testing::run_program(
      {cordon, "run", "-q", "--mode", "ro", "-w", ws.path(), "--policy", policy, "--", "curl",
       "-sS", "-m", "20", "--noproxy", "*", "http://198.51.100.7/"},
      spec);
  ASSERT_FALSE(run.timed_out);
  EXPECT_NE(run.out.find("cordon: "), std::string::npos) << run.out << run.err;
  auto net = cordon::testing::run_program({cordon, "log", "last", "--net"}, spec);
  ASSERT_EQ(net.exit_code(), 0) << net.err;
  EXPECT_EQ(net.out.find("no plaintext HTTP requests"), std::string::npos) << net.out;
  EXPECT_NE(net.out.find("Methods:\n  GET       1\n"), std::string::npos) << net.out;
  EXPECT_NE(net.out.find("403 (refused by cordon) 1"), std::string::npos) << net.out;
  EXPECT_NE(net.out.find("by curl (pid "), std::string::npos) << net.out;
  if (sink) {
    EXPECT_EQ(sink->hits(), 0);
  }
}

// A real `cordon run` whose record has three writers at once (the launcher, cordon-netproxy
// refusing plain-HTTP GETs, cordon-fs refusing the workspace's .env where it serves cow): all of
// them chain through the record's head, and `cordon log last --verify` accepts every line.
TEST_F(LogTest, EndToEndEveryWriterChainsThroughTheHeadAndTheRecordVerifies) {
  std::string cordon = cordon::testing::build_path("launcher/cordon");
  CORDON_REQUIRE(::access(cordon.c_str(), X_OK) == 0, "the cordon binary built");
  std::unique_ptr<cordon::testing::SinkNetns> sink;
  if (::geteuid() == 0) {
    sink = std::make_unique<cordon::testing::SinkNetns>();
    CORDON_REQUIRE(sink->ok(), "the sink network namespace (ip, nft)");
  }
  TempDir ws;
  { std::ofstream(ws / ".env") << "SECRET=1\n"; }
  std::string policy = tmp_ / "p.json";
  { std::ofstream(policy) << R"({"version": 1, "network": {"allow": ["api.test:9"]}})"; }
  cordon::testing::RunSpec spec;
  spec.deadline = std::chrono::seconds(90);
  auto run = cordon::testing::run_program(
      {cordon, "run", "-q", "--mode", "cow", "-w", ws.path(), "--policy", policy, "--", "sh", "-c",
       "for i in 1 2 3 4 5 6 7 8; do curl -sS -m 10 --noproxy '*' http://198.51.100.7/$i "
       ">/dev/null 2>&1 & for j in 1 2 3 4 5; do cat .env >/dev/null 2>&1; done; done; wait; "
       // The record and its head stay outside: no fd or mapping of them in here.
       "ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c events.jsonl; "
       "cat /proc/[0-9]*/maps 2>/dev/null | grep -c events.jsonl; echo done"},
      spec);
  ASSERT_FALSE(run.timed_out);
  ASSERT_EQ(run.exit_code(), 0) << run.out << run.err;
  EXPECT_EQ(run.out, "0\n0\ndone\n") << run.err;

  auto last = resolve_session(root_, "last");
  ASSERT_TRUE(last.ok()) << last.error().to_string();
  const std::string dir = root_ + "/" + *last;
  struct stat st;
  ASSERT_EQ(::stat((dir + "/events.jsonl.head").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // Every writer mapped the head: none fell back to flock(2), which each would say on its stderr.
  for (const std::string& err :
       {run.err, slurp(dir + "/netproxy.log"), slurp(dir + "/cordon-fs.log")}) {
    EXPECT_EQ(err.find("under flock(2)"), std::string::npos) << err;
  }
  std::map<std::string, size_t> by_source;
  for (const auto& l : lines_of(slurp(dir + "/events.jsonl"))) {
    json j = json::parse(l, nullptr, false);
    ASSERT_TRUE(j.is_object()) << l;
    ++by_source[j.value("source", "")];
  }
  EXPECT_GE(by_source["launcher"], 2u);
  EXPECT_GE(by_source["netproxy"], 8u);  // a refusal per GET
  json sum = json::parse(slurp(dir + "/summary.json"));
  if (sum.value("cow_backend", "") == "cordon-fs") {
    EXPECT_GE(by_source["fusefs"], 40u);  // a refusal per cat
  } else {
    EXPECT_EQ(by_source["fusefs"], 0u);  // kernel overlayfs: no cordon-fs (rootless, no FUSE)
  }
  auto verify = cordon::testing::run_program({cordon, "log", "last", "--verify"}, spec);
  EXPECT_EQ(verify.exit_code(), 0) << verify.out << verify.err;
  size_t total = 0;
  for (const auto& [source, n] : by_source) {
    total += n;
  }
  EXPECT_NE(verify.out.find("verifies: " + std::to_string(total) + " lines"), std::string::npos)
      << verify.out << verify.err;
  EXPECT_EQ(verify.out.find("torn"), std::string::npos) << verify.out;
  if (sink) {
    EXPECT_EQ(sink->hits(), 0);
  }
}

// `ps aux` in the sandbox reads every /proc/N/environ it may not: one "Permission denied" record
// each. They are grouped (one line, with the count), not dropped, and a real refusal among them
// stays on its own line; --json keeps every record.
TEST_F(LogTest, BenignProcProbesAreGroupedNotDropped) {
  auto s = Session::create(policy::default_policy(), {"ps", "aux"}, "/w");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->started(1, "").ok());
  auto shim = record::EventLog::open(s->paths().events, s->id(), "shim", {});
  ASSERT_TRUE(shim.ok());
  auto probe = [&](int pid) {
    return shim->emit("fs.open", {{"path", "/proc/" + std::to_string(pid) + "/environ"},
                                  {"errno", EACCES},
                                  {"error", "Permission denied"},
                                  {"flags", 0},
                                  {"pid", 7},
                                  {"exe", "/usr/bin/ps"}});
  };
  for (int pid : {1, 2, 3}) {
    ASSERT_TRUE(probe(pid).ok());
  }
  auto fs = record::EventLog::open(s->paths().events, s->id(), "fusefs", {});
  ASSERT_TRUE(fs.ok());
  ASSERT_TRUE(fs->emit("fs.refused", {{"decision", "deny"},
                                      {"rule", "filesystem.deny[0]"},
                                      {"path", ".env"},
                                      {"op", "open"}})
                  .ok());
  for (int pid : {40, 41, 42, 43, 44}) {
    ASSERT_TRUE(probe(pid).ok());
  }
  // Not a probe: a path of cordon's choosing, or the program's own /proc/self.
  ASSERT_TRUE(shim->emit("fs.open", {{"path", "/proc/self/environ"}, {"errno", EACCES}}).ok());
  std::string out, err;
  ASSERT_EQ(log(s->id(), {}, &out, &err), 0) << err;
  auto lines = lines_of(out);
  ASSERT_EQ(lines.size(), 5u) << out;
  EXPECT_NE(lines[0].find("session.start"), std::string::npos) << out;
  EXPECT_NE(lines[1].find("path=/proc/1/environ"), std::string::npos) << out;
  EXPECT_NE(lines[1].find("(and 2 more like it: benign probes of /proc/*/environ, grouped"),
            std::string::npos)
      << out;
  EXPECT_NE(lines[2].find("fs.refused"), std::string::npos) << out;
  EXPECT_NE(lines[3].find("path=/proc/40/environ"), std::string::npos) << out;
  EXPECT_NE(lines[3].find("(and 4 more like it"), std::string::npos) << out;
  EXPECT_NE(lines[4].find("path=/proc/self/environ"), std::string::npos) << out;
  LogOptions json_opts;
  json_opts.json = true;
  ASSERT_EQ(log(s->id(), json_opts, &out, &err), 0) << err;
  EXPECT_EQ(lines_of(out).size(), 11u) << out;
}

// The whole binary: a real `cordon run`, then `cordon ls` and `cordon log last` see it.
TEST_F(LogTest, EndToEndRunThenLsAndLog) {
  std::string cordon = cordon::testing::build_path("launcher/cordon");
  CORDON_REQUIRE(::access(cordon.c_str(), X_OK) == 0, "the cordon binary built");
  TempDir ws;
  cordon::testing::RunSpec spec;
  spec.deadline = std::chrono::seconds(60);
  auto run =
      cordon::testing::run_program({cordon, "run", "--mode", cordon::testing::writable_mode(), "-w",
                                    ws.path(), "--", "sh", "-c", "exit 7"},
                                   spec);
  ASSERT_FALSE(run.timed_out);
  ASSERT_EQ(run.exit_code(), 7) << run.err;
  EXPECT_NE(run.err.find("cordon: session "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("ended: exit 7"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("cordon: log: cordon log "), std::string::npos) << run.err;

  auto last = resolve_session(root_, "last");
  ASSERT_TRUE(last.ok()) << last.error().to_string();
  EXPECT_NE(run.err.find(*last), std::string::npos) << "the summary names the session";

  auto ls = cordon::testing::run_program({cordon, "ls"}, spec);
  ASSERT_EQ(ls.exit_code(), 0) << ls.err;
  EXPECT_NE(ls.out.find(*last), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("sh -c 'exit 7'"), std::string::npos) << ls.out;

  auto lg = cordon::testing::run_program({cordon, "log", "last"}, spec);
  ASSERT_EQ(lg.exit_code(), 0) << lg.err;
  EXPECT_NE(lg.out.find("session.start"), std::string::npos) << lg.out;
  EXPECT_NE(lg.out.find("session.end"), std::string::npos) << lg.out;
  EXPECT_NE(lg.out.find("exit_code=7"), std::string::npos) << lg.out;

  auto js = cordon::testing::run_program({cordon, "log", "--json", "last"}, spec);
  ASSERT_EQ(js.exit_code(), 0) << js.err;
  for (const auto& l : lines_of(js.out)) {
    EXPECT_FALSE(json::parse(l, nullptr, false).is_discarded()) << l;
  }
  json sum = json::parse(slurp(root_ + "/" + *last + "/summary.json"));
  EXPECT_EQ(sum["exit_code"], 7);
  EXPECT_EQ(sum["events"]["by_kind"]["session.start"], 1);
}

// --verify over a real session record (launcher, netproxy and fusefs writers, summary.json), after
// the ways an editor of the file could hide something.
class VerifyTest : public LogTest {
 protected:
  void SetUp() override {
    LogTest::SetUp();
    session_ = std::make_unique<Session>(make_session());
    path_ = session_->paths().events;
    lines_ = lines_of(slurp(path_));
    ASSERT_EQ(lines_.size(), 5u);
  }
  void rewrite(const std::vector<std::string>& lines) {
    std::ofstream o(path_, std::ios::binary | std::ios::trunc);
    for (const auto& l : lines) {
      o << l << "\n";
    }
  }
  int verify(std::string* out) {
    std::ostringstream o, e;
    int rc = log_verify_command(root_, "last", o, e);
    *out = o.str() + e.str();
    return rc;
  }
  std::unique_ptr<Session> session_;
  std::string path_;
  std::vector<std::string> lines_;
};

TEST_F(VerifyTest, AnUntouchedSessionVerifiesAgainstItsSummary) {
  for (const auto& l : lines_) {
    json j = json::parse(l);
    EXPECT_EQ(j["v"], 1) << l;
    ASSERT_TRUE(j["chain"].is_string()) << l;
    EXPECT_EQ(j["chain"].get<std::string>().size(), 64u) << l;
  }
  json sum = json::parse(slurp(session_->paths().dir + "/summary.json"));
  EXPECT_EQ(sum["record"]["chain"]["lines"], 5);
  EXPECT_EQ(sum["record"]["chain"]["head"], json::parse(lines_[4])["chain"]);
  std::string out;
  EXPECT_EQ(verify(&out), kVerifyOk) << out;
  EXPECT_NE(out.find("verifies: 5 lines"), std::string::npos) << out;
  EXPECT_NE(out.find("as summary.json records"), std::string::npos) << out;
}

TEST_F(VerifyTest, AnEditedLineIsNamed) {
  auto at = lines_[2].find("evil.test");
  ASSERT_NE(at, std::string::npos) << lines_[2];
  lines_[2].replace(at, 9, "good.test");
  rewrite(lines_);
  std::string out;
  EXPECT_EQ(verify(&out), kVerifyBroken) << out;
  EXPECT_NE(out.find("line 3 does not match its chain value: it was edited"), std::string::npos)
      << out;
}

TEST_F(VerifyTest, ADeletedLineIsNamed) {
  lines_.erase(lines_.begin() + 1);
  rewrite(lines_);
  std::string out;
  EXPECT_EQ(verify(&out), kVerifyBroken) << out;
  EXPECT_NE(out.find("line 2 does not match its chain value: it was edited, or a line "
                     "before it was removed"),
            std::string::npos)
      << out;
}

TEST_F(VerifyTest, AReorderedPairIsNamed) {
  std::swap(lines_[2], lines_[3]);
  rewrite(lines_);
  std::string out;
  EXPECT_EQ(verify(&out), kVerifyBroken) << out;
  EXPECT_NE(out.find("line 3 is out of place: line 4 follows line 2"), std::string::npos) << out;
}

TEST_F(VerifyTest, ATruncatedTailIsCaughtBySummarysHead) {
  lines_.pop_back();
  rewrite(lines_);
  std::string out;
  EXPECT_EQ(verify(&out), kVerifyBroken) << out;
  EXPECT_NE(out.find("ends at line 4 with 4 chained lines"), std::string::npos) << out;
  EXPECT_NE(out.find("summary.json records 5"), std::string::npos) << out;
  EXPECT_NE(out.find("lines were removed from the end"), std::string::npos) << out;
}

TEST_F(VerifyTest, ALineWithoutAChainIsNamed) {
  lines_.insert(lines_.begin() + 2, R"({"kind":"net.connect","host":"x.test"})");
  rewrite(lines_);
  std::string out;
  EXPECT_EQ(verify(&out), kVerifyBroken) << out;
  EXPECT_NE(out.find("line 3 has no chain field"), std::string::npos) << out;
}

TEST_F(LogTest, VerifyReportsATornLastLineAsTornNotAsTampering) {
  Session s = make_session(false);  // running, or cordon killed: no summary.json
  {
    std::ofstream o(s.paths().events, std::ios::binary | std::ios::app);
    o << R"({"v":1,"kind":"fs.open","path":"/work)";
  }
  std::string out;
  std::ostringstream o, e;
  EXPECT_EQ(log_verify_command(root_, "last", o, e), kVerifyOk) << o.str() << e.str();
  out = o.str();
  EXPECT_NE(out.find("verifies: 4 lines"), std::string::npos) << out;
  EXPECT_NE(out.find("no summary.json"), std::string::npos) << out;
  EXPECT_NE(out.find("line 5 is torn"), std::string::npos) << out;

  // The next writer ends the fragment and chains to the last whole line: still no tampering.
  auto proxy = record::EventLog::open(s.paths().events, s.id(), "netproxy", {});
  ASSERT_TRUE(proxy.ok());
  ASSERT_TRUE(proxy->emit("net.dns", {{"name", "example.test"}}).ok());
  std::ostringstream o2, e2;
  EXPECT_EQ(log_verify_command(root_, "last", o2, e2), kVerifyOk) << o2.str() << e2.str();
  EXPECT_NE(o2.str().find("verifies: 5 lines"), std::string::npos) << o2.str();
  EXPECT_NE(o2.str().find("line 5 is torn"), std::string::npos) << o2.str();
  EXPECT_EQ(lines_of(slurp(s.paths().events)).size(), 6u);
}

TEST_F(LogTest, VerifyOfNoSuchSessionCannotCheck) {
  std::ostringstream o, e;
  EXPECT_EQ(log_verify_command(root_, "no-such-session", o, e), kVerifyCannotCheck);
  EXPECT_FALSE(e.str().empty());
}

TEST_F(LogTest, EndToEndEventsToAPipeSeesEachLineOnceInOrder) {
  std::string cordon = cordon::testing::build_path("launcher/cordon");
  CORDON_REQUIRE(::access(cordon.c_str(), X_OK) == 0, "the cordon binary built");
  TempDir ws;
  const std::string copy = tmp_ / "copy.jsonl";
  // fd 3 is a real pipe to a reader (cat); the program's own stdout stays apart on fd 4.
  std::string script = "{ '" + cordon + "' run --events-to 3 --mode " +
                       cordon::testing::writable_mode() + " -w '" + ws.path() +
                       "' --env-pass CORDON_TEST_PASSED -- sh -c 'for i in 1 2 3; do true; "
                       "done; exit 5' 3>&1 1>&4; } 4>&1 | cat > '" +
                       copy + "'; exit ${PIPESTATUS[0]}";
  cordon::testing::RunSpec spec;
  spec.deadline = std::chrono::seconds(60);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    env.emplace_back(*e);
  }
  env.emplace_back("CORDON_TEST_PASSED=1");
  spec.env = env;
  auto run = cordon::testing::run_program({"bash", "-c", script}, spec);
  ASSERT_FALSE(run.timed_out);
  ASSERT_EQ(run.exit_code(), 5) << run.err;
  auto last = resolve_session(root_, "last");
  ASSERT_TRUE(last.ok());
  const std::string record = slurp(root_ + "/" + *last + "/events.jsonl");
  const std::string shipped = slurp(copy);
  auto lines = lines_of(record);
  ASSERT_GE(lines.size(), 3u) << record;
  EXPECT_EQ(shipped, record) << "the pipe's reader saw each line once, in order, byte for byte";
  json sum = json::parse(slurp(root_ + "/" + *last + "/summary.json"));
  EXPECT_EQ(sum["record"]["events_to"]["target"], "3");
  EXPECT_EQ(sum["record"]["events_to"]["sent"], lines.size());
  EXPECT_EQ(sum["record"]["events_to"]["dropped"], 0);
  EXPECT_EQ(run.err.find("not delivered"), std::string::npos) << run.err;
}

TEST_F(LogTest, EndToEndASinkThatNeverReadsNeverHoldsUpTheSandbox) {
  std::string cordon = cordon::testing::build_path("launcher/cordon");
  CORDON_REQUIRE(::access(cordon.c_str(), X_OK) == 0, "the cordon binary built");
  TempDir ws;
  // The reader holds the pipe and never reads: the pipe fills at 64 KiB. Each refused variable
  // is an event of its own, so the record outgrows the pipe before the program starts.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    env.emplace_back(*e);
  }
  std::string keep;
  for (int i = 0; i < 400; ++i) {
    std::string name = "CORDON_TEST_" + std::to_string(i) + "_TOKEN";
    env.push_back(name + "=" + std::string(100, 'v'));
    keep += " --env-keep " + name;
  }
  std::string script = "'" + cordon + "' run --events-to 3 --mode " +
                       cordon::testing::writable_mode() + " -w '" + ws.path() + "'" + keep +
                       " -- sh -c 'exit 6' 3> >(sleep 30 >/dev/null 2>&1)";
  cordon::testing::RunSpec spec;
  spec.env = env;
  spec.deadline = std::chrono::seconds(25);  // less than the reader lives
  auto run = cordon::testing::run_program({"bash", "-c", script}, spec);
  ASSERT_FALSE(run.timed_out) << "cordon waited for a sink that never reads";
  ASSERT_EQ(run.exit_code(), 6) << run.err;
  auto last = resolve_session(root_, "last");
  ASSERT_TRUE(last.ok());
  auto lines = lines_of(slurp(root_ + "/" + *last + "/events.jsonl"));
  ASSERT_GT(lines.size(), 400u);
  json sum = json::parse(slurp(root_ + "/" + *last + "/summary.json"));
  const json& et = sum["record"]["events_to"];
  EXPECT_GT(et["dropped"].get<uint64_t>(), 0u) << sum.dump();
  EXPECT_EQ(et["sent"].get<uint64_t>() + et["dropped"].get<uint64_t>(), lines.size()) << sum.dump();
  EXPECT_NE(run.err.find("events not delivered; events.jsonl has them all"), std::string::npos)
      << run.err;
}

TEST_F(LogTest, EventsToABadTargetIsRefusedBeforeAnythingRuns) {
  std::string cordon = cordon::testing::build_path("launcher/cordon");
  CORDON_REQUIRE(::access(cordon.c_str(), X_OK) == 0, "the cordon binary built");
  auto run = cordon::testing::run_program({cordon, "run", "--events-to", "57", "--", "true"});
  EXPECT_EQ(run.exit_code(), 125) << run.err;
  EXPECT_NE(run.err.find("record.events_to (--events-to): \"57\": file descriptor 57"),
            std::string::npos)
      << run.err;
  EXPECT_FALSE(resolve_session(root_, "last").ok()) << "no session was started";
}

TEST_F(LogTest, EndToEndWatchFollowsARunningSessionOnATerminal) {
  std::string cordon = cordon::testing::build_path("launcher/cordon");
  CORDON_REQUIRE(::access(cordon.c_str(), X_OK) == 0, "the cordon binary built");
  for (bool no_color : {false, true}) {
    TempDir ws;
    std::vector<std::string> argv = {"python3",
                                     cordon::testing::source_path("tests/launcher/follow_pty.py"),
                                     cordon, ws.path(), cordon::testing::writable_mode()};
    if (no_color) {
      argv.push_back("no-color");
    }
    cordon::testing::RunSpec spec;
    spec.deadline = std::chrono::seconds(90);
    auto r = cordon::testing::run_program(argv, spec);
    ASSERT_FALSE(r.timed_out);
    ASSERT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_NE(r.out.find("started-live 1"), std::string::npos) << "followed while running";
    EXPECT_NE(r.out.find("watch-exit 0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("run-exit 3"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("session.start"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("env.passed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("exit_code=3"), std::string::npos) << "ended with the session: " << r.out;
    EXPECT_EQ(r.out.find("chain="), std::string::npos) << "the chain is not for reading";
    EXPECT_EQ(r.out.find("\x1b[32m") != std::string::npos, !no_color)
        << (no_color ? "NO_COLOR" : "colour on a terminal") << ": " << r.out;
  }
}

}  // namespace
}  // namespace cordon::launcher
