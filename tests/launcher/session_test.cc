// The session record: directory layout and modes, policy.json, session.start/limit.hit/session.end,
// summary.json, ids, resolve_session, the one-write-per-line guarantee under concurrent writers.
#include "launcher/session/session.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"
#include "policy/loader.h"
#include "policy/serialize.h"
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

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    out.push_back(l);
  }
  return out;
}

mode_t mode_of(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Every test gets its own state directory through CORDON_STATE_DIR.
class SessionTest : public ::testing::Test {
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

  policy::Policy test_policy() {
    policy::Policy p = policy::default_policy();
    p.process.memory = 256ull << 20;
    p.process.pids = 64;
    p.process.timeout = std::chrono::seconds(90);
    return p;
  }

  Session make(const std::vector<std::string>& argv = {"python3", "agent.py", "--flag"}) {
    auto s = Session::create(test_policy(), argv, "/work/proj");
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().to_string());
    return std::move(s).value();
  }

  TempDir tmp_;
  std::string state_, root_, old_;
  bool had_old_ = false;
};

TEST_F(SessionTest, RootHonoursStateDirOverride) {
  EXPECT_EQ(sessions_root(), state_ + "/sessions");
}

TEST_F(SessionTest, RootWithoutOverride) {
  ::unsetenv("CORDON_STATE_DIR");
  if (::geteuid() == 0) {
    EXPECT_EQ(sessions_root(), "/var/lib/cordon/sessions");
  } else {
    ::setenv("XDG_STATE_HOME", "/some/state", 1);
    EXPECT_EQ(sessions_root(), "/some/state/cordon/sessions");
    ::setenv("XDG_STATE_HOME", "relative/ignored", 1);
    EXPECT_EQ(sessions_root(), std::string(std::getenv("HOME")) + "/.local/state/cordon/sessions");
    ::unsetenv("XDG_STATE_HOME");
  }
}

TEST_F(SessionTest, CreateMakesPrivateDirectoryWithAllFiles) {
  Session s = make();
  EXPECT_TRUE(std::regex_match(s.id(), std::regex("[0-9]{8}-[0-9]{6}-[0-9a-f]{6}"))) << s.id();
  EXPECT_EQ(s.paths().dir, root_ + "/" + s.id());
  EXPECT_EQ(s.paths().policy, s.paths().dir + "/policy.json");
  EXPECT_EQ(s.paths().events, s.paths().dir + "/events.jsonl");
  EXPECT_EQ(s.paths().summary, s.paths().dir + "/summary.json");
  EXPECT_EQ(s.paths().control, s.paths().dir + "/control.sock");
  // Every directory cordon created is 0700; files are 0600.
  EXPECT_EQ(mode_of(state_), 0700u);
  EXPECT_EQ(mode_of(root_), 0700u);
  EXPECT_EQ(mode_of(s.paths().dir), 0700u);
  EXPECT_EQ(mode_of(s.paths().upper), 0700u);
  EXPECT_EQ(mode_of(s.paths().snapshots), 0700u);
  EXPECT_EQ(mode_of(s.paths().policy), 0600u);
  EXPECT_EQ(mode_of(s.paths().events), 0600u);
  struct stat st;
  EXPECT_TRUE(::lstat(s.paths().upper.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
  EXPECT_NE(::lstat(s.paths().summary.c_str(), &st), 0) << "no summary before finish()";
  EXPECT_TRUE(s.events().enabled());
  EXPECT_EQ(s.events().session(), s.id());
}

TEST_F(SessionTest, PolicyJsonRoundTripsToTheEffectivePolicy) {
  Session s = make();
  std::string text = slurp(s.paths().policy);
  json j = json::parse(text);
  EXPECT_FALSE(j.contains("argv")) << "policy.json holds only the policy";
  policy::Policy back = policy::parse_policy(text);
  EXPECT_EQ(policy::to_json(back), policy::to_json(test_policy()));
  EXPECT_EQ(back.process.memory, 256ull << 20);
  EXPECT_EQ(back.process.pids, 64u);
}

TEST_F(SessionTest, StartedAndFinishWriteEventsAndSummary) {
  Session s = make({"sh", "-c", "echo hi there"});
  ASSERT_TRUE(s.started(4242, "limits: cgroup v1 (memory 256 MiB, pids 64)").ok());
  SessionEnd end;
  end.exit_code = 137;
  end.signal = SIGKILL;
  end.limit_hit = "memory";
  end.duration = std::chrono::milliseconds(1234);
  end.usage.peak_memory = 255ull << 20;
  end.usage.cpu = std::chrono::microseconds(400'000);
  end.usage.oom_killed = true;
  end.limits_backend = "limits: cgroup v1 (memory 256 MiB, pids 64)";
  ASSERT_TRUE(s.finish(end).ok());

  auto lines = lines_of(slurp(s.paths().events));
  ASSERT_EQ(lines.size(), 3u);
  std::vector<json> ev;
  for (const auto& l : lines) {
    ev.push_back(json::parse(l));  // each line is one complete JSON object
    EXPECT_EQ(ev.back()["session"], s.id());
    EXPECT_EQ(ev.back()["source"], "launcher");
    EXPECT_TRUE(std::regex_match(ev.back()["ts"].get<std::string>(),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")));
  }
  EXPECT_EQ(ev[0]["kind"], "session.start");
  EXPECT_EQ(ev[0]["argv"], json({"sh", "-c", "echo hi there"}));
  EXPECT_EQ(ev[0]["workspace"], "/work/proj");
  EXPECT_EQ(ev[0]["init_pid"], 4242);
  EXPECT_EQ(ev[0]["uid"], ::getuid());
  EXPECT_EQ(ev[0]["limits"], "limits: cgroup v1 (memory 256 MiB, pids 64)");
  EXPECT_EQ(ev[0]["cordon_version"], CORDON_VERSION);
  EXPECT_TRUE(ev[0]["hostname"].is_string());
  EXPECT_FALSE(ev[0]["cwd"].get<std::string>().empty());

  EXPECT_EQ(ev[1]["kind"], "limit.hit");
  EXPECT_EQ(ev[1]["limit"], "memory");
  EXPECT_EQ(ev[1]["value"], 256ull << 20) << "the configured limit, from the effective policy";
  EXPECT_EQ(ev[1]["unit"], "bytes");

  EXPECT_EQ(ev[2]["kind"], "session.end");
  EXPECT_EQ(ev[2]["exit_code"], 137);
  EXPECT_EQ(ev[2]["signal"], SIGKILL);
  EXPECT_EQ(ev[2]["signal_name"], "SIGKILL");
  EXPECT_EQ(ev[2]["timed_out"], false);
  EXPECT_EQ(ev[2]["duration_ms"], 1234);
  EXPECT_EQ(ev[2]["peak_memory"], 255ull << 20);
  EXPECT_EQ(ev[2]["cpu_ms"], 400);
  EXPECT_EQ(ev[2]["limits_backend"], end.limits_backend);
  EXPECT_EQ(ev[2]["limits_hit"], json({"memory"}));

  json sum = json::parse(slurp(s.paths().summary));
  EXPECT_EQ(sum["session"], s.id());
  EXPECT_EQ(sum["exit_code"], 137);
  EXPECT_EQ(sum["signal_name"], "SIGKILL");
  EXPECT_EQ(sum["argv"], json({"sh", "-c", "echo hi there"}));
  EXPECT_EQ(sum["workspace"], "/work/proj");
  EXPECT_EQ(sum["init_pid"], 4242);
  EXPECT_EQ(sum["cordon_version"], CORDON_VERSION);
  EXPECT_EQ(sum["duration_ms"], 1234);
  EXPECT_EQ(sum["events"]["total"], 3);
  EXPECT_EQ(sum["events"]["by_kind"],
            json({{"session.start", 1}, {"limit.hit", 1}, {"session.end", 1}}));
  EXPECT_FALSE(sum["events"].contains("unparseable"));
  EXPECT_EQ(mode_of(s.paths().summary), 0600u);
  struct stat st;
  EXPECT_NE(::lstat((s.paths().dir + "/summary.json.tmp").c_str(), &st), 0) << "tmp renamed away";
}

TEST_F(SessionTest, NonUtf8ArgvAndWorkspaceAreRecorded) {
  // Linux paths and arguments are bytes; serialising them must not throw.
  auto created = Session::create(test_policy(), {"cat", "caf\xe9.txt"}, "/tmp/\xff\xfe");
  ASSERT_TRUE(created.ok()) << created.error().to_string();
  Session& s = *created;
  ASSERT_TRUE(s.started(1, "").ok());
  ASSERT_TRUE(s.finish(SessionEnd{}).ok());
  json sum = json::parse(slurp(s.paths().summary));
  EXPECT_EQ(sum["argv"][0], "cat");
  EXPECT_EQ(sum["argv"][1], "caf\xef\xbf\xbd.txt") << "invalid bytes become U+FFFD";
  for (const auto& l : lines_of(slurp(s.paths().events))) {
    EXPECT_FALSE(json::parse(l, nullptr, false).is_discarded()) << l;
  }
}

TEST_F(SessionTest, FinishTwiceKeepsTheFirstEnd) {
  Session s = make();
  SessionEnd first;
  first.exit_code = 5;
  ASSERT_TRUE(s.finish(first).ok());
  SessionEnd second;
  second.exit_code = 9;
  EXPECT_FALSE(s.finish(second).ok());
  EXPECT_EQ(json::parse(slurp(s.paths().summary))["exit_code"], 5);
  int ends = 0;
  for (const auto& l : lines_of(slurp(s.paths().events))) {
    ends += json::parse(l)["kind"] == "session.end" ? 1 : 0;
  }
  EXPECT_EQ(ends, 1);
}

TEST_F(SessionTest, FinishRecordsEveryLimitOnce) {
  Session s = make();
  ASSERT_TRUE(s.started(1, "limits: rlimits only").ok());
  SessionEnd end;
  end.exit_code = 124;
  end.timed_out = true;
  end.limit_hit = "timeout";
  end.usage.pids_limit_hit = true;
  ASSERT_TRUE(s.finish(end).ok());
  std::map<std::string, json> hits;
  for (const auto& l : lines_of(slurp(s.paths().events))) {
    json j = json::parse(l);
    if (j["kind"] == "limit.hit") {
      EXPECT_EQ(hits.count(j["limit"]), 0u) << "duplicate limit.hit " << l;
      hits[j["limit"]] = j;
    }
  }
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits["timeout"]["value"], 90'000);
  EXPECT_EQ(hits["timeout"]["unit"], "ms");
  EXPECT_EQ(hits["pids"]["value"], 64);
  EXPECT_EQ(hits["pids"]["unit"], "tasks");
}

TEST_F(SessionTest, SummaryCountsForeignAndTornLines) {
  Session s = make();
  ASSERT_TRUE(s.started(7, "").ok());
  {
    auto proxy = record::EventLog::open(s.paths().events, s.id(), "netproxy", {});
    ASSERT_TRUE(proxy.ok());
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(proxy->emit("net.refused", {{"decision", "deny"}, {"host", "x.test"}}).ok());
    }
  }
  {
    std::ofstream f(s.paths().events, std::ios::app);
    // Only the top-level kind counts; an escaped one is still understood; non-events are not.
    f << R"({"args":{"kind":"nested"},"kind":"fs.open","x":["kind","no"]})"
         "\n";
    f << R"({"kind":"net.\u0063onnect"})"
         "\n";
    f << R"({"kind":7})"
         "\n";
    f << R"(["kind","x"])"
         "\n";
    f << "\n";  // empty lines (a repaired tail) are not events
    // A writer that died mid-line.
    f << "{\"kind\":\"net.conn";
  }
  ASSERT_TRUE(s.finish(SessionEnd{}).ok());
  json sum = json::parse(slurp(s.paths().summary));
  EXPECT_EQ(sum["events"]["by_kind"]["net.refused"], 5);
  EXPECT_EQ(sum["events"]["by_kind"]["session.start"], 1);
  // finish() ended the torn line first, so its session.end is a line of its own.
  EXPECT_EQ(sum["events"]["by_kind"]["session.end"], 1);
  EXPECT_EQ(sum["events"]["by_kind"]["fs.open"], 1);
  EXPECT_EQ(sum["events"]["by_kind"]["net.connect"], 1);
  EXPECT_FALSE(sum["events"]["by_kind"].contains("nested"));
  EXPECT_EQ(sum["events"]["unparseable"], 3);
  EXPECT_EQ(sum["events"]["total"], 12);
  auto lines = lines_of(slurp(s.paths().events));
  ASSERT_EQ(lines.size(), 13u);
  EXPECT_EQ(lines[11], "{\"kind\":\"net.conn");
  EXPECT_EQ(json::parse(lines[12])["kind"], "session.end");
}

TEST_F(SessionTest, FinishNeverWritesThroughPlantedSymlinks) {
  Session s = make();
  std::string target = tmp_ / "target";
  { std::ofstream(target) << "precious"; }
  ASSERT_EQ(::symlink(target.c_str(), (s.paths().dir + "/summary.json.tmp").c_str()), 0);
  ASSERT_EQ(::symlink(target.c_str(), s.paths().summary.c_str()), 0);
  ASSERT_TRUE(s.finish(SessionEnd{}).ok());
  EXPECT_EQ(slurp(target), "precious");
  struct stat st;
  ASSERT_EQ(::lstat(s.paths().summary.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the symlink was replaced, not followed";
  EXPECT_EQ(json::parse(slurp(s.paths().summary))["session"], s.id());
}

TEST_F(SessionTest, IdsAreUniqueAndSortByCreation) {
  std::vector<std::string> made;
  for (int i = 0; i < 40; ++i) {
    made.push_back(make().id());
  }
  std::set<std::string> unique(made.begin(), made.end());
  EXPECT_EQ(unique.size(), made.size());
  auto root_fd = store::open_root(root_);
  ASSERT_TRUE(root_fd.ok());
  auto listed = store::list_sessions(root_fd->get());
  ASSERT_TRUE(listed.ok());
  // Same-second sessions are ordered by creation, so the listing is exactly creation order.
  EXPECT_EQ(*listed, made);
  auto last = resolve_session(root_, "last");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, made.back());
}

TEST(SessionId, Format) {
  // 2026-11-22 10:57:47 UTC
  EXPECT_EQ(store::make_session_id(1795345067, 0x3f9a2c), "20261122-105747-3f9a2c");
  EXPECT_EQ(store::session_id_time("20261122-105747-3f9a2c"), 1795345067);
  EXPECT_TRUE(store::is_session_id("20261122-105747-3f9a2c"));
  EXPECT_FALSE(store::is_session_id("20261122-105747-3f9a2"));
  EXPECT_FALSE(store::is_session_id("20261122-105747-3f9a2C"));
  EXPECT_FALSE(store::is_session_id("../../../../etc/passw"));
}

TEST(SessionText, UnitsAndEscapes) {
  using std::chrono::milliseconds;
  EXPECT_EQ(text::duration(milliseconds(0)), "0ms");
  EXPECT_EQ(text::duration(milliseconds(999)), "999ms");
  EXPECT_EQ(text::duration(milliseconds(1000)), "1s");
  EXPECT_EQ(text::duration(milliseconds(1250)), "1.2s");
  EXPECT_EQ(text::duration(milliseconds(59'999)), "59s");
  EXPECT_EQ(text::duration(milliseconds(60'000)), "1m");
  EXPECT_EQ(text::duration(milliseconds(3'599'000)), "59m59s");
  EXPECT_EQ(text::duration(milliseconds(3'900'000)), "1h5m");
  EXPECT_EQ(text::size(0), "0 B");
  EXPECT_EQ(text::size(1536), "1.5 KiB");
  EXPECT_EQ(text::size(23ull << 20), "23 MiB");
  EXPECT_EQ(text::size(1ull << 30), "1 GiB");
  EXPECT_EQ(text::signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(text::signal_name(1000), "signal 1000");
  EXPECT_EQ(text::one_line("ok \x1b[1m\x7f\xc2\x9b\xc3\xa9", 100),
            "ok \\x1b[1m\\x7f\\u009b\xc3\xa9")
      << "C0, DEL and C1 escaped; other UTF-8 kept";
  EXPECT_EQ(text::one_line(std::string(50, 'a'), 10), std::string(10, 'a') + "...");
  EXPECT_EQ(text::one_line("\xc3\xa9\xc3\xa9\xc3\xa9", 3), "\xc3\xa9...")
      << "cut between characters";

  // Not an RFC 3339 stamp: shown escaped, never interpreted.
  EXPECT_EQ(text::local_clock("\x1b]0;x"), "\\x1b]0;x");
  std::string clock = text::local_clock("2026-11-22T10:57:47.123456Z");
  ASSERT_EQ(clock.size(), 12u) << clock;
  EXPECT_EQ(clock.substr(5), ":47.123");
}

// The review output's escaping, byte for byte: what a hostile file name or line becomes.
TEST(SessionText, EscapedShowsHostileBytesExactly) {
  // ESC[2J (clear screen), CR, BS, C1 CSI as UTF-8 and as a raw byte, and bytes 0x80-0xff.
  std::string name =
      "zz\x1b[2J\x1b[3J\rfake\b\xc2\x9b"
      "31m\x9b"
      "31m\x80\xff\xfe";
  EXPECT_EQ(text::escaped(name),
            "zz\\x1b[2J\\x1b[3J\\x0dfake\\x08\\u009b31m\\x9b31m\\x80\\xff\\xfe");
  // Invalid UTF-8 of every kind: overlong, surrogate, beyond U+10FFFF, truncated, stray.
  EXPECT_EQ(text::escaped("\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x82|\x82"),
            "\\xc0\\xaf|\\xed\\xa0\\x80|\\xf4\\x90\\x80\\x80|\\xe2\\x82|\\x82");
  // Text that reorders or hides itself: RLO, an isolate, a zero-width joiner, a BOM.
  EXPECT_EQ(text::escaped("a\xe2\x80\xae"
                          "b\xe2\x81\xa6"
                          "c\xe2\x80\x8d"
                          "d\xef\xbb\xbf"),
            "a\\u202eb\\u2066c\\u200dd\\ufeff");
  // Valid text passes unchanged, NUL and DEL do not.
  EXPECT_EQ(text::escaped("caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x98\x80");
  EXPECT_EQ(text::escaped(std::string("a\0b\x7f", 4)), "a\\x00b\\x7f");
  // Names escape the backslash so a literal "\x1b" cannot pass for an escaped ESC; diff lines
  // keep tabs.
  EXPECT_EQ(text::escaped("a\\x1b\tb", {.escape_backslash = true}), "a\\\\x1b\\x09b");
  EXPECT_EQ(text::escaped("\tx = 1;\r", {.keep_tab = true}), "\tx = 1;\\x0d");
  // Whatever the input, the output holds nothing that escaping would change again (no control
  // character, no invalid UTF-8) and no byte below 0x20 or DEL.
  std::string all;
  for (int i = 0; i < 256; ++i) {
    all.push_back(static_cast<char>(i));
    all += "\xc2";
    all.push_back(static_cast<char>(i));
    all += "\xe2\x80";
    all.push_back(static_cast<char>(i));
  }
  std::string out = text::escaped(all);
  EXPECT_EQ(text::escaped(out), out);
  for (unsigned char c : out) {
    EXPECT_TRUE(c >= 0x20 && c != 0x7f) << static_cast<int>(c);
  }
}

TEST(Summary, CleanExit) {
  SessionEnd end;
  end.duration = std::chrono::milliseconds(1200);
  end.usage.cpu = std::chrono::microseconds(400'000);
  end.usage.peak_memory = 23ull << 20;
  end.limits_backend = "limits: cgroup v1 (memory 1 GiB, cpus 1, pids 512)";
  std::string s = format_summary("20261122-105747-3f9a2c", end);
  EXPECT_EQ(s,
            "cordon: session 20261122-105747-3f9a2c ended: exit 0 after 1.2s (cpu 400ms, peak "
            "memory 23 MiB)\n"
            "cordon: limits: cgroup v1 (memory 1 GiB, cpus 1, pids 512)\n"
            "cordon: log: cordon log 20261122-105747-3f9a2c\n");
}

TEST(Summary, SignalMemoryTimeout) {
  SessionEnd end;
  end.exit_code = 139;
  end.signal = SIGSEGV;
  end.duration = std::chrono::milliseconds(65'000);
  std::string s = format_summary("X", end);
  EXPECT_NE(s.find("terminated by SIGSEGV (exit 139) after 1m5s"), std::string::npos) << s;

  SessionEnd mem;
  mem.exit_code = 137;
  mem.signal = SIGKILL;
  mem.limit_hit = "memory";
  mem.memory_limit = 256ull << 20;
  s = format_summary("X", mem);
  EXPECT_NE(s.find("cordon: killed: memory limit (256 MiB) reached\n"), std::string::npos) << s;

  SessionEnd to;
  to.exit_code = 124;
  to.signal = SIGKILL;
  to.timed_out = true;
  to.timeout = std::chrono::minutes(30);
  to.error = "cordon-fs died";
  to.limits_backend = "limits: rlimits only (memory as address space 1 GiB)";
  s = format_summary("X", to);
  EXPECT_NE(s.find("cordon: timed out after 30m; sent SIGTERM, then SIGKILL\n"), std::string::npos)
      << s;
  EXPECT_NE(s.find("cordon: error: cordon-fs died\n"), std::string::npos) << s;
  auto lines = lines_of(s);
  EXPECT_LE(lines.size(), 5u);
  for (const auto& l : lines) {
    EXPECT_EQ(l.rfind("cordon: ", 0), 0u) << l;
  }
}

TEST(Summary, HostileErrorTextCannotDriveTheTerminal) {
  SessionEnd end;
  end.error = "bad\x1b]0;owned\x07\nsecond line";
  std::string s = format_summary("X", end);
  EXPECT_EQ(s.find('\x1b'), std::string::npos);
  EXPECT_LE(lines_of(s).size(), 5u);
  for (const auto& l : lines_of(s)) {
    EXPECT_EQ(l.rfind("cordon: ", 0), 0u) << l;
  }
}

class ResolveTest : public SessionTest {
 protected:
  void SetUp() override {
    SessionTest::SetUp();
    ASSERT_EQ(::mkdir(state_.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir(root_.c_str(), 0700), 0);
    for (const char* id :
         {"20261120-080000-aaaaaa", "20261121-090000-abcdef", "20261121-090000-abc123",
          "20261122-100000-0f0f0f", "20261122-110000-123456", "20261122-120000-777777"}) {
      ASSERT_EQ(::mkdir((root_ + "/" + id).c_str(), 0700), 0);
    }
  }
};

TEST_F(ResolveTest, ExactPrefixLast) {
  EXPECT_EQ(resolve_session(root_, "20261121-090000-abcdef").value(), "20261121-090000-abcdef");
  EXPECT_EQ(resolve_session(root_, "20261120").value(), "20261120-080000-aaaaaa");
  EXPECT_EQ(resolve_session(root_, "20261121-090000-abcd").value(), "20261121-090000-abcdef");
  EXPECT_EQ(resolve_session(root_, "last").value(), "20261122-120000-777777");
}

TEST_F(ResolveTest, AmbiguousPrefixListsMatches) {
  auto r = resolve_session(root_, "20261121-090000-abc");
  ASSERT_FALSE(r.ok());
  std::string msg = r.error().to_string();
  EXPECT_NE(msg.find("ambiguous"), std::string::npos) << msg;
  EXPECT_NE(msg.find("20261121-090000-abcdef"), std::string::npos) << msg;
  EXPECT_NE(msg.find("20261121-090000-abc123"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("20261120-080000-aaaaaa"), std::string::npos) << msg;
}

TEST_F(ResolveTest, UnknownListsTheFiveNewest) {
  auto r = resolve_session(root_, "2025");
  ASSERT_FALSE(r.ok());
  std::string msg = r.error().to_string();
  EXPECT_NE(msg.find("no session \"2025\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("20261122-120000-777777"), std::string::npos) << msg;
  EXPECT_NE(msg.find("20261121-090000-abcdef"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("20261120-080000-aaaaaa"), std::string::npos) << "only the 5 newest: " << msg;
}

TEST_F(ResolveTest, NoSessionsYet) {
  TempDir empty;
  auto r = resolve_session(empty / "nothing-here", "last");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().to_string().find("no sessions under"), std::string::npos);
  auto r2 = resolve_session(empty.path(), "last");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().to_string().find("no sessions under"), std::string::npos);
}

TEST_F(ResolveTest, TraversalNeverEscapesTheRoot) {
  // A directory outside the root that a traversing id would reach.
  ASSERT_EQ(::mkdir((state_ + "/20261122-130000-eeeeee").c_str(), 0700), 0);
  for (const char* bad : {"..", "../20261122-130000-eeeeee", "../sessions/20261122-100000-0f0f0f",
                          "/etc", ".", "20261122-100000-0f0f0f/..", "a/b", "", "LAST",
                          "20261122-100000-0f0f0f/../../x", "%2e%2e"}) {
    auto r = resolve_session(root_, bad);
    EXPECT_FALSE(r.ok()) << "\"" << bad << "\" resolved to " << (r.ok() ? *r : "");
  }
  // A symlink in the root named like a session, pointing outside: not a session.
  ASSERT_EQ(::symlink((state_ + "/20261122-130000-eeeeee").c_str(),
                      (root_ + "/20261122-140000-ffffff").c_str()),
            0);
  auto r = resolve_session(root_, "20261122-140000-ffffff");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(resolve_session(root_, "last").value(), "20261122-120000-777777");
  auto root_fd = store::open_root(root_);
  ASSERT_TRUE(root_fd.ok());
  EXPECT_FALSE(store::open_session_dir(root_fd->get(), "20261122-140000-ffffff").ok())
      << "O_NOFOLLOW on the session directory";
}

// 4 processes x 2000 events into one events.jsonl: every line must parse and every event must be
// there exactly once, which only holds if each line is one write(2) on an O_APPEND fd.
TEST_F(SessionTest, ConcurrentWritersNeverInterleave) {
  Session s = make();
  constexpr int kWriters = 4;
  constexpr int kEvents = 2000;
  std::vector<pid_t> kids;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto log = record::EventLog::open(s.paths().events, s.id(), "writer" + std::to_string(w), {});
      if (!log.ok()) {
        ::_exit(2);
      }
      for (int i = 0; i < kEvents; ++i) {
        // Sizes vary up to 3 KB, with every 50th line 10 KB: lines longer than a page and
        // pipe buffer, at every alignment in the file.
        size_t len = i % 50 == 0 ? 10000 : static_cast<size_t>((i * 37 + w * 101) % 3000);
        std::string pad(len, static_cast<char>('a' + w));
        if (!log->emit("test.event", {{"writer", w}, {"seq", i}, {"pad", pad}}).ok()) {
          ::_exit(3);
        }
      }
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  auto lines = lines_of(slurp(s.paths().events));
  ASSERT_EQ(lines.size(), static_cast<size_t>(kWriters * kEvents));
  std::vector<std::set<int>> seen(kWriters);
  for (const auto& l : lines) {
    json j = json::parse(l, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "torn line: " << l.substr(0, 120);
    int w = j["writer"];
    ASSERT_TRUE(w >= 0 && w < kWriters);
    EXPECT_EQ(j["source"], "writer" + std::to_string(w));
    const std::string& pad = j["pad"].get_ref<const std::string&>();
    EXPECT_EQ(pad.find_first_not_of(static_cast<char>('a' + w)), std::string::npos);
    EXPECT_TRUE(seen[w].insert(j["seq"].get<int>()).second);
  }
  for (int w = 0; w < kWriters; ++w) {
    EXPECT_EQ(seen[w].size(), static_cast<size_t>(kEvents));
  }
  // And the summary's count agrees.
  ASSERT_TRUE(s.finish(SessionEnd{}).ok());
  json sum = json::parse(slurp(s.paths().summary));
  EXPECT_EQ(sum["events"]["by_kind"]["test.event"], kWriters * kEvents);
}

}  // namespace
}  // namespace cordon::launcher
