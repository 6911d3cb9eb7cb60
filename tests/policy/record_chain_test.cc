// The record's hash chain on a real file: lines sealed by several processes and threads at once
// still form one chain in file order; a writer killed mid-line leaves a fragment that is reported
// as torn and that the next writer ends; a sealed line names its own version. The same through the
// record's head (events.jsonl.head): a writer killed holding its mutex, a head whose size is not
// the file's, and a file that is not a head.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "record/chain.h"
#include "record/chain_head.h"
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

TEST(RecordChain, TheChainValueIsSha256OfThePreviousValueAndTheLine) {
  // Computed apart from cordon (Python's hashlib): records written before and after any change to
  // how the digest is called must verify alike.
  std::string empty = seal("{}", kChainStart);
  EXPECT_EQ(empty,
            R"({"v":1,"chain":"9d3f7943f9ccffbb7314e9cb68bd1177dcdf09638e4d05e1bff56e50346c95de"})"
            "\n");
  std::string line = seal(R"({"kind":"x","n":1})", kChainStart);
  line.pop_back();
  ASSERT_TRUE(chain_field(line));
  EXPECT_EQ(*chain_field(line), "3072ecfcfca12730403204400399e4c8f75a097a9380e7cd82a9d9325c506891");
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

// An EventLog on its own open of `path` and of its head, as the launcher hands both to a sidecar.
EventLog adopt_with_head(const std::string& path, const std::string& source) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  auto head = open_head_file(AT_FDCWD, path + std::string(kHeadSuffix));
  if (!fd || !head.ok()) {
    ADD_FAILURE() << "open " << path << " or its head";
    return EventLog();
  }
  return EventLog::adopt(std::move(fd), "s", source, {}, std::move(head).value());
}

std::unique_ptr<ChainHead> map_head(const std::string& path) {
  auto fd = open_head_file(AT_FDCWD, path + std::string(kHeadSuffix));
  if (!fd.ok()) {
    ADD_FAILURE() << fd.error().to_string();
    return nullptr;
  }
  auto head = ChainHead::map(std::move(fd).value());
  if (!head.ok()) {
    ADD_FAILURE() << head.error().to_string();
    return nullptr;
  }
  return std::move(head).value();
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

TEST(RecordChainHead, OpenMakesAPrivateHeadThatEveryWriterChainsThrough) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  auto a = EventLog::open(path, "s", "launcher", {});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->has_head());
  struct stat st;
  ASSERT_EQ(::stat((path + ".head").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EventLog b = adopt_with_head(path, "netproxy");
  EXPECT_TRUE(b.has_head());
  ASSERT_TRUE(a->emit("session.start").ok());
  ASSERT_TRUE(b.emit("net.dns").ok());
  ASSERT_TRUE(a->emit("session.end").ok());
  // The head knows where the file ends and its last line's chain value.
  auto head = map_head(path);
  ASSERT_TRUE(head);
  ASSERT_TRUE(head->lock().ok());
  const uint64_t end = head->end();
  const std::string chain(head->chain());
  head->unlock();
  ChainReport r = verify_file(path);
  EXPECT_TRUE(r.ok()) << "line " << r.bad_line << " " << r.why;
  EXPECT_EQ(r.chained, 3u);
  EXPECT_EQ(end, file_size(path));
  EXPECT_EQ(chain, r.head);
}

TEST(RecordChainHead, TwoProcessesAppendingAtOnceThroughTheirOwnHeadsFormOneChain) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  constexpr int kProcs = 2, kEach = 2000;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      EventLog log = adopt_with_head(path, "w" + std::to_string(p));
      bool ok = log.has_head();
      for (int i = 0; i < kEach && ok; ++i) {
        ok = log.emit("net.dns", {{"p", p}, {"i", i}}).ok();
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
  EXPECT_EQ(r.lines, uint64_t{kProcs * kEach});
  EXPECT_EQ(r.chained, uint64_t{kProcs * kEach});
  EXPECT_EQ(r.torn_line, 0u);
  // Both wrote while the other did: each line's writer is in it, so count the switches.
  std::ifstream in(path);
  std::string prev, line;
  int switches = 0;
  while (std::getline(in, line)) {
    std::string w = json::parse(line)["source"];
    switches += !prev.empty() && w != prev;
    prev = w;
  }
  EXPECT_GT(switches, 0);
}

// A writer that dies holding the head's mutex (after half a line, or before writing anything):
// the next writer takes the mutex over, reads the file, ends the fragment and chains on.
TEST(RecordChainHead, AWriterKilledHoldingTheMutexIsRecoveredFrom) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  auto a = EventLog::open(path, "s", "launcher", {});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->emit("session.start").ok());
  ASSERT_TRUE(a->emit("proc.exec", {{"argv", {"sh"}}}).ok());
  for (bool half_a_line : {true, false}) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto head = map_head(path);
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
      if (!head || !fd || !head->lock().ok()) {
        _exit(1);
      }
      const std::string half = R"({"v":1,"kind":"fs.open","pa)";
      if (half_a_line && ::write(fd.get(), half.data(), half.size()) != ssize_t(half.size())) {
        _exit(1);
      }
      ::raise(SIGKILL);
      _exit(1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    // Would hang here on a mutex that is not robust.
    ASSERT_TRUE(a->emit("fs.refused", {{"path", "/w/.env"}}).ok());
  }
  EventLog b = adopt_with_head(path, "fusefs");
  ASSERT_TRUE(b.emit("session.end").ok());
  ChainReport r = verify_file(path);
  EXPECT_TRUE(r.ok()) << "line " << r.bad_line << " " << r.why;
  EXPECT_EQ(r.torn_line, 3u);  // the fragment, ended by the next line's newline
  EXPECT_EQ(r.chained, 5u);
  EXPECT_EQ(r.lines, 6u);
}

// The head's size is not the file's: a line appended without the head, or a head that lies. The
// writer reads the file's last line rather than trusting the head.
TEST(RecordChainHead, AHeadWhoseSizeIsNotTheFilesIsNotBelieved) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  auto a = EventLog::open(path, "s", "launcher", {});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->emit("session.start").ok());
  // A writer without the head (flock(2)) appends between two of a's lines.
  UniqueFd plain(::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(plain);
  EventLog b = EventLog::adopt(std::move(plain), "s", "netproxy", {});
  EXPECT_FALSE(b.has_head());
  ASSERT_TRUE(b.emit("net.dns").ok());
  ASSERT_TRUE(a->emit("proc.exec").ok());
  // A head that lies: a size short of the file's, and a chain value of no line.
  auto head = map_head(path);
  ASSERT_TRUE(head);
  ASSERT_TRUE(head->lock().ok());
  head->set(file_size(path) - 7, std::string(kChainHexLen, 'a'));
  head->unlock();
  ASSERT_TRUE(a->emit("fs.refused").ok());
  // ... and one that is past the file's end.
  ASSERT_TRUE(head->lock().ok());
  head->set(file_size(path) + 100, std::string(kChainHexLen, 'b'));
  head->unlock();
  ASSERT_TRUE(a->emit("session.end").ok());
  ChainReport r = verify_file(path);
  EXPECT_TRUE(r.ok()) << "line " << r.bad_line << " " << r.why;
  EXPECT_EQ(r.chained, 5u);
  EXPECT_EQ(r.lines, 5u);
}

TEST(RecordChainHead, AFileThatIsNotAHeadFallsBackToFlockAndSaysSo) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  for (std::string junk : {std::string("not a head\n"), std::string(4096, '\0')}) {
    ::unlink(path.c_str());
    { std::ofstream(path + ".head", std::ios::binary | std::ios::trunc) << junk; }
    ::testing::internal::CaptureStderr();
    auto a = EventLog::open(path, "s", "launcher", {});
    auto b = EventLog::open(path, "s", "fusefs", {});
    std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_FALSE(a->has_head());
    EXPECT_FALSE(b->has_head());
    if (junk.size() < 4096) {
      // Said once per process, whichever writer found it first.
      EXPECT_NE(err.find("not a head"), std::string::npos) << err;
      EXPECT_NE(err.find("under flock(2)"), std::string::npos) << err;
      EXPECT_EQ(err.find("under flock(2)"), err.rfind("under flock(2)")) << err;
    }
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(a->emit("net.dns").ok());
      ASSERT_TRUE(b->emit("fs.refused").ok());
    }
    ChainReport r = verify_file(path);
    EXPECT_TRUE(r.ok()) << "line " << r.bad_line << " " << r.why;
    EXPECT_EQ(r.chained, 6u);
  }
}

}  // namespace
}  // namespace cordon::record
