// --otlp end to end: the built cordon sends a session's record to a python3 OTLP/HTTP collector
// on 127.0.0.1 (answering, stalled, down, or behind TLS), and the sandbox cannot reach it.
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher/session/session.h"
#include "launcher/session/session_text.h"
#include "launcher/sidecars/record_follower.h"
#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/test_env.h"

extern char** environ;

namespace cordon::launcher {
namespace {

using cordon::testing::lines_of;
using cordon::testing::SandboxFixture;
using cordon::testing::TempDir;
using nlohmann::json;

// tests/launcher/otlp_collector.py in the background; killed and reaped at scope exit.
class Collector {
 public:
  Collector(const std::string& mode, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        "python3", cordon::testing::source_path("tests/launcher/otlp_collector.py"), mode,
        dir_ / "requests.jsonl", dir_ / "port"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    if (::posix_spawnp(&pid_, "python3", nullptr, nullptr, a.data(), environ) != 0) {
      pid_ = -1;
      return;
    }
    for (int i = 0; i < 100 && port_ == 0; ++i) {
      std::string p = cordon::testing::read_text(dir_ / "port");
      if (!p.empty()) {
        port_ = std::stoi(p);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  ~Collector() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  const TempDir& dir() const { return dir_; }
  std::vector<json> requests() const {
    std::vector<json> out;
    for (const auto& l : lines_of(cordon::testing::read_text(dir_ / "requests.jsonl"))) {
      out.push_back(json::parse(l));
    }
    return out;
  }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A port on 127.0.0.1 nothing listens on: bound, then closed.
int closed_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(s);
  return port;
}

class OtlpRun : public ::testing::Test {
 protected:
  void SetUp() override {
    CORDON_REQUIRE(::access(cordon::testing::cordon_bin().c_str(), X_OK) == 0,
                   "the cordon binary built");
  }
  std::string session_dir() const {
    auto id = resolve_session(fx_.state_dir() + "/sessions", "last");
    return id.ok() ? fx_.state_dir() + "/sessions/" + *id : "";
  }
  std::vector<std::string> record() const {
    return lines_of(cordon::testing::read_text(session_dir() + "/events.jsonl"));
  }
  json summary() const {
    return json::parse(cordon::testing::read_text(session_dir() + "/summary.json"));
  }
  // `cordon run --otlp URL` of `script`, with the exit summary on stderr (no -q).
  cordon::testing::RunResult run(const std::string& url, const std::string& script,
                                 std::vector<std::string> more = {}) {
    std::vector<std::string> flags = {"--mode", cordon::testing::writable_mode(), "--otlp", url};
    flags.insert(flags.end(), more.begin(), more.end());
    cordon::testing::RunSpec spec;
    spec.deadline = std::chrono::seconds(60);
    return fx_.run(flags, {"/bin/sh", "-c", script}, spec);
  }

  SandboxFixture fx_;
};

// Every log record of every request, in the order the collector got them.
std::vector<json> records_of(const std::vector<json>& requests) {
  std::vector<json> out;
  for (const json& r : requests) {
    json body = json::parse(r["body"].get<std::string>());
    for (const json& rl : body["resourceLogs"]) {
      for (const json& sl : rl["scopeLogs"]) {
        for (const json& lr : sl["logRecords"]) {
          out.push_back(lr);
        }
      }
    }
  }
  return out;
}

std::map<std::string, json> attributes(const json& kvs) {
  std::map<std::string, json> out;
  for (const json& kv : kvs) {
    out[kv["key"].get<std::string>()] = kv["value"];
  }
  return out;
}

TEST_F(OtlpRun, ACollectorGetsEveryRecordInOrderAsOtlpJsonLogs) {
  Collector c("ok");
  ASSERT_GT(c.port(), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(c.port());
  auto r = run(url, "for i in 1 2 3; do /bin/true; done; exit 3");
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 3) << r.err;
  const auto lines = record();
  ASSERT_GE(lines.size(), 2u);
  const auto requests = c.requests();
  ASSERT_FALSE(requests.empty());
  for (const json& q : requests) {
    EXPECT_EQ(q["method"], "POST");
    EXPECT_EQ(q["path"], "/v1/logs");
    EXPECT_EQ(q["content_type"], "application/json");
    EXPECT_EQ(q["host"], "127.0.0.1:" + std::to_string(c.port()));
    json body = json::parse(q["body"].get<std::string>());
    auto res = attributes(body["resourceLogs"][0]["resource"]["attributes"]);
    EXPECT_EQ(res["service.name"]["stringValue"], "cordon");
    EXPECT_EQ(body["resourceLogs"][0]["scopeLogs"][0]["scope"]["name"], "cordon");
  }
  const auto recs = records_of(requests);
  ASSERT_EQ(recs.size(), lines.size()) << "one log record per line of events.jsonl";
  const std::string id = json::parse(lines[0])["session"];
  for (size_t i = 0; i < lines.size(); ++i) {
    const json ev = json::parse(lines[i]);
    EXPECT_EQ(recs[i]["body"]["stringValue"], lines[i]) << "record " << i << " in order, whole";
    auto attrs = attributes(recs[i]["attributes"]);
    EXPECT_EQ(attrs["cordon.kind"]["stringValue"], ev["kind"]) << i;
    EXPECT_EQ(attrs["cordon.session"]["stringValue"], id) << i;
    EXPECT_EQ(attrs["cordon.source"]["stringValue"], ev["source"]) << i;
    EXPECT_EQ(recs[i]["timeUnixNano"],
              std::to_string(text::epoch_micros(ev["ts"].get<std::string>()) * 1000))
        << i;
    if (ev.contains("pid") && ev["pid"].is_number_integer()) {
      EXPECT_EQ(attrs["process.pid"]["intValue"], std::to_string(ev["pid"].get<int64_t>())) << i;
    }
    if (ev.contains("exe") && ev["exe"].is_string()) {
      EXPECT_EQ(attrs["process.executable.path"]["stringValue"], ev["exe"]) << i;
    }
    EXPECT_EQ(recs[i]["severityText"], ev.value("decision", "") == "deny" ? "WARN" : "INFO") << i;
  }
  EXPECT_EQ(attributes(recs.front()["attributes"])["cordon.kind"]["stringValue"], "session.start");
  EXPECT_EQ(attributes(recs.back()["attributes"])["cordon.kind"]["stringValue"], "session.end");
  json sum = summary();
  EXPECT_EQ(sum["record"]["otlp"]["target"], url);
  EXPECT_EQ(sum["record"]["otlp"]["sent"], lines.size());
  EXPECT_EQ(sum["record"]["otlp"]["dropped"], 0);
  EXPECT_FALSE(sum["record"]["otlp"].contains("error")) << sum.dump();
  EXPECT_EQ(r.err.find("not delivered"), std::string::npos) << r.err;
}

// cordon's end waits for the collector at most kShippingGrace, then counts what it did not take.
void expect_ended_on_time(const std::vector<std::string>& lines,
                          std::chrono::system_clock::time_point exited) {
  ASSERT_FALSE(lines.empty());
  const json end = json::parse(lines.back());
  ASSERT_EQ(end["kind"], "session.end");
  const double end_s = text::epoch_seconds(end["ts"].get<std::string>());
  const double exit_s = std::chrono::duration<double>(exited.time_since_epoch()).count();
  EXPECT_LT(exit_s - end_s, std::chrono::duration<double>(kShippingGrace).count() + 1.0)
      << "cordon exited " << exit_s - end_s << " s after session.end";
}

TEST_F(OtlpRun, ACollectorThatNeverAnswersCostsTheEndAtMostTheGrace) {
  Collector c("stall");
  ASSERT_GT(c.port(), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(c.port()) + "/otlp/v1/logs";
  auto r = run(url, "exit 4");
  const auto exited = std::chrono::system_clock::now();
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 4) << r.err;
  const auto lines = record();
  expect_ended_on_time(lines, exited);
  const auto requests = c.requests();
  ASSERT_FALSE(requests.empty()) << "the collector got the request it never answered";
  EXPECT_EQ(requests[0]["path"], "/otlp/v1/logs") << "a URL with a path is used as it is";
  json o = summary()["record"]["otlp"];
  EXPECT_EQ(o["sent"], 0);
  EXPECT_EQ(o["dropped"], lines.size()) << o.dump();
  EXPECT_EQ(o["error"], "no answer from the collector in time") << o.dump();
  EXPECT_NE(r.err.find("cordon: otlp " + url + ": " + std::to_string(lines.size()) + " of " +
                       std::to_string(lines.size()) +
                       " events not delivered (no answer from the collector in time); "
                       "events.jsonl has them all"),
            std::string::npos)
      << r.err;
}

TEST_F(OtlpRun, ACollectorThatIsDownCostsNothingAndTheDropsAreCounted) {
  const int port = closed_port();
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  auto r = run(url, "exit 0");
  const auto exited = std::chrono::system_clock::now();
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  const auto lines = record();
  expect_ended_on_time(lines, exited);
  json o = summary()["record"]["otlp"];
  EXPECT_EQ(o["sent"], 0);
  EXPECT_EQ(o["dropped"], lines.size()) << o.dump();
  EXPECT_NE(o["error"].get<std::string>().find("Connection refused"), std::string::npos)
      << o.dump();
  EXPECT_NE(r.err.find(" events not delivered ("), std::string::npos) << r.err;
}

TEST_F(OtlpRun, RecordsTheCollectorRejectsAreCountedAsDropped) {
  Collector c("partial");
  ASSERT_GT(c.port(), 0);
  auto r = run("http://127.0.0.1:" + std::to_string(c.port()), "exit 0");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  const auto lines = record();
  const size_t posts = c.requests().size();
  ASSERT_GT(posts, 0u);
  json o = summary()["record"]["otlp"];
  EXPECT_EQ(o["dropped"], posts) << "each answer rejected one record: " << o.dump();
  EXPECT_EQ(o["sent"].get<uint64_t>() + posts, lines.size()) << o.dump();
  EXPECT_EQ(o["error"], "the collector rejected records: one too many") << o.dump();
}

TEST_F(OtlpRun, BadUrlsStopTheRunBeforeItStarts) {
  struct Case {
    std::string url, says;
  };
  for (const Case& c : std::vector<Case>{
           {"ftp://127.0.0.1/", "the scheme ftp:// is not one cordon sends OTLP over"},
           {"127.0.0.1:4318", "no scheme"},
           {"http://user:secret@127.0.0.1:4318", "user info in the URL"},
           {"http://127.0.0.1:99999", "the port 99999 is not in 1-65535"},
           {"http://collector.invalid:4318", "resolving collector.invalid"},
       }) {
    auto r = run(c.url, "exit 0");
    EXPECT_EQ(r.exit_code(), 125) << c.url << ": " << r.err;
    // Named by the flag and the field: the policy check's "--otlp: record.otlp: \"URL\": ...",
    // or the resolver's "record.otlp (--otlp): ...".
    EXPECT_NE(r.err.find("--otlp"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("record.otlp"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(session_dir(), "") << c.url << ": no session was started";
  }
}

// A collector behind TLS with a self-signed certificate for 127.0.0.1.
class TlsCollector {
 public:
  TlsCollector() {
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
        "-nodes -days 1 -subj /CN=127.0.0.1 -addext "
        "subjectAltName=IP:127.0.0.1 -keyout '" +
        keys_ / "key.pem" + "' -out '" + keys_ / "cert.pem" + "' 2>/dev/null";
    ok_ = std::system(cmd.c_str()) == 0;
    if (ok_) {
      collector_ = std::make_unique<Collector>(
          "ok", std::vector<std::string>{"--tls", keys_ / "cert.pem", keys_ / "key.pem"});
    }
  }
  bool ok() const { return ok_ && collector_->port() > 0; }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(collector_->port()); }
  std::string cert() const { return keys_ / "cert.pem"; }
  const Collector& collector() const { return *collector_; }

 private:
  TempDir keys_;
  bool ok_ = false;
  std::unique_ptr<Collector> collector_;
};

TEST_F(OtlpRun, AnHttpsCollectorWithACertificateTheHostDoesNotTrustIsRefusedWithTheReason) {
  TlsCollector c;
  ASSERT_TRUE(c.ok());
  auto r = run(c.url(), "exit 0");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  json o = summary()["record"]["otlp"];
  EXPECT_EQ(o["sent"], 0);
  EXPECT_EQ(o["dropped"], record().size());
  EXPECT_EQ(o["error"], "TLS with 127.0.0.1:" + c.url().substr(c.url().rfind(':') + 1) +
                            ": certificate verify failed: self-signed certificate")
      << o.dump();
  EXPECT_TRUE(c.collector().requests().empty()) << "no record crossed an unverified connection";
}

TEST_F(OtlpRun, AnHttpsCollectorTheHostTrustsGetsTheRecord) {
  TlsCollector c;
  ASSERT_TRUE(c.ok());
  // SSL_CERT_FILE is how the host's trust store is pointed elsewhere; the launcher honours it.
  fx_.env().push_back("SSL_CERT_FILE=" + c.cert());
  auto r = run(c.url(), "exit 0");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  const auto lines = record();
  json o = summary()["record"]["otlp"];
  EXPECT_EQ(o["sent"], lines.size()) << o.dump();
  EXPECT_EQ(records_of(c.collector().requests()).size(), lines.size());
}

// The attack: the sandboxed program tries the collector cordon sends to, with the network open
// to any name. Loopback on the host is not the sandbox's to reach, and the URL is no rule.
TEST_F(OtlpRun, TheSandboxCannotReachTheCollector) {
  Collector c("ok");
  ASSERT_GT(c.port(), 0);
  const std::string port = std::to_string(c.port());
  const std::string url = "http://127.0.0.1:" + port;
  auto r = run(url,
               "for u in http://127.0.0.1:" + port + "/v1/logs http://localhost:" + port +
                   "/v1/logs; do curl -s -m 3 -d forged-by-the-sandbox $u && exit 9; done; "
                   "exit 7",
               {"--allow-host", "*"});
  ASSERT_EQ(r.exit_code(), 7) << "a curl from the sandbox reached the collector: " << r.err;
  // Every request is cordon's: OTLP JSON (whose records quote curl's argv, the string too).
  for (const json& q : c.requests()) {
    const std::string body = q["body"].get<std::string>();
    EXPECT_NE(body, "forged-by-the-sandbox");
    EXPECT_TRUE(json::accept(body)) << body;
    EXPECT_EQ(q["path"], "/v1/logs");
  }
  EXPECT_EQ(records_of(c.requests()).size(), record().size()) << "cordon's own records arrived";
  const std::string policy = cordon::testing::read_text(session_dir() + "/policy.json");
  EXPECT_EQ(policy.find("\"allow\": [\n      \"127.0.0.1"), std::string::npos) << policy;
}

}  // namespace
}  // namespace cordon::launcher
