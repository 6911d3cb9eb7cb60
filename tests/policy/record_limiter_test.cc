// The record's bounds on a real file: token buckets per kind family with counted drops, and the
// size cap held by several processes (and threads) appending to one events.jsonl, with exactly one
// limit.hit and room kept for the session's last line.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "record/events.h"
#include "tests/support/test_env.h"

namespace cordon::record {
namespace {

using cordon::testing::TempDir;
using nlohmann::json;

std::vector<json> read_lines(const std::string& path, size_t* bad = nullptr) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line, nullptr, false);
    if (j.is_object()) {
      out.push_back(std::move(j));
    } else if (bad != nullptr) {
      ++*bad;
    }
  }
  return out;
}

size_t count_kind(const std::vector<json>& evs, const std::string& kind) {
  size_t n = 0;
  for (const auto& e : evs) {
    n += e.value("kind", "") == kind;
  }
  return n;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

TEST(RecordLimits, ReserveScalesWithTheCapWithinBounds) {
  EXPECT_EQ((RecordLimits{1 << 20, 0}.reserve()), 256u << 10);
  EXPECT_EQ((RecordLimits{256ull << 20, 0}.reserve()), 8u << 20);
  EXPECT_EQ((RecordLimits{16ull << 20, 0}.reserve()), 2u << 20);
  EXPECT_EQ(family_of("net.http"), family_of("net.refused"));
  EXPECT_NE(family_of("net.http"), family_of("fs.refused"));
  EXPECT_EQ(family_of("weird"), family_of("also.weird"));
}

TEST(RecordLimiter, RateLimitDropsAreCountedAndReportedInALaterEvent) {
  TempDir dir;
  std::string path = dir / "events.jsonl";
  auto log = EventLog::open(path, "s", "fusefs", {0, 10});  // 10/s, a burst of 100
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(log->emit("fs.refused", {{"i", i}}).ok());
  }
  // Another family has its own bucket; essential events have none.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(log->emit("net.dns", {{"i", i}}).ok());
    ASSERT_TRUE(log->emit("session.note", {{"i", i}}, Tier::kEssential).ok());
  }
  auto evs = read_lines(path);
  size_t written = count_kind(evs, "fs.refused");
  EXPECT_GE(written, 100u);
  EXPECT_LE(written, 110u);  // the burst, and what refilled while the loop ran
  EXPECT_EQ(count_kind(evs, "net.dns"), 50u);
  EXPECT_EQ(count_kind(evs, "session.note"), 50u);
  EXPECT_EQ(log->dropped(), 500u - written);

  // A second later the family's next written event is preceded by the count so far.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(log->emit("fs.refused", {{"i", "after"}}).ok());
  evs = read_lines(path);
  ASSERT_GE(evs.size(), 2u);
  const json& report = evs[evs.size() - 2];
  EXPECT_EQ(report.value("kind", ""), "record.dropped") << report;
  EXPECT_EQ(report.value("family", ""), "fs");
  EXPECT_EQ(report.value("source", ""), "fusefs");
  EXPECT_EQ(report.value("rate_limited", 0u), 500u - written);
  EXPECT_EQ(report.value("over_cap", 1u), 0u);
  EXPECT_FALSE(report.contains("final"));
  EXPECT_EQ(evs.back().value("i", ""), "after");

  // The writer's last word repeats nothing already said, and says what is new.
  ASSERT_TRUE(log->report_drops().ok());
  EXPECT_EQ(count_kind(read_lines(path), "record.dropped"), 1u);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(log->emit("fs.refused", {{"i", i}}).ok());
  }
  ASSERT_TRUE(log->report_drops().ok());
  evs = read_lines(path);
  EXPECT_EQ(evs.back().value("kind", ""), "record.dropped");
  EXPECT_EQ(evs.back().value("final", false), true);
  EXPECT_EQ(evs.back().value("rate_limited", 0u), log->dropped());
}

// Writers in four processes, two threads each, one file of a 1 MiB cap: the file never passes the
// cap, exactly one limit.hit is written for all of them, every line is whole JSON, every event is
// either in the file or in its writer's count, and the session's end still fits after it all.
TEST(RecordLimiter, CapHoldsAcrossProcessesWithOneLimitHitAndRoomForTheEnd) {
  TempDir dir;
  std::string path = dir / "events.jsonl";
  constexpr uint64_t kCap = 1 << 20;
  constexpr int kWriters = 4, kThreads = 2, kEach = 4000;
  std::vector<pid_t> kids;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Its own open of the file, as each of cordon's writers has.
      auto log = EventLog::open(path, "s", "writer" + std::to_string(w), {kCap, 0});
      if (!log.ok()) {
        ::_exit(2);
      }
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < kEach; ++i) {
            // Now and then a line far longer than limit.hit: the one that does not fit may
            // leave room that only padding closes.
            size_t pad = i % 16 == 0 ? 8000 : 150;
            (void)log->emit("fs.refused", {{"t", t}, {"i", i}, {"pad", std::string(pad, 'x')}});
          }
        });
      }
      for (auto& th : threads) {
        th.join();
      }
      ::_exit(log->report_drops().ok() ? 0 : 3);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  }
  EXPECT_LE(file_size(path), kCap - RecordLimits::kEndRoom);

  // The launcher's end: its own drops, a limit it met, then the last line.
  auto launcher = EventLog::open(path, "s", "launcher", {kCap, 0});
  ASSERT_TRUE(launcher.ok());
  ASSERT_TRUE(launcher->emit("fs.refused", {{"late", true}}).ok());  // normal: over the cap
  ASSERT_TRUE(launcher->report_drops().ok());
  ASSERT_TRUE(launcher->emit("limit.hit", {{"limit", "timeout"}}, Tier::kEssential).ok());
  ASSERT_TRUE(launcher->emit("session.end", {{"exit_code", 0}}, Tier::kLast).ok());
  ASSERT_TRUE(launcher->emit("net.late", {}, Tier::kEssential).ok());  // nothing after the end
  EXPECT_LE(file_size(path), kCap);

  size_t bad = 0;
  auto evs = read_lines(path, &bad);
  EXPECT_EQ(bad, 0u);
  size_t record_hits = 0;
  for (const auto& e : evs) {
    record_hits += e.value("kind", "") == "limit.hit" && e.value("limit", "") == "record";
  }
  EXPECT_EQ(record_hits, 1u);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().value("kind", ""), "session.end");
  EXPECT_EQ(count_kind(evs, "net.late"), 0u);

  // Exact accounting: written + counted over the cap = attempted, per writer.
  for (int w = 0; w < kWriters; ++w) {
    std::string source = "writer" + std::to_string(w);
    uint64_t written = 0, over_cap = 0;
    for (const auto& e : evs) {
      if (e.value("source", "") != source) {
        continue;
      }
      written += e.value("kind", "") == "fs.refused";
      if (e.value("kind", "") == "record.dropped") {
        EXPECT_EQ(e.value("rate_limited", 1u), 0u);
        over_cap = std::max(over_cap, e.value("over_cap", uint64_t{0}));
      }
    }
    EXPECT_EQ(written + over_cap, static_cast<uint64_t>(kThreads * kEach)) << source;
    EXPECT_GT(over_cap, 0u) << source;
  }
}

// A program that fills the record first (refused opens, refused connections) cannot hide what
// follows: a secret leaving and a decoy read are written in the kept part, with a rate bucket of
// their own that the flood did not spend, and the end of the session still fits after them.
TEST(RecordLimiter, AlertsAreWrittenAfterAFloodFilledTheRecord) {
  TempDir dir;
  std::string path = dir / "events.jsonl";
  constexpr uint64_t kCap = 1 << 20;
  auto log = EventLog::open(path, "s", "netproxy", {kCap, 1000});
  ASSERT_TRUE(log.ok());
  // The flood: well past the normal part, and past the net family's burst of 10000.
  for (int i = 0; i < 20000; ++i) {
    ASSERT_TRUE(log->emit("net.refused", {{"i", i}, {"pad", std::string(100, 'x')}}).ok());
  }
  ASSERT_GT(log->dropped(), 0u);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(log->emit("net.exfil", {{"credential", "GITHUB_TOKEN"}, {"i", i}}).ok());
    ASSERT_TRUE(log->append("fs.canary", R"({"kind":"fs.canary","canary":"aws"})").ok());
  }
  ASSERT_TRUE(log->report_drops().ok());
  ASSERT_TRUE(log->emit("session.end", {{"exit_code", 0}}, Tier::kLast).ok());
  auto evs = read_lines(path);
  EXPECT_EQ(count_kind(evs, "net.exfil"), 20u);
  EXPECT_EQ(count_kind(evs, "fs.canary"), 20u);
  EXPECT_EQ(count_kind(evs, "limit.hit"), 1u);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().value("kind", ""), "session.end");
  EXPECT_LE(file_size(path), kCap);

  // Alerts are bounded too: a flood of them stops within the first half of the kept part.
  TempDir dir2;
  std::string path2 = dir2 / "events.jsonl";
  auto flood = EventLog::open(path2, "s", "netproxy", {kCap, 0});
  ASSERT_TRUE(flood.ok());
  for (int i = 0; i < 20000; ++i) {
    ASSERT_TRUE(flood->emit("net.exfil", {{"i", i}, {"pad", std::string(100, 'x')}}).ok());
  }
  EXPECT_LE(file_size(path2), kCap - (RecordLimits{kCap, 0}.reserve() / 2));
  EXPECT_GT(flood->dropped(), 0u);
}

// The one event that does not fit may be far longer than limit.hit and leave room behind it: the
// limit.hit is padded over that room, so that no writer (in this process or another) finds space
// for a small event after it and writes a second limit.hit later.
TEST(RecordLimiter, TheLimitHitClosesTheNormalPartForEveryWriter) {
  TempDir dir;
  std::string path = dir / "events.jsonl";
  const RecordLimits limits{1 << 20, 0};
  const uint64_t normal_end = limits.max_bytes - limits.reserve();
  auto a = EventLog::open(path, "s", "a", limits);
  ASSERT_TRUE(a.ok());
  while (file_size(path) < normal_end - 20000) {
    ASSERT_TRUE(a->emit("fs.refused", {{"pad", std::string(1000, 'x')}}).ok());
  }
  size_t before = count_kind(read_lines(path), "fs.refused");
  ASSERT_TRUE(a->emit("fs.refused", {{"pad", std::string(60000, 'y')}}).ok());
  EXPECT_GE(file_size(path), normal_end);
  auto b = EventLog::open(path, "s", "b", limits);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->emit("fs.refused", {{"small", true}}).ok());
  ASSERT_TRUE(b->emit("fs.refused", {{"small", true}}).ok());
  size_t bad = 0;
  auto evs = read_lines(path, &bad);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(count_kind(evs, "fs.refused"), before);
  EXPECT_EQ(count_kind(evs, "limit.hit"), 1u);
  EXPECT_EQ(evs.back().value("kind", ""), "limit.hit");
  EXPECT_EQ(evs.back().value("source", ""), "a");
  EXPECT_EQ(a->dropped(), 1u);
  EXPECT_EQ(b->dropped(), 2u);
}

// A writer counts its own bytes between looks at the file: when another writer fills the file
// meanwhile, it still stops within kLookEvery and one line of the normal part's end, and closes it.
TEST(RecordLimiter, AWriterCountingItsOwnBytesStopsSoonAfterAnotherFilledTheFile) {
  TempDir dir;
  std::string path = dir / "events.jsonl";
  const RecordLimits limits{1 << 20, 0};
  const uint64_t normal_end = limits.max_bytes - limits.reserve();
  auto a = EventLog::open(path, "s", "a", limits);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->emit("fs.refused", {{"early", true}}).ok());  // a's look: the file is small
  {
    // Another writer (the lines of one that has no cap) takes the file to 100 bytes short of
    // the normal part's end.
    std::ofstream other(path, std::ios::app);
    auto line = [](uint64_t len) {
      return R"({"kind":"other","pad":")" + std::string(len - 26, 'o') + "\"}\n";
    };
    ASSERT_EQ(line(1000).size(), 1000u);
    const uint64_t target = normal_end - 100;
    uint64_t size = file_size(path);
    for (; size + 2000 <= target; size += 1000) {
      other << line(1000);
    }
    other << line(target - size);
  }
  ASSERT_EQ(file_size(path), normal_end - 100);
  size_t line_len = 0;
  for (int i = 0; i < 200; ++i) {
    uint64_t before = file_size(path);
    ASSERT_TRUE(a->emit("fs.refused", {{"i", i}, {"pad", std::string(150, 'x')}}).ok());
    if (line_len == 0 && file_size(path) > before) {
      line_len = file_size(path) - before;
    }
  }
  ASSERT_GT(line_len, 0u);
  size_t bad = 0;
  auto evs = read_lines(path, &bad);
  EXPECT_EQ(bad, 0u);
  size_t late = count_kind(evs, "fs.refused") - 1;  // a's lines after the fill
  EXPECT_LE(late * line_len, RecordLimiter::kLookEvery + line_len) << late << " lines";
  EXPECT_EQ(late + a->dropped(), 200u);
  EXPECT_EQ(count_kind(evs, "limit.hit"), 1u);
  EXPECT_EQ(evs.back().value("kind", ""), "limit.hit");
  EXPECT_LE(file_size(path), normal_end + RecordLimiter::kClosedMargin + line_len);
}

TEST(RecordLimiter, WithoutLimitsEveryEventIsWritten) {
  TempDir dir;
  std::string path = dir / "events.jsonl";
  auto log = EventLog::open(path, "s", "x", {});
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 30000; ++i) {
    ASSERT_TRUE(log->emit("fs.refused", {{"i", i}}).ok());
  }
  EXPECT_EQ(count_kind(read_lines(path), "fs.refused"), 30000u);
  EXPECT_EQ(log->dropped(), 0u);
}

}  // namespace
}  // namespace cordon::record
