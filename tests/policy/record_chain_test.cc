// The record's hash chain on a real file: lines sealed by several processes and threads at once
// still form one chain in file order; a writer killed mid-line leaves a fragment that is reported
// as torn and that the next writer ends; a sealed line names its own version.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "record/chain.h"
#include "record/events.h"
#include "tests/support/test_env.h"

namespace cordon::record {
namespace {

using cordon::testing::TempDir;
using nlohmann::json;

ChainReport verify_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  ChainVerifier v;
  uint64_t n = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    bool complete = nl != std::string::npos;
    size_t end = complete ? nl : text.size();
    v.feed(++n, std::string_view(text).substr(at, end - at), complete);
    at = end + 1;
  }
  return v.finish();
}

TEST(RecordChain, SealedLineCarriesVersionAndAChainOverItsContent) {
  const std::string object = R"({"kind":"x","n":1})";
  std::string a = seal(object, kChainStart);
  ASSERT_EQ(a.back(), '\n');
  // The cap's padding is computed from this size: it must be exact.
  EXPECT_EQ(a.size(), object.size() + kSealOverhead);
  EXPECT_EQ(seal(object, kChainStart, 10).size(), object.size() + kSealOverhead + 10);
  json j = json::parse(a);
  EXPECT_EQ(j["v"], kSchemaVersion);
  EXPECT_EQ(j["kind"], "x");
  auto hex = chain_field(std::string_view(a).substr(0, a.size() - 1));
  ASSERT_TRUE(hex);
  EXPECT_EQ(*hex, j["chain"].get<std::string>());
  // The same content after another line chains differently; padding is covered by the chain.
  EXPECT_NE(seal(R"({"kind":"x","n":1})", *hex), a);
  std::string padded = seal(R"({"kind":"x","n":1})", kChainStart, 10);
  EXPECT_NE(padded.find("          ,\"chain\""), std::string::npos) << padded;
  EXPECT_TRUE(json::accept(padded));
  EXPECT_FALSE(chain_field(R"({"kind":"x","chain":"zz"})"));
}

TEST(RecordChain, ProcessesAndThreadsWritingAtOnceFormOneChainInFileOrder) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  constexpr int kProcs = 3, kThreads = 2, kEach = 300;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // One open per process, shared by its threads (as in netproxy and the launcher).
      auto log = EventLog::open(path, "s", "w" + std::to_string(p), {});
      if (!log.ok()) {
        _exit(2);
      }
      std::vector<std::thread> ts;
      bool ok = true;
      for (int t = 0; t < kThreads; ++t) {
        ts.emplace_back([&, t] {
          for (int i = 0; i < kEach; ++i) {
            ok = log->emit("net.dns", {{"t", t}, {"i", i}}).ok() && ok;
          }
        });
      }
      for (auto& t : ts) {
        t.join();
      }
      _exit(ok ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(k, &status, 0), k);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  ChainReport r = verify_file(path);
  EXPECT_TRUE(r.ok()) << "line " << r.bad_line << " " << r.why;
  EXPECT_EQ(r.chained, uint64_t{kProcs * kThreads * kEach});
  EXPECT_EQ(r.torn_line, 0u);
}

TEST(RecordChain, AFragmentLeftMidLineIsTornAndTheNextWriterEndsIt) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  auto a = EventLog::open(path, "s", "launcher", {});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->emit("session.start").ok());
  ASSERT_TRUE(a->emit("proc.exec", {{"argv", {"sh"}}}).ok());
  {
    std::ofstream o(path, std::ios::binary | std::ios::app);
    o << R"({"v":1,"kind":"fs.open","pa)";  // a writer killed mid-line
  }
  ChainReport torn = verify_file(path);
  EXPECT_TRUE(torn.ok()) << torn.why;
  EXPECT_EQ(torn.torn_line, 3u);
  EXPECT_EQ(torn.chained, 2u);

  auto b = EventLog::open(path, "s", "fusefs", {});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->emit("fs.refused", {{"path", "/w/.env"}}).ok());
  ASSERT_TRUE(a->emit("session.end").ok());  // a's cached head is stale: it reads the file's
  ChainReport r = verify_file(path);
  EXPECT_TRUE(r.ok()) << "line " << r.bad_line << " " << r.why;
  EXPECT_EQ(r.chained, 4u);
  EXPECT_EQ(r.torn_line, 3u);
  EXPECT_EQ(r.lines, 5u);
}

TEST(RecordChain, AWriteOnlyFdStillChainsToOtherWriters) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  auto a = EventLog::open(path, "s", "launcher", {});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->emit("session.start").ok());
  UniqueFd wo(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(wo);
  EventLog b = EventLog::adopt(std::move(wo), "s", "netproxy", {});
  ASSERT_TRUE(b.emit("net.dns").ok());
  ASSERT_TRUE(a->emit("session.end").ok());
  ChainReport r = verify_file(path);
  EXPECT_TRUE(r.ok()) << "line " << r.bad_line << " " << r.why;
  EXPECT_EQ(r.chained, 3u);
}

}  // namespace
}  // namespace cordon::record
