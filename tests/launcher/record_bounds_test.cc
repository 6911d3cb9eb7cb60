// The session record under a flood: a sandboxed program that hammers refused opens (each one a
// cordon-fs refusal and a shim message) and lookups for seconds. Rate limits keep each writer's
// share small with the drops counted; a small cap is reached as one limit.hit, never more bytes,
// and the session keeps running to its end, whose line is the record's last.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "launcher/session/session.h"
#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

using nlohmann::json;

// Four seconds of refused opens of the workspace's .env (filesystem.deny), name lookups and
// proc.exec records written straight to the shim's socket (no shim, no hello: what any process
// inside can do), then a last line: proof that the program kept running.
constexpr char kFlood[] = R"(
import os, socket, struct, time
def field(tag, value):
    return struct.pack('<BBH', tag, 0, len(value)) + value
forged = struct.pack('<IBBBBIII', 0x31534443, 1, 2, 0, 0, os.getpid(), 1, 0) + \
    field(4, b'/usr/bin/' + b'x' * 200) + field(5, b'x')
raw = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
raw.connect('/run/cordon/shim.sock')
raw.settimeout(1)
t = time.time(); n = 0; sent = 0
while time.time() - t < 4:
    try:
        os.close(os.open('.env', os.O_RDONLY))
    except OSError:
        n += 1
    try:
        socket.getaddrinfo('flood.invalid', 80)
    except OSError:
        pass
    for _ in range(4):
        try:
            raw.send(forged); sent += 1
        except OSError:
            pass
print('flooded', 'yes' if n > 1000 and sent > 4000 else (n, sent))
)";

struct Record {
  std::vector<json> events;
  size_t unparseable = 0;
  uint64_t bytes = 0;
  json summary;
};

Record read_record(SandboxFixture& f) {
  Record r;
  std::string root = f.env().back().substr(std::string("CORDON_STATE_DIR=").size()) + "/sessions";
  auto id = launcher::resolve_session(root, "last");
  if (!id.ok()) {
    ADD_FAILURE() << id.error().to_string();
    return r;
  }
  std::string dir = root + "/" + *id;
  std::string text = read_text(dir + "/events.jsonl");
  r.bytes = text.size();
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line, nullptr, false);
    if (j.is_object()) {
      r.events.push_back(std::move(j));
    } else {
      ++r.unparseable;
    }
  }
  r.summary = json::parse(read_text(dir + "/summary.json"), nullptr, false);
  return r;
}

size_t count(const Record& r, const std::string& source, const std::string& kind) {
  size_t n = 0;
  for (const auto& e : r.events) {
    n += e.value("source", "") == source && e.value("kind", "") == kind;
  }
  return n;
}

class RecordBounds : public ::testing::Test {
 protected:
  void SetUp() override { write_text(f_.ws() + "/.env", "SECRET=1\n"); }
  RunResult flood(const std::string& record_section) {
    write_text(f_.home() + "/p.json", R"({"version": 1, "record": )" + record_section + "}");
    RunSpec spec;
    spec.deadline = std::chrono::seconds(120);
    return f_.run({"-q", "--policy", f_.home() + "/p.json"}, {"python3", "-c", kFlood}, spec);
  }
  SandboxFixture f_;
};

TEST_F(RecordBounds, ARateLimitedFloodIsCountedNotWritten) {
  constexpr uint64_t kRate = 100;  // per writer and family: a burst of 1000, then 100 a second
  auto r = flood(R"({"events_per_second": 100})");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "flooded yes\n") << r.err;
  Record rec = read_record(f_);
  EXPECT_EQ(rec.unparseable, 0u);
  ASSERT_FALSE(rec.events.empty());
  EXPECT_EQ(rec.events.back().value("kind", ""), "session.end");
  const uint64_t duration_s = rec.summary.value("duration_ms", 0u) / 1000 + 2;
  const uint64_t allowed = 10 * kRate + kRate * duration_s;
  // Each writer's share of each family stays within its bucket, whatever the program did.
  for (const auto& [source, kind] :
       std::vector<std::pair<std::string, std::string>>{{"shim", "fs.open"},
                                                        {"shim", "net.dns"},
                                                        {"shim", "proc.exec"},
                                                        {"fusefs", "fs.refused"}}) {
    EXPECT_LE(count(rec, source, kind), allowed) << source << " " << kind;
  }
  // The drops are in the record and in the summary, by writer and family.
  ASSERT_TRUE(rec.summary.contains("record")) << rec.summary.dump(2);
  const json& s = rec.summary["record"];
  EXPECT_GT(s.value("dropped", 0u), 10000u) << s.dump(2);
  EXPECT_FALSE(s.value("limit_hit", true));
  EXPECT_GT(s["dropped_by"]["shim"]["fs"].value("rate_limited", 0u), 0u) << s.dump(2);
  EXPECT_GT(s["dropped_by"]["shim"]["proc"].value("rate_limited", 0u), 0u) << s.dump(2);
  size_t reports = 0;
  for (const auto& e : rec.events) {
    reports += e.value("kind", "") == "record.dropped" && e.value("source", "") == "shim";
  }
  EXPECT_GE(reports, 1u);
  if (rec.summary.value("cow_backend", "") == "cordon-fs") {
    EXPECT_GT(s["dropped_by"]["fusefs"]["fs"].value("rate_limited", 0u), 0u) << s.dump(2);
  }
  EXPECT_LT(rec.bytes, allowed * 12 * 1024);  // a dozen families at ~1 KiB a line, at most
}

TEST_F(RecordBounds, TheCapIsOneLimitHitAndTheSessionEndsInsideIt) {
  // No rate limit: only the cap stands between the flood and the disk.
  auto r = flood(R"({"max_bytes": "1M", "events_per_second": 0})");
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "flooded yes\n") << r.err;
  Record rec = read_record(f_);
  EXPECT_LE(rec.bytes, 1u << 20);
  EXPECT_EQ(rec.unparseable, 0u);
  size_t hits = 0;
  for (const auto& e : rec.events) {
    hits += e.value("kind", "") == "limit.hit" && e.value("limit", "") == "record";
  }
  EXPECT_EQ(hits, 1u);
  ASSERT_FALSE(rec.events.empty());
  EXPECT_EQ(rec.events.back().value("kind", ""), "session.end");
  EXPECT_EQ(rec.events.front().value("kind", ""), "session.start");
  ASSERT_TRUE(rec.summary.contains("record")) << rec.summary.dump(2);
  const json& s = rec.summary["record"];
  EXPECT_TRUE(s.value("limit_hit", false)) << s.dump(2);
  EXPECT_EQ(s.value("max_bytes", 0u), 1u << 20);
  EXPECT_GT(s["dropped_by"]["shim"]["fs"].value("over_cap", 0u), 1000u) << s.dump(2);
  EXPECT_GT(s["dropped_by"]["shim"]["proc"].value("over_cap", 0u), 1000u) << s.dump(2);
  EXPECT_EQ(s.value("bytes", 0u), rec.bytes);
}

}  // namespace
}  // namespace cordon::testing
